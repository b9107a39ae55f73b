/*
 * platform_ledger — the turns ledger of platform mode (platform_ledger.h).
 */
#include "agenta/platform_ledger.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agenta/ids.h"
#include "base/log.h"
#include "base/util.h"

/* The turns ledger of one run, shared with its thread. */
struct platform_ledger {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    unsigned refs;
    bool finished;
    bool completed;
    char agent_session_id[128];
    struct agenta_api *api;
    char *session_id;
    char turn_id[40]; /* "" when the request's is no UUID (the API takes only those) */
    char stream_id[AGENTA_ID_MAX];
    char harness_kind[32];
    char trace_uuid[37];
    char span_id[17];
    char start_time[32];
    bool resume; /* an approval resume: the latest open row is this turn's */
    json_object *references;
};

/* Ledger threads alive in this process (the worker waits for them at shutdown). */
static pthread_mutex_t ledgers_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_cond_t ledgers_gone = PTHREAD_COND_INITIALIZER;

static unsigned nledgers;

/* ---- the turns ledger -------------------------------------------------------------------- */

void platform_ledger_unref(struct platform_ledger *l)
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
    struct platform_ledger *l = arg;
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
                                     l->agent_session_id[0] ? l->agent_session_id : NULL, end, err,
                                     sizeof(err));
        if (r < 0)
            log_debug("platform: session \"%s\" turn %llu not completed in the ledger: %s",
                      l->session_id, (unsigned long long)index, err);
    }
    platform_ledger_unref(l);
    pthread_mutex_lock(&ledgers_lock);
    nledgers--;
    pthread_cond_broadcast(&ledgers_gone);
    pthread_mutex_unlock(&ledgers_lock);
    return NULL;
}

struct platform_ledger *platform_ledger_start(const struct platform_ledger_params *lp)
{
    struct platform_ledger *l;
    pthread_attr_t attr;
    pthread_t tid;
    int r;

    if (!lp->stream_id || !lp->stream_id[0])
        return NULL; /* Agenta writes no ledger row without a stream */
    l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    snprintf(l->stream_id, sizeof(l->stream_id), "%s", lp->stream_id);
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->wake, NULL);
    l->refs = 2; /* the run and the thread */
    l->api = agenta_api_ref(lp->api);
    l->session_id = strdup(lp->session_id);
    l->resume = lp->resume;
    if (ids_canonical_uuid(lp->turn_id))
        snprintf(l->turn_id, sizeof(l->turn_id), "%s", lp->turn_id);
    snprintf(l->harness_kind, sizeof(l->harness_kind), "%s", lp->harness_kind);
    if (ids_trace_uuid(lp->trace_id, l->trace_uuid) < 0)
        l->trace_uuid[0] = '\0';
    snprintf(l->span_id, sizeof(l->span_id), "%s", lp->span_id ? lp->span_id : "");
    agenta_iso_time(util_wall_ms(), l->start_time);
    l->references = agenta_workflow_reference_list(lp->run_context);
    if (!l->session_id) {
        l->refs = 1;
        platform_ledger_unref(l);
        return NULL;
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
        platform_ledger_unref(l);
        log_debug("platform: no ledger thread: %s", strerror(r));
        return NULL;
    }
    return l;
}

void platform_ledger_finish(struct platform_ledger *l, bool completed, const char *agent_session_id)
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

int platform_ledger_wait_all(int64_t deadline_ms)
{
    struct timespec ts;
    int r = 0;

    /* ledgers_gone runs on CLOCK_REALTIME (the default): convert the monotonic deadline */
    pthread_mutex_lock(&ledgers_lock);
    while (nledgers > 0) {
        int64_t left = deadline_ms - util_now_ms();

        if (left <= 0) {
            r = -ETIMEDOUT;
            break;
        }
        util_deadline_ts(util_wall_ms() + (left < 100 ? left : 100), &ts);
        pthread_cond_timedwait(&ledgers_gone, &ledgers_lock, &ts);
    }
    pthread_mutex_unlock(&ledgers_lock);
    return r;
}
