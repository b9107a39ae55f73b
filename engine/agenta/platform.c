#include "agenta/platform.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "agenta/agenta_api.h"
#include "agenta/heartbeat.h"
#include "agenta/reconstruct.h"
#include "agenta/records.h"
#include "agenta/redact.h"
#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"

#define CLAUDE_INLINE_BASE64_MAX (10u * 1024 * 1024) /* Anthropic's inline image cap */
#define MENTIONS_MAX (1024u * 1024)
#define ATTACHMENT_REL_MAX 512

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

static bool lower_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

bool platform_canonical_uuid(const char *s)
{
    if (!s || strlen(s) != 36)
        return false;
    for (size_t i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return false;
        } else if (!lower_hex(s[i])) {
            return false;
        }
    }
    return s[14] >= '1' && s[14] <= '8' && strchr("89ab", s[19]) != NULL;
}

int platform_trace_uuid(const char *trace_id, char out[37])
{
    if (!trace_id || strlen(trace_id) != 32)
        return -EINVAL;
    for (size_t i = 0; i < 32; i++)
        if (!lower_hex(trace_id[i]))
            return -EINVAL;
    snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", trace_id, trace_id + 8, trace_id + 12,
             trace_id + 16, trace_id + 20);
    return 0;
}

static bool span_id_ok(const char *s)
{
    if (!s || strlen(s) != 16)
        return false;
    for (size_t i = 0; i < 16; i++)
        if (!lower_hex(s[i]) && !(s[i] >= 'A' && s[i] <= 'F'))
            return false;
    return true;
}

/* The media type without parameters, lower case. */
static void media_base(const char *media_type, char *out, size_t outlen)
{
    size_t n = 0;

    while (media_type && *media_type == ' ')
        media_type++;
    for (; media_type && media_type[n] && media_type[n] != ';' && n + 1 < outlen; n++)
        out[n] = (char)((media_type[n] >= 'A' && media_type[n] <= 'Z') ? media_type[n] + 32
                                                                       : media_type[n]);
    while (n > 0 && out[n - 1] == ' ')
        n--;
    out[n] = '\0';
}

static bool native_image_type(const char *base)
{
    static const char *const types[] = {"image/png", "image/jpeg", "image/gif", "image/webp"};

    for (size_t i = 0; i < ARRAY_SIZE(types); i++)
        if (strcmp(base, types[i]) == 0)
            return true;
    return false;
}

void platform_attachment_gate(const struct run_request *req, const struct harness_caps *caps,
                              const char *media_type, size_t len, struct platform_gate *ret)
{
    char base[128];
    bool image;

    media_base(media_type, base, sizeof(base));
    image = native_image_type(base);
    memset(ret, 0, sizeof(*ret));
    ret->outcome = "workspace_only";
    /* documents and audio: no harness here takes them natively */
    if (!image) {
        ret->reason_code = caps->file_attachments ? "adapter_unsupported" : "transport_unsupported";
        return;
    }
    if (!caps->images) {
        ret->reason_code = "transport_unsupported";
        return;
    }
    if (req->harness != HARNESS_PI && req->harness != HARNESS_CLAUDE &&
        req->harness != HARNESS_CODEX) {
        ret->reason_code = "adapter_unsupported";
        return;
    }
    if (!run_request_model_takes_images(req)) {
        ret->reason_code = "model_modality_unknown";
        return;
    }
    if ((req->mc.provider ? strcasecmp(req->mc.provider, "anthropic") == 0
                          : req->harness == HARNESS_CLAUDE) &&
        (len + 2) / 3 * 4 > CLAUDE_INLINE_BASE64_MAX) {
        ret->reason_code = "provider_inline_cap";
        return;
    }
    ret->outcome = "native";
    ret->reason_code = "native_supported";
    ret->image = true;
}

int platform_attachment_mention(const char *attachment_id, const char *filename, struct buf *out)
{
    return buf_printf(out, "[attached file: %s at attachments/%s/%s]", filename, attachment_id,
                      filename);
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);

    return m <= n && memcmp(s + n - m, tail, m) == 0;
}

int platform_prompt_text(const char *text, const char *latest, const char *mentions,
                         struct buf *out)
{
    size_t n = strlen(text);
    int r;

