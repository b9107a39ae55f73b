/*
 * keeper_relay — the lines between the harness, the attached worker and the sandbox's tool
 * channel (keeper_relay.h).
 */
#include "keeper_relay.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "keeper_claim.h"
#include "proto/acp.h"
#include "proto/keeper_proto.h"

static void to_child(struct keeper *k, const char *line, size_t len)
{
    /* a harness that does not read its stdin fills this queue: limited */
    if (k->child_in < 0)
        return;
    if ((buf_append(&k->child_stdin, line, len) < 0 ||
         buf_append_char(&k->child_stdin, '\n') < 0) &&
        keeper_sandbox_log_allowed(k))
        log_warn("dropping a %zu-byte line: queue full", len);
}

static void encode_to_child(struct keeper *k, struct buf *line)
{
    if (line->len > 0 && line->data[line->len - 1] == '\n')
        line->len--;
    to_child(k, line->data, line->len);
    buf_release(line);
}

/*
 * Answer the harness while no worker is attached: the keeper is deliberately small and dumb,
 * it rejects permission requests, answers other requests -32601 and drops notifications.
 */
static void answer_alone(struct keeper *k, struct acp_msg *m)
{
    struct buf out;

    buf_init(&out, KEEPER_REPLY_MAX);
    if (m->kind == ACP_REQUEST && strcmp(m->method, "session/request_permission") == 0) {
        json_object *res = json_object_new_object(), *outcome = json_object_new_object();
        json_object *opts = jsonx_get(m->params, "options");
        const char *reject = NULL;

        for (size_t i = 0; opts && i < json_object_array_length(opts); i++) {
            json_object *o = json_object_array_get_idx(opts, i);
            const char *kind = jsonx_str(o, "kind");
            if (kind && strncmp(kind, "reject", 6) == 0) {
                reject = jsonx_str(o, "optionId");
                break;
            }
        }
        if (reject) {
            json_object_object_add(outcome, "outcome", json_object_new_string("selected"));
            json_object_object_add(outcome, "optionId", json_object_new_string(reject));
        } else {
            json_object_object_add(outcome, "outcome", json_object_new_string("cancelled"));
        }
        json_object_object_add(res, "outcome", outcome);
        acp_encode_result(&out, m->id, res);
        json_object_put(res);
        if (keeper_sandbox_log_allowed(k))
            log_info("rejected a permission request between turns");
    } else if (m->kind == ACP_REQUEST) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Method not found: %.120s", m->method);
        acp_encode_error(&out, m->id, ACP_METHOD_NOT_FOUND, msg);
    } else {
        if (m->kind == ACP_RESPONSE && k->prompt_in_flight) {
            char id[64];
            snprintf(id, sizeof(id), "%s", jsonx_text(m->id, NULL));
            if (strcmp(id, k->prompt_id) == 0)
                k->prompt_in_flight = false;
        }
        k->dropped++;
        log_debug("dropped a harness message between turns");
        buf_release(&out);
        return;
    }
    encode_to_child(k, &out);
}

void keeper_relay_to_worker(struct keeper *k, const struct keeper_msg *m)
{
    size_t mark = k->client_out.len;
    int r;

    if (k->turn.held) {
        struct buf kept;

        buf_init(&kept, m->payload_len + 32);
        if (keeper_proto_encode(m, &kept) == 0)
            keeper_turn_keep(k, kept.data, kept.len);
        buf_release(&kept);
        return;
    }
    if (k->client_fd < 0)
        return;
    r = keeper_proto_encode(m, &k->client_out);
    if (r == -E2BIG && keeper_sandbox_log_allowed(k))
        log_warn("dropping a %zu-byte '%s' line: queue full", m->payload_len,
                 keeper_proto_kind_name(m->kind));
    if (r < 0)
        k->dropped++;
    else
        keeper_turn_keep(k, k->client_out.data + mark, k->client_out.len - mark);
}

/* A harness line for the worker: only an ACP line (one that cannot pose as a control line). */
static void relay_to_client(struct keeper *k, const char *line, size_t len)
{
    struct keeper_msg m = {.kind = KEEPER_MSG_ACP, .payload = line, .payload_len = len};

    keeper_relay_to_worker(k, &m);
}

/*
 * The harness answered the prompt: the sandbox's limit counters as of now, for the attached
 * worker, right before that answer (proto/keeper_proto.h "#limits"). A held turn gets none:
 * the worker that adopts it reads the counters itself.
 */
