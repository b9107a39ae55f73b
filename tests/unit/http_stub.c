#include "http_stub.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_http.h"

struct http_stub {
    struct fake_http *server;
    http_stub_handler fn;
    void *ctx;
    pthread_mutex_t one_at_a_time; /* the handler sees one request at a time */
    pthread_mutex_t lock;          /* kept, nkept */
    struct http_stub_request kept[HTTP_STUB_KEEP];
    size_t nkept;
};

static void request_free(struct http_stub_request *rq)
{
    free(rq->headers);
    free(rq->body);
}

/* fake_http's handler: the request as an http_stub_request, the stub's reply as a response. */
static void relay(void *ctx, size_t n, const struct fake_request *req, struct fake_response *resp)
{
    struct http_stub *s = ctx;
    struct http_stub_request rq;
    struct http_stub_reply reply;

    (void)n;
    memset(&rq, 0, sizeof(rq));
    memset(&reply, 0, sizeof(reply));
    snprintf(rq.method, sizeof(rq.method), "%s", req->method);
    snprintf(rq.target, sizeof(rq.target), "%s", req->path);
    rq.headers = strdup(req->headers ? req->headers : "");
    rq.body = malloc(req->body_len + 1);
    if (rq.body) {
        memcpy(rq.body, req->body, req->body_len + 1);
        rq.body_len = req->body_len;
    }
    reply.status = 200;
    pthread_mutex_lock(&s->one_at_a_time);
    s->fn(s->ctx, &rq, &reply);
    pthread_mutex_unlock(&s->one_at_a_time);
    pthread_mutex_lock(&s->lock);
    if (s->nkept < HTTP_STUB_KEEP && rq.headers && rq.body) {
        s->kept[s->nkept++] = rq;
        memset(&rq, 0, sizeof(rq));
    }
    pthread_mutex_unlock(&s->lock);
    request_free(&rq);

    resp->status = reply.status;
    resp->content_type[0] = '\0';
    snprintf(resp->extra_headers, sizeof(resp->extra_headers), "Connection: close\r\n%s",
             reply.headers);
    resp->body = reply.body ? reply.body : strdup("");
    resp->body_len = reply.body ? reply.body_len : 0;
    resp->close = true;
    resp->hang = reply.hang;
}

struct http_stub *http_stub_start(http_stub_handler fn, void *ctx)
{
    struct http_stub *s = calloc(1, sizeof(*s));

    if (!s)
        return NULL;
    s->fn = fn;
    s->ctx = ctx;
    pthread_mutex_init(&s->one_at_a_time, NULL);
    pthread_mutex_init(&s->lock, NULL);
    s->server = fake_http_start(relay, s);
    if (!s->server) {
        pthread_mutex_destroy(&s->one_at_a_time);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
    }
    return s;
}

void http_stub_stop(struct http_stub *s)
{
    if (!s)
        return;
    fake_http_stop(s->server);
    for (size_t i = 0; i < s->nkept; i++)
        request_free(&s->kept[i]);
    pthread_mutex_destroy(&s->one_at_a_time);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int http_stub_port(const struct http_stub *s)
{
    return fake_http_port(s->server);
}

void http_stub_url(const struct http_stub *s, const char *path, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s%s", fake_http_url(s->server), path);
}

size_t http_stub_count(const struct http_stub *s)
{
    size_t n;

    pthread_mutex_lock((pthread_mutex_t *)&s->lock);
    n = s->nkept;
    pthread_mutex_unlock((pthread_mutex_t *)&s->lock);
    return n;
}

const struct http_stub_request *http_stub_get(const struct http_stub *s, size_t i)
{
    return i < http_stub_count(s) ? &s->kept[i] : NULL;
}

bool http_stub_header(const struct http_stub_request *rq, const char *name, char *out,
                      size_t outlen)
{
    struct fake_request view = {.headers = rq->headers};

    return fake_request_header(&view, name, out, outlen);
}