    if (!mentions || !mentions[0])
        return buf_append_str(out, text);
    if (latest && latest[0] && ends_with(text, latest)) {
        size_t keep = n - strlen(latest);

        r = buf_append(out, text, keep);
        if (r == 0)
            r = buf_printf(out, "%s\n%s", mentions, latest);
        return r;
    }
    if (n > 0 && text[n - 1] == '\n') /* a replay frame whose new message has no text */
        return buf_printf(out, "%s%s", text, mentions);
    if (n == 0)
        return buf_append_str(out, mentions);
    return buf_printf(out, "%s\n%s", mentions, text);
}

/* ---- the run ------------------------------------------------------------------------------- */

struct token_entry {
    char tool_call_id[128];
    char token[128];
};

/* The turns ledger of one run, shared with its thread. */
struct ledger {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    unsigned refs;
    bool finished;
    bool completed;
    char agent_session_id[128];
    struct agenta_api *api;
    char *session_id;
    char turn_id[40];    /* "" when the request's is no UUID (the API takes only those) */
    char stream_id[AGENTA_ID_MAX];
    char harness_kind[32];
    char trace_uuid[37];
    char span_id[17];
    char start_time[32];
    bool resume;         /* an approval resume: the latest open row is this turn's */
    json_object *references;
};