static void limits_verdict(struct keeper *k)
{
    const char *code;

    if (!sandbox_tripwire_armed(&k->trip) || k->client_fd < 0 || k->turn.held)
        return;
    code = sandbox_tripwire_check(&k->trip);
    keeper_control_to_client(k, &(struct keeper_msg){.kind = KEEPER_MSG_LIMITS,
                                                     .payload = code,
                                                     .payload_len = strlen(code)});
}

static void on_child_line(struct keeper *k, char *line, size_t len)
{
    struct acp_msg m;
    char err[128];

    if (k->client_fd >= 0 || k->turn.held) {
        if (strstr(line, "\"method\"") && strstr(line, "\"id\"") &&
            acp_decode(line, len, &m, err, sizeof(err)) == 0) {
            if (m.kind == ACP_REQUEST && k->npending < PENDING_MAX)
                k->pending[k->npending++] = strdup(line);
            acp_msg_release(&m);
        }
        if (k->prompt_in_flight && len > 0 && line[0] == '{' && strstr(line, k->prompt_id)) {
            if (acp_decode(line, len, &m, err, sizeof(err)) == 0) {
                if (m.kind == ACP_RESPONSE && strcmp(jsonx_text(m.id, NULL), k->prompt_id) == 0) {
                    k->prompt_in_flight = false;
                    limits_verdict(k);
                }
                acp_msg_release(&m);
            }
        }
        relay_to_client(k, line, len);
        return;
    }
    if (acp_decode(line, len, &m, err, sizeof(err)) < 0) {
        k->dropped++;
        return;
    }
    answer_alone(k, &m);
    acp_msg_release(&m);
}

static void track_client_request(struct keeper *k, const char *line, size_t len)
{
    struct acp_msg m;
    char err[128];
    const char *sid;

    if (!strstr(line, "\"session/prompt\""))
        return;
    if (acp_decode(line, len, &m, err, sizeof(err)) < 0)
        return;
    if (m.kind == ACP_REQUEST && strcmp(m.method, "session/prompt") == 0) {
        k->prompt_in_flight = true;
        snprintf(k->prompt_id, sizeof(k->prompt_id), "%s", jsonx_text(m.id, NULL));
        sid = jsonx_str(m.params, "sessionId");
        snprintf(k->acp_session, sizeof(k->acp_session), "%s", sid ? sid : "");
    }
    acp_msg_release(&m);
}

/* The worker answered a relayed request: it is no longer pending (true when it was). */
static bool forget_pending(struct keeper *k, const char *line, size_t len)
{
    struct acp_msg m, p;
    char err[128];
    bool found = false;

    if (acp_decode(line, len, &m, err, sizeof(err)) < 0)
        return false;
    for (size_t i = 0; m.kind == ACP_RESPONSE && i < k->npending; i++) {
        if (acp_decode(k->pending[i], strlen(k->pending[i]), &p, err, sizeof(err)) < 0)
            continue;
        if (strcmp(jsonx_text(p.id, NULL), jsonx_text(m.id, NULL)) == 0) {
            free(k->pending[i]);
            k->pending[i] = k->pending[--k->npending];
            acp_msg_release(&p);
            found = true;
            break;
        }
        acp_msg_release(&p);
    }
    acp_msg_release(&m);
    return found;
}

/*
 * The worker detached with requests of the harness unanswered: answer them as between turns
 * (a parked approval is the exception: its requests stay open on purpose, see "#await").
 */
static void answer_pending(struct keeper *k, bool keep)
{
    for (size_t i = 0; i < k->npending; i++) {
        struct acp_msg m;
        char err[128];

        if (!keep && acp_decode(k->pending[i], strlen(k->pending[i]), &m, err, sizeof(err)) == 0) {
            answer_alone(k, &m);
            acp_msg_release(&m);
        }
        free(k->pending[i]);
    }
    k->npending = 0;
}

