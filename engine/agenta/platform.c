/*
 * platform — a session run as a participant of Agenta's platform (platform.h): admission, the
 * records and interaction rows of the turn, the turn's start and end; attachments are
 * platform_attach.c's, the turns ledger platform_ledger.c's.
 */
#include "agenta/platform.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agenta/agenta_api.h"
#include "agenta/heartbeat.h"
#include "agenta/ids.h"
#include "agenta/platform_attach.h"
#include "agenta/platform_ledger.h"
#include "agenta/reconstruct.h"
#include "agenta/records.h"
#include "agenta/records_incomplete.h"
#include "agenta/records_outbox.h"
#include "agenta/redact.h"
#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"

/* ---- pure helpers ------------------------------------------------------------------------ */

const char *platform_harness_kind(const struct run_request *req)
{
    switch (req->harness) {
    case HARNESS_PI:
        return req->harness_name && strcmp(req->harness_name, "pi_agenta") == 0 ? "pi_agenta"
                                                                                : "pi_core";
    case HARNESS_CLAUDE:
        return "claude";
    case HARNESS_CODEX:
        return "codex";
    case HARNESS_OPENCODE:
        return "opencode"; /* not one of Agenta's kinds yet: its API answers 422, logged */
    default:
        return NULL;
    }
}

/* ---- the run ------------------------------------------------------------------------------- */

struct token_entry {
    char tool_call_id[128];
    char token[128];
};

struct platform {
    const struct agenta_config *cfg;
    struct agenta_api *api;
    struct redact *rd;
    struct heartbeat *hb;
    struct records *rec;
    struct platform_ledger *ledger;
    char *key;
    char *session_id;
    char *turn_id;
    char span_id[17];
    const char *harness_kind;
    char trace_id[33];
    json_object *run_context; /* references of the request's, which a rebuild may replace */
    json_object *parameters;
    atomic_bool interrupted;
    bool finished;
    char agent_session[128];
    struct token_entry tokens[PLATFORM_TOKENS_MAX];
    size_t ntokens;
};

int platform_worker_start(const struct engine_config *cfg)
{
    char dir[1024];
    int n;

    if (!cfg->agenta || !cfg->agenta->enabled)
        return 0;
    n = snprintf(dir, sizeof(dir), "%s/%s", cfg->state_dir, PLATFORM_INCOMPLETE_DIR);
    if (n < 0 || (size_t)n >= sizeof(dir))
        return -ENAMETOOLONG;
    return records_incomplete_dir(dir);
}

int platform_worker_stop(int64_t deadline_ms)
{
    int r = records_outbox_drain_all(deadline_ms);
    int lr = platform_ledger_wait_all(deadline_ms);

    return r < 0 ? r : lr;
}