struct platform {
    const struct agenta_config *cfg;
    struct agenta_api *api;
    struct redact *rd;
    struct heartbeat *hb;
    struct records *rec;
    struct ledger *ledger;
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

/* Ledger threads alive in this process (the worker waits for them at shutdown). */
static pthread_mutex_t ledgers_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ledgers_gone = PTHREAD_COND_INITIALIZER;
static unsigned nledgers;

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

static void deadline_ts(int64_t ms, struct timespec *ts)
{
    ts->tv_sec = ms / 1000;
    ts->tv_nsec = (ms % 1000) * 1000000;
}

int platform_worker_stop(int64_t deadline_ms)
{
    struct timespec ts;
    int r = records_drain_all(deadline_ms);

    /* ledgers_gone runs on CLOCK_REALTIME (the default): convert the monotonic deadline */
    pthread_mutex_lock(&ledgers_lock);
    while (nledgers > 0) {
        int64_t left = deadline_ms - util_now_ms();

        if (left <= 0) {
            r = -ETIMEDOUT;
            break;
        }
        deadline_ts(util_wall_ms() + (left < 100 ? left : 100), &ts);
        pthread_cond_timedwait(&ledgers_gone, &ledgers_lock, &ts);
    }
    pthread_mutex_unlock(&ledgers_lock);
    return r;
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

static json_object *delivery_event(const char *id, const char *outcome, const char *reason,
                                   const char *working_path)
{
    json_object *ev = event_new("attachment_delivery");

    if (!ev)
        return NULL;
    json_object_object_add(ev, "attachmentId", json_object_new_string(id));
    json_object_object_add(ev, "outcome", json_object_new_string(outcome));
    json_object_object_add(ev, "reasonCode", json_object_new_string(reason));
    if (working_path)
        json_object_object_add(ev, "workingPath", json_object_new_string(working_path));
    return ev;
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
            platform_canonical_uuid(b->attachment_id))
            continue;
        event_emit(es, delivery_event(b->attachment_id, "failed", "contract_violation", NULL));
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
        log_debug("platform: session \"%s\": no interaction token for call \"%s\"",
                  p->session_id, tcid ? tcid : "?");
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

/* ---- the turns ledger -------------------------------------------------------------------- */

static void ledger_unref(struct ledger *l)
{
    bool last;

    pthread_mutex_lock(&l->lock);
    last = --l->refs == 0;
    pthread_mutex_unlock(&l->lock);
    if (!last)
        return;
    pthread_cond_destroy(&l->wake);
    pthread_mutex_destroy(&l->lock);
    agenta_api_free(l->api);
    json_object_put(l->references);
    free(l->session_id);
    free(l);
}

static void *ledger_main(void *arg)
{
    struct ledger *l = arg;
    struct agenta_turn_row row;
    struct agenta_turn t;
    char err[256], end[32];
    uint64_t index = 0;
    bool created = false, completed;
    int r;

    r = agenta_api_turn_query_latest(l->api, l->session_id, NULL, &row, err, sizeof(err));
    if (r < 0) {
        /* an index guessed wrong would complete another turn's row: write none */
        log_debug("platform: session \"%s\" turns ledger not written: %s", l->session_id, err);
    } else {
        if (row.found && row.turn_index >= 0)
            index = (uint64_t)row.turn_index + (l->resume && !row.ended ? 0 : 1);
        memset(&t, 0, sizeof(t));
        t.session_id = l->session_id;
        t.stream_id = l->stream_id;
        t.turn_id = l->turn_id[0] ? l->turn_id : NULL;
        t.turn_index = index;
        t.harness_kind = l->harness_kind;
        t.references = l->references;
        t.trace_id = l->trace_uuid[0] ? l->trace_uuid : NULL;
        t.span_id = l->span_id[0] ? l->span_id : NULL;
        t.start_time = l->start_time;
        r = agenta_api_turn_create(l->api, &t, err, sizeof(err));
        created = r >= 0; /* 1: the row exists (an approval resume reuses its turn's row) */
        if (r < 0)
            log_debug("platform: session \"%s\" turn %llu not written to the ledger: %s",
                      l->session_id, (unsigned long long)index, err);
    }
    pthread_mutex_lock(&l->lock);
    while (!l->finished)
        pthread_cond_wait(&l->wake, &l->lock);
    completed = l->completed;
    pthread_mutex_unlock(&l->lock);
    if (created && completed) {
        agenta_iso_time(util_wall_ms(), end);
        r = agenta_api_turn_complete(l->api, l->session_id, index,
                                     l->agent_session_id[0] ? l->agent_session_id : NULL, end,
                                     err, sizeof(err));
        if (r < 0)
            log_debug("platform: session \"%s\" turn %llu not completed in the ledger: %s",
                      l->session_id, (unsigned long long)index, err);
    }
    ledger_unref(l);
    pthread_mutex_lock(&ledgers_lock);
    nledgers--;
    pthread_cond_broadcast(&ledgers_gone);
    pthread_mutex_unlock(&ledgers_lock);
    return NULL;
}

static void ledger_start(struct platform *p, bool resume)
{
    struct ledger *l;
    pthread_attr_t attr;
    pthread_t tid;
    int r;

    if (!p->harness_kind || !p->hb)
        return;
    l = calloc(1, sizeof(*l));
    if (!l)
        return;
    heartbeat_stream_id(p->hb, l->stream_id, sizeof(l->stream_id));
    if (!l->stream_id[0]) {
        free(l); /* Agenta writes no ledger row without a stream */
        return;
    }
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->wake, NULL);
    l->refs = 2; /* the run and the thread */
    l->api = agenta_api_ref(p->api);
    l->session_id = strdup(p->session_id);
    l->resume = resume;
    if (platform_canonical_uuid(p->turn_id))
        snprintf(l->turn_id, sizeof(l->turn_id), "%s", p->turn_id);
    snprintf(l->harness_kind, sizeof(l->harness_kind), "%s", p->harness_kind);
    if (platform_trace_uuid(p->trace_id, l->trace_uuid) < 0)
        l->trace_uuid[0] = '\0';
    snprintf(l->span_id, sizeof(l->span_id), "%s", p->span_id);
    agenta_iso_time(util_wall_ms(), l->start_time);
    l->references = agenta_workflow_reference_list(p->run_context);
    if (!l->session_id) {
        l->refs = 1;
        ledger_unref(l);
        return;
    }
    pthread_mutex_lock(&ledgers_lock);
    nledgers++;
    pthread_mutex_unlock(&ledgers_lock);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    r = pthread_create(&tid, &attr, ledger_main, l);
    pthread_attr_destroy(&attr);
    if (r != 0) {
        pthread_mutex_lock(&ledgers_lock);
        nledgers--;
        pthread_mutex_unlock(&ledgers_lock);
        l->refs = 1;
        ledger_unref(l);
        log_debug("platform: no ledger thread: %s", strerror(r));
        return;
    }
    p->ledger = l;
}

static void ledger_finish(struct ledger *l, bool completed, const char *agent_session_id)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->lock);
    l->finished = true;
    l->completed = completed;
    if (agent_session_id && strlen(agent_session_id) < sizeof(l->agent_session_id))
        snprintf(l->agent_session_id, sizeof(l->agent_session_id), "%s", agent_session_id);
    pthread_cond_signal(&l->wake);
    pthread_mutex_unlock(&l->lock);
}

/* ---- start, turn, finish ----------------------------------------------------------------- */

