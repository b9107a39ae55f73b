/*
 * engine_turns — journal, reattach and adoption of streamed turns (engine_turns.h, engine.h).
 */
#include "engine_turns.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"
#include "engine.h"
#include "request/request.h"
#include "session/pool.h"
#include "turn/journal.h"
#include "turn/journal_sweep.h"
#include "turn/turn_translate.h"

#define FOLLOW_POLL_MS 250   /* a follower looks at the writer's health this often */
#define ORPHAN_FIRST_MS 1000 /* a starting worker looks for orphaned turns after this */
#define ORPHAN_EVERY_MS 5000 /* and then this often, while a scan may find one (below) */
#define ORPHAN_FULL_MS 60000 /* and at least this often in any case */
#define ORPHAN_QUIET_MS 1000 /* a journal unchanged this long with no writer is orphaned */
#define PREFAULT_EVERY_MS 1000 /* the journals' next memory is faulted in this often */
#define PAYLOAD_TEXT_MAX (256u * 1024 * 1024)

static int turns_root(const struct engine_config *cfg, char out[PATH_MAX])
{
    if (!cfg->turns.dir[0] || !cfg->turns.keep_ms)
        return -ENOENT;
    snprintf(out, PATH_MAX, "%s", cfg->turns.dir);
    return 0;
}

static int open_journal(void *ctx, struct journal **ret)
{
    const struct engine_turn *t = ctx;
    int r = t->journal_slot
                ? journal_create_at_slot(t->cfg->turns.dir, &t->cfg->turns, t->req->turn_id,
                                         t->req->project_id, t->key, t->req->detached,
                                         t->journal_slot_index, t->journal_slot_generation, ret)
                : journal_create(t->cfg->turns.dir, &t->cfg->turns, t->req->turn_id,
                                 t->req->project_id, t->key, t->req->detached, ret);

    if (r < 0)
        log_debug("turn '%s' is not journaled: %s", t->req->turn_id, strerror(-r));
    return r;
}

void engine_turns_journal_open(const struct engine_turn *t, struct event_stream *es)
{
    if (es->journal || !t->cfg->turns.dir[0] || !t->cfg->turns.keep_ms)
        return;
    es->journal_opener = open_journal;
    es->journal_opener_ctx = (void *)t;
}

void engine_turns_journal_now(struct engine_turn *t, struct event_stream *es, uint32_t index,
                              uint32_t generation)
{
    if (!es->journal_opener || es->journal)
        return;
    t->journal_slot = true;
    t->journal_slot_index = index;
    t->journal_slot_generation = generation;
    event_stream_journal_open(es);
}

bool engine_turns_audience(const struct engine_turn *t, struct event_stream *es)
{
    uint64_t grace = t->cfg->turns.grace_ms;

    if (event_stream_client_alive(es))
        return true;
    event_stream_journal_open(es); /* a client that comes back finds the turn */
    if (es->journal && journal_has_readers(es->journal))
        return true;
    return grace && util_now_ms() < es->client_gone_ms + (int64_t)grace;
}

void engine_turns_register(const struct engine_turn *t, struct environment *env,
                           struct event_stream *es, const struct run_result *res,
                           const struct lifecycle_policy *policy, bool resume)
{
    const char *body;
    struct buf line;
    size_t blen;
    bool blank;
    int r;

    event_stream_journal_open(es);
    if (!es->journal || !env->has_slot)
        return;
    /* the journal names the slot whatever happens: a dead worker's turn is looked for there */
    if (resume || t->plat || !t->req->body) {
        (void)journal_set_slot(es->journal, env->h.index, env->h.generation);
        return;
    }
    /* the request goes in as it came (JSON text, its line breaks made blanks: the control
     * line is one line), not re-encoded: this runs before every streamed turn's prompt */
    blank = strspn(t->req->body, " \t\r\n") >= t->req->body_len; /* an empty body is {} */
    body = blank ? "{}" : t->req->body;
    blen = blank ? 2 : t->req->body_len;
    buf_init(&line, PAYLOAD_TEXT_MAX);
    r = buf_append_str(&line, "{\"turnId\":");
    if (r == 0)
        r = jsonx_append_string(&line, t->req->turn_id);
    if (r == 0)
        r = buf_printf(&line,
                       ",\"adoptMs\":%llu,\"promptId\":%lld,\"nextId\":%lld,\"det\":%llu,"
                       "\"policy\":{\"mode\":%d,\"idleMs\":%llu},\"caps\":%lld,\"traceId\":",
                       (unsigned long long)t->cfg->turns.adopt_ms, (long long)env->next_id,
                       (long long)env->next_id + 1, (unsigned long long)es->det, (int)policy->mode,
                       (unsigned long long)policy->idle_ms, (long long)turn_caps_to_bits(&res->caps));
    if (r == 0)
        r = jsonx_append_string(&line, res->trace_id ? res->trace_id : "");
    if (r == 0)
        r = buf_append_str(&line, ",\"request\":");
    if (r == 0)
        r = buf_append(&line, body, blen);
    if (r == 0)
        r = buf_append_char(&line, '}');
    if (r == 0) {
        for (size_t i = 0; i < line.len; i++)
            if (line.data[i] == '\n')
                line.data[i] = ' ';
        (void)environment_turn_begin(env, line.data, line.len);
    }
    buf_release(&line);
    (void)journal_set_slot(es->journal, env->h.index, env->h.generation);
}