/* A claimed shell: its sandbox starts now, and the worker hears "#hello" with its pid. */
static bool shell_start(struct keeper *k, struct keeper_claim *c)
{
    struct keeper_msg hello = {.kind = KEEPER_MSG_HELLO, .keeper_pid = (int32_t)getpid()};
    char err[sizeof(k->fail) - 16];

    k->claimed = c->sandbox;
    k->spec.sandbox = c->sandbox;
    memcpy(k->claimed_harness, c->harness, sizeof(k->claimed_harness));
    k->spec.harness = k->claimed_harness;
    if (keeper_start_sandbox(k, err, sizeof(err)) < 0) {
        snprintf(k->fail, sizeof(k->fail), "shell: %s", err);
        log_warn("%s: tearing down", k->fail);
        return false;
    }
    k->shell = false;
    keeper_slot_set_pids(k);
    hello.sandbox_pid = (int32_t)k->child;
    keeper_control_to_client(k, &hello);
    return true;
}

/* "#claim": a spare is bound to its session (keeper_claim.c); a refused claim ends it. */
static bool claim(struct keeper *k, const struct keeper_msg *m)
{
    struct keeper_claim c;
    char err[sizeof(k->fail) - 16];

    if (keeper_claim_apply(&k->spec, k->provider, &k->proc, m->payload, m->payload_len, &c, err,
                           sizeof(err)) < 0) {
        snprintf(k->fail, sizeof(k->fail), "spare claim: %s", err);
        log_warn("%s: tearing down", k->fail);
        return false;
    }
    k->idle_ms = (int64_t)c.idle_ms;
    k->per_turn = c.per_turn;
    if (c.sandbox)
        return shell_start(k, &c);
    return true;
}

static bool on_client_line(struct keeper *k, char *line, size_t len)
{
    struct keeper_msg m;
    bool answered;

    if (keeper_proto_decode(line, len, &m) < 0) {
        log_debug("dropping a malformed worker line");
        return true;
    }
    /* a held turn is for a worker that adopts it; anyone else ends the hold first */
    if (k->turn.held && m.kind != KEEPER_MSG_ADOPT)
        keeper_relay_abandon(k);
    switch (m.kind) {
    case KEEPER_MSG_DESTROY:
        keeper_turn_end(k);
        return false;
    case KEEPER_MSG_TURN:
        keeper_turn_begin(k, m.payload, m.payload_len);
        return true;
    case KEEPER_MSG_ADOPT:
        keeper_turn_adopt(k, m.payload, m.payload_len);
        return true;
    case KEEPER_MSG_PARK:
    case KEEPER_MSG_AWAIT:
        keeper_turn_end(k);
        /* idle, or a prompt that waits on an approval (kept in flight) */
        k->idle_ms = (int64_t)m.ms;
        k->per_turn = false;
        k->parked = true;
        k->awaiting = m.kind == KEEPER_MSG_AWAIT;
        k->prompt_in_flight = false;
        answer_pending(k, k->awaiting);
        if (!k->awaiting)
            keeper_channel_detached(&k->channel);
        keeper_sandbox_busy(k, k->awaiting);
        return true;
    case KEEPER_MSG_TOOL:
        keeper_channel_from_worker(&k->channel, m.payload, m.payload_len);
        return true;
    case KEEPER_MSG_ACP:
        track_client_request(k, line, len);
        answered = k->npending && !strstr(line, "\"method\"") && forget_pending(k, line, len);
        /* an adopted turn's replay answers again what the dead worker answered: dropped */
        if (k->turn.adopted && !answered && !strstr(line, "\"method\"")) {
            log_debug("dropping an answer to a request that is no longer open");
            return true;
        }
        to_child(k, line, len);
        return true;
    case KEEPER_MSG_CLAIM:
        return claim(k, &m);
    case KEEPER_MSG_MODEL_SYNC:
        keeper_model_sync(k);
        return true;
    default:
        log_debug("ignoring a worker '%s' line", keeper_proto_kind_name(m.kind));
        return true;
    }
}

static void cancel_in_flight(struct keeper *k)
{
    json_object *params;
    struct buf out;

    if (!k->prompt_in_flight)
        return;
    params = json_object_new_object();
    json_object_object_add(params, "sessionId", json_object_new_string(k->acp_session));
    buf_init(&out, 4096);
    acp_encode_notification(&out, "session/cancel", params);
    json_object_put(params);
    encode_to_child(k, &out);
    log_info("worker vanished mid-turn: cancelled the prompt of session '%s'", k->acp_session);
    keeper_slot_mark_broken(k);
}