static void platform_release(struct platform *p)
{
    records_free(p->rec);
    heartbeat_release(p->hb);
    if (p->ledger)
        ledger_unref(p->ledger); /* finished by platform_finish, which every run reaches */
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
            log_debug("platform: session \"%s\": the user's message was not queued",
                      p->session_id);
        json_object_put(ev);
    }
    for (size_t i = 0; m && i < m->nblocks && n < ARRAY_SIZE(ids); i++)
        if (m->blocks[i].type == BLOCK_ATTACHMENT && m->blocks[i].attachment_id)
            ids[n++] = m->blocks[i].attachment_id;
    if (n > 0)
        send_call(p, AGENTA_PATH_ATTACHMENTS_REFERENCE,
                  agenta_attachments_reference_body(p->session_id, ids, n), 1);
}

int platform_start(const struct engine_config *cfg, const struct run_request *req,
                   const char *key, const char *trace_id, struct event_stream *es,
                   struct run_result *res, struct platform **ret)
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
    if (span_id_ok(span))
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
        log_debug("platform: session \"%s\" turn \"%s\" not admitted", p->session_id,
                  p->turn_id);
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
        records_note_incomplete(p->key);
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
              agenta_cancel_stale_body(p->session_id, p->turn_id, nexempt ? exempt : NULL,
                                       nexempt),
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

/* ---- attachments --------------------------------------------------------------------------- */

static char *base64_of(const uint8_t *data, size_t len)
{
    size_t n = 4 * ((len + 2) / 3);
    char *out = malloc(n + 1);

    if (!out)
        return NULL;
    if (EVP_EncodeBlock((unsigned char *)out, data, (int)len) != (int)n) {
        free(out);
        return NULL;
    }
    out[n] = '\0';
    return out;
}

/* Fetch one attachment and write its working copy; *ret_rel names it under the workspace. */
static int materialize(struct platform *p, const char *workspace, const char *id,
                       struct agenta_attachment *att, char *rel, size_t rellen, bool *ret_fetched)
{
    char err[256];
    int r, n;

    *ret_fetched = false;
    r = agenta_api_attachment_content(p->api, p->session_id, id, att, err, sizeof(err));
    if (r < 0) {
        log_debug("platform: session \"%s\" attachment \"%s\" not fetched: %s", p->session_id,
                  id, err);
        return r;
    }
    *ret_fetched = true;
    n = snprintf(rel, rellen, "attachments/%s/%s", id, att->filename);
    if (n < 0 || (size_t)n >= rellen)
        return -ENAMETOOLONG;
    /* a symlink the sandbox planted on the way makes this fail (ELOOP), never redirect it */
    r = util_write_file_beneath(workspace, rel, att->data, att->len, 0644);
    if (r < 0)
        log_debug("platform: session \"%s\" attachment \"%s\" not written: %s", p->session_id,
                  id, ar_strerror(r));
    return r;
}

/* Earlier messages' attachments get their working copies back in a fresh workspace. */
static void restore_history(struct platform *p, const struct run_request *req,
                            const char *workspace)
{
    size_t restored = 0;

    for (size_t i = 0; i + 1 < req->nmessages && restored < PLATFORM_RESTORE_MAX; i++) {
        const struct chat_message *m = &req->messages[i];

        if (!m->role || strcmp(m->role, "user") != 0)
            continue;
        for (size_t j = 0; j < m->nblocks && restored < PLATFORM_RESTORE_MAX; j++) {
            const struct content_block *b = &m->blocks[j];
            struct agenta_attachment att;
            char rel[ATTACHMENT_REL_MAX];
            bool fetched;

            if (b->type != BLOCK_ATTACHMENT || !platform_canonical_uuid(b->attachment_id))
                continue;
            memset(&att, 0, sizeof(att));
            (void)materialize(p, workspace, b->attachment_id, &att, rel, sizeof(rel), &fetched);
            if (fetched)
                agenta_attachment_release(&att);
            restored++;
        }
    }
}

static json_object *image_block(const char *data_b64, const char *media_type)
{
    json_object *b = json_object_new_object();
    char base[128];

    media_base(media_type, base, sizeof(base));
    json_object_object_add(b, "type", json_object_new_string("image"));
    json_object_object_add(b, "data", json_object_new_string(data_b64));
    json_object_object_add(b, "mimeType", json_object_new_string(base));
    return b;
}