/* ---- adoption ------------------------------------------------------------------------------ */

static int discard_line(void *ctx, const char *line, size_t len)
{
    (void)ctx;
    (void)line;
    (void)len;
    return -1; /* nobody reads along: the records only go to the journal */
}

static const struct event_sink no_client = {.write_line = discard_line};

/* The turn cannot go on: its journal gets an error, done and a failed result. */
static void close_lost(struct event_stream *es, struct run_result *res, const char *msg,
                       const char *code)
{
    log_debug("turn lost: %s", msg);
    event_emit(es, event_error(msg, code));
    event_emit(es, event_done(NULL, NULL));
    run_result_fail(res, "%s", msg);
}

/* A slot this worker adopted but cannot reach the keeper of: drained, its keeper stopped. */
static void drop_slot(const struct engine_config *cfg, struct pool_handle h)
{
    struct pool_session *s = calloc(1, sizeof(*s));
    struct pool_victim v = {.any = true, .h = h, .reason = TEARDOWN_FAILED_TURN};

    if (s && pool_session_peek(cfg->pool, h.index, s) && s->h.generation == h.generation) {
        v.keeper_pid = s->keeper_pid;
        v.keeper_start = s->keeper_start;
        memcpy(v.key, s->key, sizeof(v.key));
        (void)pool_session_drain(cfg->pool, h, TEARDOWN_FAILED_TURN);
        (void)environment_evict(cfg->pool, &v);
    }
    free(s);
}

/* The "#turn" JSON: what the adopting worker takes from it, and the request's text. */
static int parse_payload(json_object *o, struct engine_adopted *ad, const char **ret_body,
                         size_t *ret_len)
{
    json_object *req = jsonx_get(o, "request"), *pol = jsonx_get(o, "policy");
    const char *trace = jsonx_str(o, "traceId");

    if (!req || !json_object_is_type(req, json_type_object) || !pol)
        return -EBADMSG;
    memset(ad, 0, sizeof(*ad));
    ad->prompt_id = json_object_get_int64(jsonx_get(o, "promptId"));
    ad->next_id = json_object_get_int64(jsonx_get(o, "nextId"));
    ad->det = (uint64_t)json_object_get_int64(jsonx_get(o, "det"));
    ad->policy.mode = (enum lifecycle_mode)json_object_get_int(jsonx_get(pol, "mode"));
    ad->policy.idle_ms = (uint64_t)json_object_get_int64(jsonx_get(pol, "idleMs"));
    ad->policy.source = LIFECYCLE_FROM_ADMITTED;
    ad->caps = (uint32_t)json_object_get_int64(jsonx_get(o, "caps"));
    snprintf(ad->trace_id, sizeof(ad->trace_id), "%s", trace ? trace : "");
    if (ad->prompt_id <= 0)
        return -EBADMSG;
    *ret_body = jsonx_text(req, ret_len); /* valid while the payload lives */
    return 0;
}

/* The run's credentials join this thread's redaction set, as the front does for a /run. */
static void redact_request(const struct run_request *req)
{
    json_object *hdrs = req->telemetry ? jsonx_path(req->telemetry, "exporters.otlp.headers")
                                       : NULL;

    for (size_t i = 0; i < req->mc.ncredentials; i++)
        log_redact_add(req->mc.credentials[i].value);
    log_redact_add(req->tools.callback_authorization);
    if (!hdrs || !json_object_is_type(hdrs, json_type_object))
        return;
    json_object_object_foreach(hdrs, k, v)
    {
        (void)k;
        if (v && json_object_is_type(v, json_type_string))
            log_redact_add(json_object_get_string(v));
    }
}