void keeper_relay_abandon(struct keeper *k)
{
    keeper_turn_end(k);
    answer_pending(k, false);
    cancel_in_flight(k);
    keeper_slot_orphaned(k);
    keeper_channel_detached(&k->channel);
    keeper_sandbox_busy(k, false);
    k->deadline = util_now_ms() + (k->per_turn ? 1 : k->idle_ms);
    log_info("the held turn was not adopted in time: cancelled");
}

void keeper_relay_client_gone(struct keeper *k)
{
    if (k->client_fd < 0)
        return;
    close(k->client_fd);
    k->client_fd = -1;
    acp_lines_release(&k->client_in);
    buf_release(&k->client_out);
    if (!k->parked && keeper_turn_hold(k))
        return; /* the harness goes on; its open requests wait for the adopter */
    keeper_turn_end(k);
    answer_pending(k, false);
    if (!k->parked) {
        cancel_in_flight(k);
        keeper_slot_orphaned(k);
        keeper_channel_detached(&k->channel);
        keeper_sandbox_busy(k, false);
    }
    /* a per-turn environment whose worker vanished has nobody to serve: end it now */
    k->deadline = util_now_ms() + (k->per_turn && !k->parked ? 1 : k->idle_ms);
}

void keeper_relay_accept(struct keeper *k)
{
    struct keeper_msg hello = {.kind = KEEPER_MSG_HELLO,
                               .keeper_pid = (int32_t)util_self_pid(),
                               .sandbox_pid = (int32_t)k->child};
    int fd = accept4(k->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

    if (fd == -1)
        return;
    if (k->client_fd >= 0) {
        struct keeper_msg busy = {.kind = KEEPER_MSG_BUSY};

        (void)keeper_proto_write(fd, &busy);
        close(fd);
        return;
    }
    k->client_fd = fd;
    k->parked = false;
    k->awaiting = false;
    if (!k->turn.held)
        k->deadline = 0; /* a held turn's window runs until "#adopt" */
    keeper_sandbox_busy(k, true);
    acp_lines_init(&k->client_in, ACP_LINE_MAX_DEFAULT);
    buf_init(&k->client_out, KEEPER_QUEUE_MAX);
    keeper_control_to_client(k, &hello);
    keeper_model_attached(k); /* calls that ended while nobody was attached */
    /* anything the harness said while nobody listened is gone; a new turn starts clean */
}

void keeper_relay_drain_stderr(struct keeper *k)
{
    char chunk[16384];

    for (;;) {
        ssize_t n = read(k->child_err, chunk, sizeof(chunk));
        if (n == -1 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0) {
                close(k->child_err);
                k->child_err = -1;
            }
            return;
        }
        if (k->log_fd >= 0 && k->log_bytes < HARNESS_LOG_MAX) {
            size_t take = (size_t)n;
            if (take > HARNESS_LOG_MAX - k->log_bytes)
                take = HARNESS_LOG_MAX - k->log_bytes;
            (void)util_write_all(k->log_fd, chunk, take);
            k->log_bytes += take;
        }
    }
}

/* A harness line longer than the relay takes: the environment ends, the worker is told why. */
static void harness_line_too_long(struct keeper *k, bool *stop)
{
    snprintf(k->fail, sizeof(k->fail), "harness output line over %u bytes", ACP_LINE_MAX_DEFAULT);
    log_warn("%s: tearing down", k->fail);
    *stop = true;
}

void keeper_relay_read(struct keeper *k, int *fd, struct acp_lines *lines, bool from_child,
                       bool *stop)
{
    ssize_t n = acp_lines_fill(lines, *fd);
    char *line;
    size_t len;
    int r;

    if (n == -EAGAIN)
        return;
    if (n == -E2BIG && from_child) {
        harness_line_too_long(k, stop);
        return;
    }
    if (n <= 0) {
        if (from_child) {
            close(*fd);
            *fd = -1;
        } else {
            keeper_relay_client_gone(k);
        }
        return;
    }
    while ((r = acp_lines_next(lines, &line, &len)) == 1) {
        if (from_child) {
            on_child_line(k, line, len);
        } else if (!on_client_line(k, line, len)) {
            *stop = true;
            free(line);
            return;
        }
        free(line);
    }
    if (r == -E2BIG && from_child)
        harness_line_too_long(k, stop);
    else if (r < 0) {
        log_warn("dropping a connection: %s", strerror(-r));
        if (from_child)
            *stop = true;
        else
            keeper_relay_client_gone(k);
    }
}