/* prompt = [images..., its own blocks with the text changed] */
static void rewrite_prompt(json_object *prompt, const char *latest, const char *mentions,
                           json_object *images)
{
    json_object *old = json_object_new_array(), *text_block = NULL;
    size_t n = json_object_array_length(prompt);
    struct buf text;

    if (!old)
        return;
    for (size_t i = 0; i < n; i++)
        json_object_array_add(old, json_object_get(json_object_array_get_idx(prompt, i)));
    json_object_array_del_idx(prompt, 0, n);
    for (size_t i = 0; i < json_object_array_length(images); i++)
        json_object_array_add(prompt, json_object_get(json_object_array_get_idx(images, i)));
    for (size_t i = 0; i < n; i++) {
        json_object *b = json_object_array_get_idx(old, i);
        const char *type = jsonx_str(b, "type");

        if (!text_block && type && strcmp(type, "text") == 0)
            text_block = b;
        json_object_array_add(prompt, json_object_get(b));
    }
    if (!text_block && mentions[0]) {
        text_block = json_object_new_object();
        json_object_object_add(text_block, "type", json_object_new_string("text"));
        json_object_object_add(text_block, "text", json_object_new_string(""));
        json_object_array_add(prompt, text_block);
    }
    buf_init(&text, PROMPT_TEXT_MAX);
    if (text_block && mentions[0] &&
        platform_prompt_text(jsonx_str(text_block, "text") ? jsonx_str(text_block, "text") : "",
                             latest, mentions, &text) == 0)
        json_object_object_add(text_block, "text",
                               json_object_new_string_len(buf_str(&text), (int)text.len));
    buf_release(&text);
    json_object_put(old);
}

void platform_attachments(struct platform *p, const struct run_request *req, const char *workspace,
                          const struct harness_caps *caps, bool restore, json_object *prompt,
                          struct event_stream *es)
{
    const struct chat_message *m = tail_user(req);
    json_object *images;
    struct buf mentions, latest;

    if (!p || !workspace || !prompt)
        return;
    if (restore)
        restore_history(p, req, workspace);
    if (!m)
        return;
    images = json_object_new_array();
    buf_init(&mentions, MENTIONS_MAX);
    buf_init(&latest, REPLAY_LATEST_MAX);
    for (size_t i = 0; images && i < m->nblocks; i++) {
        const struct content_block *b = &m->blocks[i];
        struct agenta_attachment att;
        struct platform_gate gate;
        char rel[ATTACHMENT_REL_MAX], shown[256];
        bool fetched;
        int r;

        if (b->type != BLOCK_ATTACHMENT || !b->attachment_id)
            continue;
        if (mentions.len)
            buf_append_char(&mentions, '\n');
        memset(&att, 0, sizeof(att));
        r = materialize(p, workspace, b->attachment_id, &att, rel, sizeof(rel), &fetched);
        if (r < 0) {
            event_emit(es, delivery_event(b->attachment_id, "failed",
                                          fetched ? "materialize_failed" : "fetch_failed", NULL));
            if (fetched)
                snprintf(shown, sizeof(shown), "%s", att.filename);
            else if (!b->filename ||
                     agenta_sanitize_filename(b->filename, shown, sizeof(shown)) < 0)
                snprintf(shown, sizeof(shown), "attachment");
            buf_printf(&mentions, "[attached file: %s - no longer available]", shown);
            if (fetched)
                agenta_attachment_release(&att);
            continue;
        }
        platform_attachment_gate(req, caps, att.media_type, att.len, &gate);
        event_emit(es, delivery_event(b->attachment_id, gate.outcome, gate.reason_code, rel));
        platform_attachment_mention(b->attachment_id, att.filename, &mentions);
        if (gate.image) {
            char *b64 = base64_of(att.data, att.len);

            if (b64)
                json_object_array_add(images, image_block(b64, att.media_type));
            free(b64);
        }
        agenta_attachment_release(&att);
    }
    if (mentions.len) {
        (void)run_request_prompt_text(req, &latest);
        rewrite_prompt(prompt, buf_str(&latest), buf_str(&mentions), images);
    }
    buf_release(&latest);
    buf_release(&mentions);
    json_object_put(images);
}

/* ---- the end ------------------------------------------------------------------------------- */

void platform_finish(struct platform *p, const struct run_result *res,
                     const char *agent_session_id)
{
    bool completed;
    int r = 0;

    if (!p || p->finished)
        return;
    p->finished = true;
    completed = res && res->ok && !(res->stop_reason && (strcmp(res->stop_reason, "paused") == 0 ||
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
    ledger_finish(p->ledger, completed, agent_session_id);
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