/* Prepare the turn again from the request the keeper kept, and run it on env (consumed). */
static void run_from_payload(const struct engine_config *cfg, struct environment *env,
                             const char *payload, struct event_stream *es, uint64_t last_det,
                             struct run_result *res)
{
    struct request_limits lim;
    struct engine_adopted ad;
    struct run_request req;
    struct engine_turn *t = NULL;
    json_object *o = NULL;
    const char *body = NULL;
    size_t blen = 0;
    char err[512];
    int r;

    memset(&req, 0, sizeof(req));
    r = jsonx_parse(payload, strlen(payload), JSONX_DEFAULT_DEPTH + 4, &o, err, sizeof(err));
    if (r == 0)
        r = parse_payload(o, &ad, &body, &blen);
    request_limits_default(&lim);
    lim.allow_scripted = cfg->scripted_agent != NULL;
    if (r == 0)
        r = request_parse(body, blen, &lim, &req, err, sizeof(err));
    if (r == 0)
        redact_request(&req);
    if (r == 0)
        r = engine_prepare(cfg, &req, &t, err, sizeof(err));
    if (r < 0) {
        environment_destroy(env, TEARDOWN_FAILED_TURN);
        environment_free(env);
        close_lost(es, res, "the runner could not carry the turn on after its worker died",
                   "turn_lost");
        goto out;
    }
    log_ctx_set(NULL, t->key, req.turn_id, engine_harness_name(req.harness));
    es->det = ad.det;
    es->skip_det = last_det;
    engine_run_adopted(t, env, &ad, es, res);
out:
    engine_turn_free(t);
    run_request_release(&req);
    json_object_put(o);
}

/* how long an adopter waits for a keeper that still sees the dead worker attached */
#define ADOPT_BUSY_TRIES 100
#define ADOPT_BUSY_WAIT_MS 20

/*
 * Carry on the turn of journal j (its writer died; j is ours now, and es takes it): through
 * its keeper when it holds the turn, else close it as lost. Records go to sink (NULL: none).
 */
static void adopt(const struct engine_config *cfg, struct journal *j, const struct event_sink *sink,
                  uint64_t sink_after)
{
    const struct journal_meta *m = journal_meta_of(j);
    struct pool_handle h = {.index = m->slot_index, .generation = m->slot_generation};
    struct environment *env = NULL;
    struct event_stream es;
    struct run_result res;
    json_object *result;
    uint64_t seq, det;
    char err[256], *payload = NULL;
    int r = -ENOENT;

    journal_last(j, &seq, &det);
    event_stream_init(&es, sink ? sink : &no_client);
    es.journal = j;
    es.seq = seq;
    es.det = det;
    es.sink_after = sink_after; /* what the follower has (the journal may hold less) */
    es.keepalive_ms = cfg->turns.keepalive_ms;
    run_result_init(&res);
    log_ctx_set(NULL, m->session_key, m->turn_id, NULL);
    if (!m->has_slot || !cfg->pool) {
        close_lost(&es, &res,
                   "the runner's worker died before this turn's prompt reached the agent: "
                   "nothing ran, send the turn again",
                   "turn_not_started");
        goto out;
    }
    r = pool_session_adopt(cfg->pool, h, m->turn_id, m->pid, util_self_pid());
    if (r == 0) {
        (void)journal_note_writer(j); /* a second death is looked for under this pid */
        /* "#busy": the keeper has not yet read the dead worker's end of the socket */
        for (int tries = 0; tries < ADOPT_BUSY_TRIES; tries++) {
            r = environment_reconnect(cfg, h, false, &env, err, sizeof(err));
            if (r != -EBUSY)
                break;
            util_sleep_ms(ADOPT_BUSY_WAIT_MS);
        }
        if (r < 0)
            drop_slot(cfg, h); /* ours now, its keeper unreachable: nobody else would */
    }
    if (r == 0)
        r = environment_turn_adopt(env, m->turn_id, &payload, err, sizeof(err));
    if (r < 0) {
        log_debug("turn '%s' cannot be adopted: %s", m->turn_id,
                 env            ? err
                 : r == -ESTALE ? "its slot changed hands"
                                : ar_strerror(r));
        bool not_started = env && r == -ENOENT; /* the keeper holds no such turn */

        if (env) {
            environment_destroy(env, TEARDOWN_FAILED_TURN);
            environment_free(env);
        }
        if (not_started) /* its prompt never got there */
            close_lost(&es, &res,
                       "the runner's worker died before this turn's prompt reached the agent: "
                       "nothing ran, send the turn again",
                       "turn_not_started");
        else
            close_lost(&es, &res,
                       "the runner's worker died during this turn and its agent could not be "
                       "reached again",
                       "turn_lost");
        goto out;
    }
    log_debug("adopting turn '%s' of a dead worker (%llu records journaled)", m->turn_id,
             (unsigned long long)seq);
    run_from_payload(cfg, env, payload, &es, det, &res);
out:
    result = run_result_to_json(&res);
    (void)event_stream_result(&es, result);
    json_object_put(result);
    log_debug("adopted turn finished: ok %s, stop '%s'", res.ok ? "true" : "false",
             res.stop_reason ? res.stop_reason : "");
    free(payload);
    run_result_release(&res);
    event_stream_release(&es);
    log_ctx_clear();
    log_redact_clear();
}

