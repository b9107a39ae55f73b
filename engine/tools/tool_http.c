#include "tools/tool_http.h"

#include <errno.h>
#include <string.h>

#include "base/httpc.h"
#include "base/util.h"

static bool cancelled(void *ctx)
{
    const atomic_int *cancel = ctx;

    return atomic_load(cancel) != 0;
}

/* GET without a body; DELETE with an optional one; POST and PUT always with one. */
static int method_ok(const struct tool_http_request *rq)
{
    if (strcmp(rq->method, "GET") == 0)
        return rq->body ? -EINVAL : 0;
    if (strcmp(rq->method, "DELETE") == 0 || strcmp(rq->method, "POST") == 0 ||
        strcmp(rq->method, "PUT") == 0)
        return 0;
    return -EINVAL;
}

int tool_http_perform(CURL *h, const struct tool_http_request *rq, struct httpc_response *ret,
                      char *err, size_t errlen)
{
    const char *lines[TOOL_HTTP_HEADERS_MAX + 1];
    struct httpc_request hrq = {
        .method = rq->method,
        .url = rq->url,
        .headers = lines,
        .body = rq->body,
        .body_len = rq->body_len,
        .timeout_ms = rq->timeout_ms ? rq->timeout_ms : HTTPC_TIMEOUT_DEFAULT_MS,
        .max_body = rq->max_body,
        .truncate_ok = rq->truncate_ok,
        .ca_file = rq->ca_file,
        .no_proxy = true, /* a proxy would bypass the SSRF pin */
        .pin_resolve = rq->pin_resolve,
        .pin_addr = rq->pin_addr,
        .capture_header = rq->capture_header,
        .aborted = rq->cancel ? cancelled : NULL,
        .abort_ctx = (void *)rq->cancel,
        .on_data = rq->on_data,
        .on_data_ctx = rq->on_data_ctx,
    };
    size_t n = 0;

    if (!rq->method || !rq->url || rq->max_body == 0 || rq->nheaders > TOOL_HTTP_HEADERS_MAX)
        return util_fail(-EINVAL, err, errlen, "invalid request");
    if (method_ok(rq) < 0)
        return util_fail(-EINVAL, err, errlen, "unsupported method or a body on GET");
    if (!rq->body && strcmp(rq->method, "DELETE") != 0 && strcmp(rq->method, "GET") != 0)
        hrq.body = ""; /* POST and PUT send an empty body rather than none */
    hrq.connect_timeout_ms =
        hrq.timeout_ms < TOOL_HTTP_CONNECT_MS_MAX ? hrq.timeout_ms : TOOL_HTTP_CONNECT_MS_MAX;
    /* no "Expect: 100-continue" round trip for big bodies */
    lines[n++] = "Expect:";
    for (size_t i = 0; i < rq->nheaders; i++) {
        const char *colon = strchr(rq->headers[i], ':');

        if (!colon || !httpc_header_value_ok(colon + 1))
            return util_fail(-EINVAL, err, errlen, "invalid header line");
        lines[n++] = rq->headers[i];
    }
    hrq.nheaders = n;
    return httpc_perform(h, &hrq, ret, err, errlen);
}
