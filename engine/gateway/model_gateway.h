/*
 * model_gateway — one sandbox's model endpoint (README "The model gateway"): the harness talks
 * plain HTTP/1.1 to GATEWAY_SANDBOX_ORIGIN, a listening socket in the sandbox's own network
 * namespace that only that sandbox reaches (sandbox_net.h), holding a placeholder key; the
 * keeper forwards each call to the run's real endpoint over TLS (base/httpc, libcurl) with the
 * real credential (gateway_route.h), and streams the answer back as it arrives: every piece of
 * the body is written to the harness (chunked) in the callback that received it, nothing of a
 * stream is held back. While it passes, the provider's usage is read from it
 * (gateway_usage.h) and each call is reported: the model, the status, the usage, the time.
 *
 * Threads: the keeper's poll loop accepts (model_gateway_fds / model_gateway_handle, never
 * blocking) and each connection gets a thread of its own (at most MODEL_GATEWAY_CONNS_MAX;
 * beyond that the listener is not polled and connections wait in its backlog) that reads its
 * requests (keep-alive), checks them, forwards them with a curl handle of its own (so the
 * upstream connection is kept alive too) and writes the answers. Request bodies are read whole
 * (capped by the route, and all connections together by MODEL_GATEWAY_BODY_BUDGET) because the
 * model in them is checked and a Chat Completions stream gets stream_options.include_usage;
 * answers are never held.
 *
 * Reports: a connection thread queues each call's report, before the bytes that end the
 * answer reach the harness (the usage event of a stream, or the end of the body), and wakes
 * the poll loop; model_gateway_handle delivers them in order to the callback, in the keeper's
 * thread. So a harness that saw its answer end cannot have made the keeper see anything that
 * the report of that call is not ahead of (model_gateway_flush delivers what is queued now).
 *
 * A call the endpoint never answered (no connection, TLS failure, timeout before the head) is
 * reset, so the harness sees the failure it would see calling the endpoint itself; one cut
 * mid-answer ends without its last chunk. Without a route (a spare before its claim) every
 * call is refused. The credential lives in
 * the keeper's memory only: never in a report, a log line or an error the sandbox sees.
 */
#ifndef AR_MODEL_GATEWAY_H
#define AR_MODEL_GATEWAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "gateway/gateway_usage.h"

#define MODEL_GATEWAY_CONNS_MAX 16
#define MODEL_GATEWAY_BODY_BUDGET (64u * 1024 * 1024) /* request bodies held at once */
#define MODEL_GATEWAY_IDLE_MS 300000                  /* a keep-alive connection's idle wait */
#define MODEL_GATEWAY_QUEUE_MAX 256                   /* reports waiting for the poll loop */
#define MODEL_GATEWAY_FDS 2

struct model_gateway;

enum model_gateway_event {
    MODEL_GATEWAY_CALL = 0, /* forwarded: status (0 when no answer came) and usage */
    MODEL_GATEWAY_REFUSED,  /* refused by the route or the gateway: status and why */
};

struct model_gateway_report {
    enum model_gateway_event event;
    enum gateway_api api;
    long status; /* the provider's (CALL) or the gateway's (REFUSED, failed CALL) */
    int error;   /* CALL without an answer: -errno of the transport failure */
    bool stream; /* the answer was an event stream */
    struct gateway_usage_counts usage;
    char model[GATEWAY_USAGE_MODEL_MAX]; /* the request's "model" ("" when none) */
    char why[256];                       /* REFUSED / failed: what happened (no credential) */
    int64_t ms;                          /* request read to answer ended */
    int64_t first_byte_ms;               /* request read to the answer's head (-1: none) */
    uint64_t bytes_up, bytes_down;
};

typedef void (*model_gateway_report_fn)(void *ctx, const struct model_gateway_report *r);

/*
 * listen_fd: the listening socket in the sandbox's namespace (borrowed: the caller closes it
 * after model_gateway_free). report may be NULL.
 */
int model_gateway_new(int listen_fd, model_gateway_report_fn report, void *ctx,
                      struct model_gateway **ret);
/* Stop every connection (their calls are cut) and free. NULL is a no-op. */
void model_gateway_free(struct model_gateway *g);
/*
 * Route calls by route (gateway_route_encode's object; NULL: refuse every call) from the next
 * request on. -EINVAL with err naming the problem; the old route stays then.
 */
int model_gateway_set_route(struct model_gateway *g, json_object *route, char *err, size_t errlen);
/* The poll loop: fds to watch for POLLIN (at most MODEL_GATEWAY_FDS), the work when woken. */
size_t model_gateway_fds(const struct model_gateway *g, int *fds, size_t max);
void model_gateway_handle(struct model_gateway *g);
/* Deliver the reports queued now (without accepting). */
void model_gateway_flush(struct model_gateway *g);
/* Calls being forwarded right now. */
unsigned model_gateway_active(const struct model_gateway *g);

#endif