/* ---- reattach ------------------------------------------------------------------------------ */

struct engine_follow {
    const struct engine_config *cfg;
    struct journal_reader *rd;
    uint64_t after; /* the last seq the follower's client has */
    char turn_id[JOURNAL_ID_MAX];
};

int engine_follow_open(const struct engine_config *cfg, const char *turn_id, const char *project_id,
                       uint64_t after, struct engine_follow **ret, uint64_t *ret_oldest)
{
    struct engine_follow *f;
    char root[PATH_MAX];
    int r;

    if (turns_root(cfg, root) < 0)
        return -ENOENT;
    f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->cfg = cfg;
    f->after = after;
    snprintf(f->turn_id, sizeof(f->turn_id), "%s", turn_id);
    r = journal_open(root, turn_id, project_id && project_id[0] ? project_id : NULL, after, &f->rd,
                     ret_oldest);
    if (r < 0) {
        free(f);
        return r;
    }
    *ret = f;
    return 0;
}

static bool sink_alive(const struct event_sink *sink, bool *gone)
{
    if (!*gone && sink->client_alive && !sink->client_alive(sink->ctx))
        *gone = true;
    return !*gone;
}

/* Copy every record there is to the sink: 1 when the result was among them, 0, -errno. */
static int pump(struct engine_follow *f, const struct event_sink *sink, struct buf *rec, bool *gone)
{
    uint64_t seq;
    bool result = false;
    int r, wrote = 0;

    while ((r = journal_read(f->rd, rec, &seq, &result)) == 1) {
        if (!*gone && sink->write_line(sink->ctx, rec->data, rec->len) < 0)
            *gone = true;
        f->after = seq;
        wrote = 1;
        if (result)
            break;
    }
    if (wrote && !*gone && sink->flush && sink->flush(sink->ctx) < 0)
        *gone = true;
    return r < 0 ? r : result;
}

void engine_follow_run(struct engine_follow *f, const struct event_sink *sink)
{
    struct journal *j = NULL;
    struct buf rec;
    bool gone = false;
    int r;

    buf_init(&rec, EVENT_LINE_MAX + 64);
    for (;;) {
        r = pump(f, sink, &rec, &gone);
        if (r != 0 || !sink_alive(sink, &gone))
            break; /* the result, a reader that fell behind, or the client went away */
        if (journal_reader_done(f->rd))
            break; /* finished, and read whole (a result the arena had no room for) */
        if (!journal_writer_alive(f->rd)) {
            r = journal_take_over(f->rd, &f->cfg->turns, &j);
            if (r == 0) {
                /* the dead writer's last records first, then carry the turn on */
                if (pump(f, sink, &rec, &gone) == 1) {
                    journal_close(j); /* it had finished after all */
                    break;
                }
                adopt(f->cfg, j, gone ? NULL : sink, f->after);
                break;
            }
        }
        journal_wait(f->rd, FOLLOW_POLL_MS);
    }
    buf_release(&rec);
}

void engine_follow_free(struct engine_follow *f)
{
    if (!f)
        return;
    journal_reader_free(f->rd);
    free(f);
}

/* ---- orphans: turns whose worker died and that nobody follows ------------------------------ */