static void fail_run(struct event_stream *es, struct run_result *res, const char *code,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void fail_run(struct event_stream *es, struct run_result *res, const char *code,
                     const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    event_emit(es, event_error(msg, code));
    run_result_fail(res, "%s", msg);
}

static const struct chat_message *tail_user(const struct run_request *req)
{
    const struct chat_message *m;

    if (req->nmessages == 0)
        return NULL;
    m = &req->messages[req->nmessages - 1];
    return m->role && strcmp(m->role, "user") == 0 ? m : NULL;
}

/* The new message's attachment references: at most the configured number, canonical ids. */
static int check_attachments(const struct agenta_config *cfg, const struct run_request *req,
                             struct event_stream *es, struct run_result *res)
{
    const struct chat_message *m = tail_user(req);
    size_t n = 0;

    for (size_t i = 0; m && i < m->nblocks; i++)
        if (m->blocks[i].type == BLOCK_ATTACHMENT && m->blocks[i].attachment_id)
            n++;
    if (n > cfg->attachments_max_per_turn) {
        fail_run(es, res, "runner_error", "A user turn may carry at most %u attachments.",
                 cfg->attachments_max_per_turn);
        return AR_E_INVALID_REQUEST;
    }
    for (size_t i = 0; m && i < m->nblocks; i++) {
        const struct content_block *b = &m->blocks[i];

        if (b->type != BLOCK_ATTACHMENT || !b->attachment_id ||
            ids_canonical_uuid(b->attachment_id))
            continue;
        event_emit(es,
                   platform_attach_event(b->attachment_id, "failed", "contract_violation", NULL));
        fail_run(es, res, "runner_error",
                 "Attachment reference is invalid: attachmentId must be a canonical UUID.");
        return AR_E_INVALID_REQUEST;
    }
    return 0;
}

static void on_interrupted(void *ctx)
{
    struct platform *p = ctx;

    atomic_store(&p->interrupted, true);
}

void platform_agent_session(struct platform *p, const char *acp_session)
{
    if (p && acp_session && strlen(acp_session) < sizeof(p->agent_session))
        snprintf(p->agent_session, sizeof(p->agent_session), "%s", acp_session);
}

bool platform_interrupted(struct platform *p)
{
    return p && atomic_load(&p->interrupted);
}

/* Queue a call behind the session's records, its body passed through the redaction set. */
static void send_call(struct platform *p, const char *path, json_object *body, unsigned attempts)
{
    int r;

    if (!body)
        return;
    r = redact_json(p->rd, body);
    if (r >= 0 && p->rec)
        r = records_send(p->rec, path, body, attempts);
    if (r < 0)
        log_debug("platform: session \"%s\" cannot queue %s: %s", p->session_id, path,
                  ar_strerror(r));
    json_object_put(body);
}

static void remember_token(struct platform *p, const char *tool_call_id, const char *token)
{
    struct token_entry *e = NULL;

    if (!token || !token[0] || strlen(token) >= sizeof(e->token) ||
        (tool_call_id && strlen(tool_call_id) >= sizeof(e->tool_call_id)))
        return;
    for (size_t i = 0; i < p->ntokens; i++)
        if (strcmp(p->tokens[i].token, token) == 0)
            e = &p->tokens[i];
    if (!e && p->ntokens < PLATFORM_TOKENS_MAX)
        e = &p->tokens[p->ntokens++];
    if (!e)
        return;
    snprintf(e->token, sizeof(e->token), "%s", token);
    if (tool_call_id)
        snprintf(e->tool_call_id, sizeof(e->tool_call_id), "%s", tool_call_id);
}

static const char *token_of_call(struct platform *p, const char *tool_call_id)
{
    for (size_t i = p->ntokens; tool_call_id && i-- > 0;)
        if (strcmp(p->tokens[i].tool_call_id, tool_call_id) == 0)
            return p->tokens[i].token;
    return NULL;
}

static bool known_token(struct platform *p, const char *token)
{
    for (size_t i = 0; token && i < p->ntokens; i++)
        if (strcmp(p->tokens[i].token, token) == 0)
            return true;
    return false;
}

/*
 * An interaction_request: its row. The gate's token is the event's payload.interactionToken,
 * or its id once ids are the tokens.
 */
static void interaction_row(struct platform *p, json_object *ev)
{
    json_object *payload = jsonx_get(ev, "payload"), *tc = jsonx_get(payload, "toolCall");
    const char *tcid = jsonx_str(payload, "toolCallId");
    const char *token = jsonx_str(payload, "interactionToken");
    const char *tool, *kind = jsonx_str(ev, "kind");
    struct agenta_interaction it;
    json_object *args;

    if (!token)
        token = jsonx_str(ev, "id");
    if (!token || !token[0])
        return;
    tool = jsonx_str(tc, "resolvedName");
    if (!tool)
        tool = jsonx_str(payload, "toolName");
    if (!tool)
        tool = jsonx_str(tc, "title");
    args = jsonx_get(tc, "rawInput");
    if (!args)
        args = jsonx_get(payload, "input");
    memset(&it, 0, sizeof(it));
    it.session_id = p->session_id;
    it.turn_id = p->turn_id;
    it.token = token;
    it.kind = kind ? kind : "user_approval";
    it.tool = tool ? tool : "tool";
    it.args = args;
    it.tool_call_id = tcid;
    it.run_context = p->run_context;
    it.parameters = p->parameters;
    remember_token(p, tcid, token);
    send_call(p, AGENTA_PATH_INTERACTIONS, agenta_interaction_body(&it),
              AGENTA_INTERACTION_ATTEMPTS);
}

static void resolve_row(struct platform *p, const char *token, bool approved,
                        const char *tool_call_id)
{
    send_call(p, AGENTA_PATH_INTERACTIONS_TRANSITION,
              agenta_transition_body(p->session_id, token, approved ? "approved" : "denied",
                                     tool_call_id),
              1);
}

/* An interaction_response (a decision forwarded to the harness): its row is resolved. */
static void interaction_resolved(struct platform *p, json_object *ev)
{
    json_object *payload = jsonx_get(ev, "payload"), *approved = jsonx_get(payload, "approved");
    const char *id = jsonx_str(ev, "id"), *tcid = jsonx_str(payload, "toolCallId");
    const char *token = jsonx_str(payload, "interactionToken"), *kind = jsonx_str(ev, "kind");

    if (kind && strcmp(kind, "user_approval") != 0)
        return;
    if (!approved || !json_object_is_type(approved, json_type_boolean))
        return;
    if (!tcid)
        tcid = id;
    if (!token && known_token(p, id))
        token = id;
    if (!token)
        token = token_of_call(p, tcid);
    if (!token) {
        log_debug("platform: session \"%s\": no interaction token for call \"%s\"", p->session_id,
                  tcid ? tcid : "?");
        return;
    }
    resolve_row(p, token, json_object_get_boolean(approved), tcid);
}

void platform_event(struct platform *p, json_object *ev)
{
    const char *type;

    if (!p || !ev)
        return;
    if (p->rec)
        records_event(p->rec, ev);
    type = jsonx_str(ev, "type");
    if (!type)
        return;
    if (strcmp(type, "interaction_request") == 0)
        interaction_row(p, ev);
    else if (strcmp(type, "interaction_response") == 0)
        interaction_resolved(p, ev);
}

static void ledger_start(struct platform *p, bool resume)
{
    struct platform_ledger_params lp;
    char stream[AGENTA_ID_MAX];

    if (!p->harness_kind || !p->hb)
        return;
    heartbeat_stream_id(p->hb, stream, sizeof(stream));
    memset(&lp, 0, sizeof(lp));
    lp.api = p->api;
    lp.session_id = p->session_id;
    lp.turn_id = p->turn_id;
    lp.stream_id = stream;
    lp.harness_kind = p->harness_kind;
    lp.trace_id = p->trace_id;
    lp.span_id = p->span_id;
    lp.run_context = p->run_context;
    lp.resume = resume;
    p->ledger = platform_ledger_start(&lp);
}

/* ---- start, turn, finish ----------------------------------------------------------------- */

static void platform_release(struct platform *p)
{
    records_free(p->rec);
    heartbeat_release(p->hb);
    if (p->ledger)
        platform_ledger_unref(p->ledger); /* finished by platform_finish, which every run reaches */
    agenta_api_free(p->api);
    redact_free(p->rd); /* after the records and the heartbeat, which borrow it */
    json_object_put(p->run_context);
    json_object_put(p->parameters);
    free(p->key);
    free(p->session_id);
    free(p->turn_id);
    free(p);
}

/* The user's message, persisted first, and the claim of its attachments. */
static void persist_user_message(struct platform *p, const struct run_request *req)
{
    const struct chat_message *m = tail_user(req);
    const char *ids[256];
    json_object *ev = NULL;
    size_t n = 0;

    if (records_user_message(req, &ev) == 0) {
        if (records_persist(p->rec, ev, "user") < 0)
            log_debug("platform: session \"%s\": the user's message was not queued", p->session_id);
        json_object_put(ev);
    }
    for (size_t i = 0; m && i < m->nblocks && n < ARRAY_SIZE(ids); i++)
        if (m->blocks[i].type == BLOCK_ATTACHMENT && m->blocks[i].attachment_id)
            ids[n++] = m->blocks[i].attachment_id;
    if (n > 0)
        send_call(p, AGENTA_PATH_ATTACHMENTS_REFERENCE,
                  agenta_attachments_reference_body(p->session_id, ids, n), 1);
}

int platform_start(const struct engine_config *cfg, const struct run_request *req, const char *key,
                   const char *trace_id, struct event_stream *es, struct run_result *res,
                   struct platform **ret)
{
    struct heartbeat_params hp;
    struct heartbeat_first first;
    struct records_params rp;
    char cred[AGENTA_CREDENTIAL_MAX + 1], name[HEARTBEAT_NAME_MAX];
    const char *span;
    json_object *refs = NULL, *ev;
    struct platform *p;
    int r;

    *ret = NULL;
    if (!cfg->agenta || !cfg->agenta->enabled || !req->session_id || !req->session_id[0])
        return 0;
    r = check_attachments(cfg->agenta, req, es, res);
    if (r < 0)
        return r;
    p = calloc(1, sizeof(*p));
    if (!p) {
        fail_run(es, res, "internal_error", "out of memory");
        return -ENOMEM;
    }
    atomic_init(&p->interrupted, false);
    p->cfg = cfg->agenta;
    p->rd = redact_new();
    p->key = strdup(key && key[0] ? key : req->session_id);
    p->session_id = strdup(req->session_id);
    p->turn_id = strdup(req->turn_id ? req->turn_id : "");
    if (!p->rd || !p->key || !p->session_id || !p->turn_id) {
        r = -ENOMEM;
        fail_run(es, res, "internal_error", "out of memory");
        goto fail;
    }
    snprintf(p->trace_id, sizeof(p->trace_id), "%s", trace_id ? trace_id : "");
    span = jsonx_str(jsonx_path(req->run_context, "trace"), "span_id");
    if (ids_span_id_ok(span))
        snprintf(p->span_id, sizeof(p->span_id), "%s", span);
    p->harness_kind = platform_harness_kind(req);
    p->run_context = json_object_get(req->run_context);
    p->parameters = json_object_get(jsonx_get(req->root, "effectiveParameters"));
    /* every credential of the run, the run credential included, is a secret of every sink */
    r = redact_add_request(p->rd, req);
    if (r == 0)
        r = redact_run_credential(req, cred, sizeof(cred));
    if (r < 0) {
        fail_run(es, res, "runner_error",
                 "platform mode: the run's credentials cannot be kept out of the session log "
                 "(%s)",
                 ar_strerror(r));
        goto fail;
    }
    r = agenta_api_new(cfg->agenta, cred, &p->api);
    explicit_bzero(cred, sizeof(cred));
    if (r < 0) {
        fail_run(es, res, "runner_error",
                 "telemetry.exporters.otlp.headers.authorization: not usable as the platform "
                 "credential (control characters, or longer than %u bytes)",
                 AGENTA_CREDENTIAL_MAX);
        goto fail;
    }
    if (heartbeat_session_name(req, name, sizeof(name)) < 0)
        name[0] = '\0';
    refs = agenta_workflow_reference_list(req->run_context);
    memset(&hp, 0, sizeof(hp));
    hp.session_id = p->session_id;
    hp.turn_id = p->turn_id;
    hp.name = name[0] ? name : NULL;
    hp.references = refs;
    hp.rd = p->rd;
    hp.on_interrupted = on_interrupted;
    hp.ctx = p;
    r = heartbeat_start(p->api, &hp, &p->hb, &first);
    json_object_put(refs);
    if (r < 0) {
        fail_run(es, res, "runner_error", "platform mode: cannot start the session watchdog (%s)",
                 ar_strerror(r));
        goto fail;
    }
    if (!first.admitted) {
        /* refused before any side effect: no record, no sweep, no environment */
        log_debug("platform: session \"%s\" turn \"%s\" not admitted", p->session_id, p->turn_id);
        fail_run(es, res, HEARTBEAT_REFUSED_CODE, "%s", HEARTBEAT_REFUSED_MESSAGE);
        r = -EBUSY;
        goto fail;
    }
    ev = event_new("turn");
    if (ev)
        json_object_object_add(ev, "turnId", json_object_new_string(p->turn_id));
    event_emit(es, ev);
    memset(&rp, 0, sizeof(rp));
    rp.session_key = p->key;
    rp.session_id = p->session_id;
    rp.turn_id = p->turn_id[0] ? p->turn_id : NULL;
    rp.span_id = p->span_id[0] ? p->span_id : NULL;
    r = records_new(p->api, p->rd, &rp, &p->rec);
    if (r < 0) {
        /* the turn goes on; its log has a hole, which a later rebuild must not paper over */
        log_debug("platform: session \"%s\" has no records emitter: %s", p->session_id,
                  ar_strerror(r));
        records_incomplete_note(p->key);
        p->rec = NULL;
    } else {
        persist_user_message(p, req);
    }
    *ret = p;
    return 0;
fail:
    platform_release(p);
    return r;
}

/* The approvals the new message answers: (tool call id, token or NULL, approved). */
struct answer {
    const char *tool_call_id;
    const char *token;
    bool approved;
};

static size_t request_answers(const struct run_request *req, struct answer *out, size_t max)
{
    const struct chat_message *m = tail_user(req);
    size_t n = 0;

    for (size_t i = 0; m && i < m->nblocks && n < max; i++) {
        const struct content_block *b = &m->blocks[i];
        json_object *approved = jsonx_get(b->output, "approved");

        if (b->type != BLOCK_TOOL_RESULT || !b->tool_call_id || !approved ||
            !json_object_is_type(approved, json_type_boolean))
            continue;
        out[n].tool_call_id = b->tool_call_id;
        out[n].token = jsonx_str(b->output, "interactionToken");
        out[n].approved = json_object_get_boolean(approved);
        n++;
    }
    return n;
}

static void add_exempt(const char **list, size_t *n, size_t max, const char *token)
{
    if (!token || !token[0] || *n >= max)
        return;
    for (size_t i = 0; i < *n; i++)
        if (strcmp(list[i], token) == 0)
            return;
    list[(*n)++] = token;
}

void platform_turn_begins(struct platform *p, const struct run_request *req,
                          const struct approval_gate *parked, size_t nparked, bool live_resume)
{
    struct answer answers[PLATFORM_TOKENS_MAX];
    const char *exempt[PLATFORM_TOKENS_MAX * 2];
    size_t nanswers, nexempt = 0;

    if (!p)
        return;
    for (size_t i = 0; i < nparked; i++) {
        remember_token(p, parked[i].tool_call_id, parked[i].token);
        add_exempt(exempt, &nexempt, ARRAY_SIZE(exempt), parked[i].token);
    }
    nanswers = request_answers(req, answers, ARRAY_SIZE(answers));
    for (size_t i = 0; i < nanswers; i++) {
        if (!answers[i].token)
            answers[i].token = token_of_call(p, answers[i].tool_call_id);
        remember_token(p, answers[i].tool_call_id, answers[i].token);
        add_exempt(exempt, &nexempt, ARRAY_SIZE(exempt), answers[i].token);
    }
    /* gates of earlier turns that nobody answered are over; the ones in play are not */
    send_call(p, AGENTA_PATH_INTERACTIONS_CANCEL_STALE,
              agenta_cancel_stale_body(p->session_id, p->turn_id, nexempt ? exempt : NULL, nexempt),
              1);
    /* a cold resume answers in band: no interaction_response will come for these */
    for (size_t i = 0; !live_resume && i < nanswers; i++)
        if (answers[i].token)
            resolve_row(p, answers[i].token, answers[i].approved, answers[i].tool_call_id);
    ledger_start(p, nanswers > 0);
}

int platform_rebuild(struct platform *p, struct run_request *req, const struct request_limits *lim,
                     char *err, size_t errlen)
{
    struct reconstruct_history h;
    bool approval_only;
    int r;

    if (!p || !p->cfg->reconstruct)
        return 0;
    approval_only = reconstruct_approval_reply_only(req);
    if (!approval_only && !reconstruct_minimal_history(req))
        return 0;
    reconstruct_history_init(&h);
    r = reconstruct_fetch(p->api, p->key, p->session_id, p->turn_id, approval_only, &h, err,
                          errlen);
    if (r == 0)
        r = reconstruct_splice(&h, lim, req, err, errlen);
    if (r == 0 && h.messages && json_object_array_length(h.messages) > 0)
        log_debug("platform: session \"%s\" rebuilt %zu message(s) from %zu record(s)",
                  p->session_id, json_object_array_length(h.messages), h.nrecords);
    reconstruct_history_release(&h);
    return r;
}

void platform_attachments(struct platform *p, const struct run_request *req, const char *workspace,
                          const struct harness_caps *caps, bool restore, json_object *prompt,
                          struct event_stream *es)
{
    if (p)
        platform_attach_deliver(p->api, p->session_id, req, tail_user(req), workspace, caps,
                                restore, prompt, es);
}

/* ---- the end ------------------------------------------------------------------------------- */

void platform_finish(struct platform *p, const struct run_result *res, const char *agent_session_id)
{
    bool completed;
    int r = 0;

    if (!p || p->finished)
        return;
    p->finished = true;
    completed = res && res->ok &&
                !(res->stop_reason && (strcmp(res->stop_reason, "paused") == 0 ||
                                       strcmp(res->stop_reason, "cancelled") == 0));
    if (p->rec)
        r = records_flush(p->rec, util_now_ms() + PLATFORM_FLUSH_MS);
    if (r == -EIO)
        log_debug("platform: session \"%s\" lost a record of this turn: its log is incomplete",
                  p->session_id);
    else if (r == -ETIMEDOUT)
        log_debug("platform: session \"%s\" records still queued after %dms: they go on in the "
                  "background",
                  p->session_id, PLATFORM_FLUSH_MS);
    if (!agent_session_id && p->agent_session[0])
        agent_session_id = p->agent_session;
    platform_ledger_finish(p->ledger, completed, agent_session_id);
    /* the final beat before the result: the session's next turn must find it released */
    heartbeat_release(p->hb);
    p->hb = NULL;
}

void platform_free(struct platform *p)
{
    if (!p)
        return;
    if (!p->finished)
        platform_finish(p, NULL, NULL);
    platform_release(p);
}