struct orphan {
    const struct engine_config *cfg;
    struct journal *j;
};

static void *orphan_thread(void *arg)
{
    struct orphan *o = arg;

    adopt(o->cfg, o->j, NULL, 0);
    free(o);
    return NULL;
}

/* Take over one orphaned journal and carry its turn on in a thread of its own. */
static void take_orphan(const struct engine_config *cfg, const char *root,
                        const struct journal_entry *e)
{
    struct journal_reader *rd = NULL;
    struct orphan *o = NULL;
    struct journal *j = NULL;
    pthread_attr_t attr;
    pthread_t th;
    uint64_t oldest, seq;
    bool result = false;
    struct buf rec;

    /* the last record first: a writer that died right after its result left no turn */
    if (journal_open(root, e->meta.turn_id, e->meta.project_id[0] ? e->meta.project_id : NULL,
                     e->last_seq ? e->last_seq - 1 : 0, &rd, &oldest) < 0)
        return;
    buf_init(&rec, EVENT_LINE_MAX + 64);
    while (journal_read(rd, &rec, &seq, &result) == 1 && !result)
        ;
    buf_release(&rec);
    if (journal_take_over(rd, &cfg->turns, &j) == 0 && result)
        (void)journal_finish(j);
    else if (j)
        o = calloc(1, sizeof(*o));
    journal_reader_free(rd);
    if (!o) {
        journal_close(j);
        return;
    }
    *o = (struct orphan){.cfg = cfg, .j = j};
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, orphan_thread, o) != 0) {
        journal_close(j);
        free(o);
    }
    pthread_attr_destroy(&attr);
}

/*
 * The worker's background thread for journals. Every second it faults in the journals' next
 * memory (journal_prefault). A turn is orphaned only when its writer, a worker, died; the
 * master counts every worker it replaces (PC_WORKER_RESTARTS). A scan looks at every journal
 * of the arena (thousands when turns are many: finished ones stay
 * AGENT_RUNNER_TURN_JOURNAL_MS), so after the first one a worker scans (at most every
 * ORPHAN_EVERY_MS) when that count moved, again while the last scan saw an unfinished journal
 * without a writer (an orphan it took, or one not quiet long enough yet), and every
 * ORPHAN_FULL_MS.
 */
static void *orphan_scan(void *arg)
{
    const struct engine_config *cfg = arg;
    uint64_t restarts_seen = 0;
    int64_t next_full = 0;
    bool pending = true; /* the first scan: this worker may replace a dead one */
    char root[PATH_MAX];

    int64_t next_scan;

    if (turns_root(cfg, root) < 0)
        return NULL;
    (void)journal_prefault(root, &cfg->turns); /* before this worker's first turn */
    next_scan = util_wall_ms() + ORPHAN_FIRST_MS;
    for (;;) {
        struct journal_entry *v = NULL;
        uint64_t restarts;
        size_t n = 0;
        int64_t now;

        util_sleep_ms(PREFAULT_EVERY_MS);
        (void)journal_prefault(root, &cfg->turns);
        now = util_wall_ms();
        if (now < next_scan)
            continue;
        next_scan = now + ORPHAN_EVERY_MS;
        restarts = cfg->pool ? pool_counter_get(cfg->pool, PC_WORKER_RESTARTS) : 0;
        if (!cfg->pool || restarts != restarts_seen)
            pending = true;
        restarts_seen = restarts;
        if (pending || now >= next_full) {
            pending = false;
            next_full = now + ORPHAN_FULL_MS;
            if (journal_sweep_list(root, true, &v, &n) == 0)
                for (size_t i = 0; i < n; i++) {
                    if (v[i].meta.state != JOURNAL_RUNNING || v[i].writer_alive)
                        continue;
                    /* an orphan, or one not quiet long enough yet: look again next time
                     * (an adopted one has a live writer then) */
                    pending = true;
                    if (v[i].changed_ms + ORPHAN_QUIET_MS <= now)
                        take_orphan(cfg, root, &v[i]);
                }
            free(v);
        }
    }
    return NULL;
}

int engine_turns_start(const struct engine_config *cfg)
{
    pthread_attr_t attr;
    pthread_t th;
    int r;

    if (!cfg->turns.dir[0] || !cfg->turns.keep_ms)
        return 0;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    r = -pthread_create(&th, &attr, orphan_scan, (void *)cfg);
    pthread_attr_destroy(&attr);
    return r;
}
