#include "telemetry/metrics.h"

#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "core/contracts.h"
#include "harness/harness.h"

/* Upper bounds of the histogram buckets, in seconds. */
static const double bounds[METRIC_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                              0.25,  0.5,    1,     2.5,  5,     10};

static const char *const outcome_names[METRIC_OUTCOMES] = {"ok", "error", "paused", "cancelled",
                                                           "limit"};

static void add(uint64_t *cell, uint64_t n)
{
    __atomic_add_fetch(cell, n, __ATOMIC_RELAXED);
}

static uint64_t get(const uint64_t *cell)
{
    return __atomic_load_n(cell, __ATOMIC_RELAXED);
}

static void label_of(const char *provider, char name[METRIC_PROVIDER_LEN])
{
    snprintf(name, METRIC_PROVIDER_LEN, "%s", provider && provider[0] ? provider : "none");
}

unsigned metrics_provider_find(const struct pool_metrics *m, const char *provider)
{
    char name[METRIC_PROVIDER_LEN];

    label_of(provider, name);
    for (unsigned i = 0; i < METRIC_PROVIDERS; i++)
        if (strncmp(m->providers[i], name, METRIC_PROVIDER_LEN) == 0)
            return i;
    return METRIC_PROVIDERS;
}

unsigned metrics_provider_register_locked(struct pool_metrics *m, const char *provider)
{
    char name[METRIC_PROVIDER_LEN];

    label_of(provider, name);
    for (unsigned i = 0; i < METRIC_PROVIDERS; i++) {
        if (strncmp(m->providers[i], name, METRIC_PROVIDER_LEN) == 0)
            return i;
        if (!m->providers[i][0]) {
            memcpy(m->providers[i], name, METRIC_PROVIDER_LEN);
            return i;
        }
    }
    return METRIC_PROVIDERS;
}

void metrics_turn(struct pool_metrics *m, unsigned harness, unsigned provider,
                  enum metric_outcome outcome)
{
    if (!m || harness >= METRIC_HARNESSES || (unsigned)outcome >= METRIC_OUTCOMES ||
        provider > METRIC_PROVIDERS)
        return;
    add(&m->turns[harness][provider][outcome], 1);
}

void metrics_cold_start(struct pool_metrics *m, unsigned reason)
{
    if (m && reason < METRIC_REASONS)
        add(&m->cold_starts[reason], 1);
}

uint64_t metrics_turns_total(const struct pool_metrics *m, enum metric_outcome outcome)
{
    uint64_t sum = 0;

    for (unsigned h = 0; h < METRIC_HARNESSES; h++)
        for (unsigned pr = 0; pr <= METRIC_PROVIDERS; pr++)
            sum += get(&m->turns[h][pr][outcome]);
    return sum;
}

uint64_t metrics_cold_starts_total(const struct pool_metrics *m)
{
    uint64_t sum = 0;

    for (unsigned r = 0; r < METRIC_REASONS; r++)
        sum += get(&m->cold_starts[r]);
    return sum;
}

uint64_t metrics_keeper_spawns_total(const struct pool_metrics *m)
{
    return get(&m->keeper_spawn.count);
}

void metrics_teardown(struct pool_metrics *m, unsigned reason)
{
    if (m && reason < METRIC_REASONS)
        add(&m->teardowns[reason], 1);
}

void metrics_observe(struct metric_histogram *h, int64_t micros)
{
    double s = (double)micros / 1e6;
    unsigned i;

    if (micros < 0)
        micros = 0;
    for (i = 0; i < METRIC_BUCKETS && s > bounds[i]; i++)
        ;
    if (i < METRIC_BUCKETS)
        add(&h->buckets[i], 1);
    else
        add(&h->inf, 1);
    add(&h->count, 1);
    add(&h->sum_us, (uint64_t)micros);
}

void metrics_lease(struct pool_metrics *m, unsigned outcome, unsigned reason, int64_t acquire_ms)
{
    if (!m || outcome >= METRIC_LEASE_OUTCOMES || reason >= METRIC_LEASE_REASONS)
        return;
    add(&m->leases[outcome][reason], 1);
    metrics_observe(&m->sandbox_acquire, acquire_ms * 1000);
}

void metrics_release(struct pool_metrics *m, unsigned disposition)
{
    if (m && disposition < METRIC_DISPOSITIONS)
        add(&m->releases[disposition], 1);
}

void metrics_sweep(struct pool_metrics *m, enum metric_sweep_action a, uint64_t n)
{
    if (m && (unsigned)a < METRIC_SWEEP_ACTIONS && n)
        add(&m->sweeps[a], n);
}

static void histogram(struct buf *out, const char *name, const char *help,
                      const struct metric_histogram *h);

/* The remote-lease families: every outcome/reason pair that can happen, zeros included. */
static void render_leases(const struct pool_metrics *m, struct buf *out)
{
    static const char *const sweep_names[] = {"adopted", "kept", "deleted", "failed"};

    buf_append_str(out, "# HELP agent_runner_sandbox_leases_total Remote sandbox acquisitions "
                        "by outcome (and why a sandbox was replaced).\n"
                        "# TYPE agent_runner_sandbox_leases_total counter\n");
    for (unsigned o = 0; o < METRIC_LEASE_OUTCOMES; o++)
        for (unsigned r = 0; r < METRIC_LEASE_REASONS; r++) {
            if ((o == PROVIDER_LEASE_REPLACEMENT) != (r != PROVIDER_REPLACED_NONE))
                continue;
            buf_printf(out, "agent_runner_sandbox_leases_total{outcome=\"%s\",reason=\"%s\"} %llu\n",
                       provider_lease_outcome_name((enum provider_lease_outcome)o),
                       r ? provider_replacement_reason_name((enum provider_replacement_reason)r)
                         : "none",
                       (unsigned long long)get(&m->leases[o][r]));
        }
    buf_append_str(out, "# HELP agent_runner_sandbox_releases_total Remote sandboxes released, by "
                        "what was done with them.\n"
                        "# TYPE agent_runner_sandbox_releases_total counter\n");
    for (unsigned d = 0; d < METRIC_DISPOSITIONS; d++)
        buf_printf(out, "agent_runner_sandbox_releases_total{disposition=\"%s\"} %llu\n",
                   provider_disposition_name((enum provider_disposition)d),
                   (unsigned long long)get(&m->releases[d]));
    buf_append_str(out, "# HELP agent_runner_sandbox_sweep_total Remote sandboxes a start-up "
                        "sweep adopted, kept, deleted or failed to handle.\n"
                        "# TYPE agent_runner_sandbox_sweep_total counter\n");
    for (unsigned a = 0; a < METRIC_SWEEP_ACTIONS; a++)
        buf_printf(out, "agent_runner_sandbox_sweep_total{action=\"%s\"} %llu\n", sweep_names[a],
                   (unsigned long long)get(&m->sweeps[a]));
    histogram(out, "agent_runner_sandbox_acquire_seconds",
              "Time to acquire a remote sandbox lease (resume or create).", &m->sandbox_acquire);
}

/* Label values are provider names from requests: escape what the exposition format needs. */
static void label_value(struct buf *out, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            buf_printf(out, "\\%c", *v);
        else if (*v == '\n')
            buf_append_str(out, "\\n");
        else
            buf_append_char(out, *v);
    }
}

static void histogram(struct buf *out, const char *name, const char *help,
                      const struct metric_histogram *h)
{
    uint64_t cum = 0;

    buf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (unsigned i = 0; i < METRIC_BUCKETS; i++) {
        cum += get(&h->buckets[i]);
        buf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cum);
    }
    cum += get(&h->inf);
    buf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    buf_printf(out, "%s_sum %.6f\n%s_count %llu\n", name, (double)get(&h->sum_us) / 1e6, name,
               (unsigned long long)get(&h->count));
}

static void counter(struct buf *out, const char *name, const char *help, uint64_t v)
{
    buf_printf(out, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
               (unsigned long long)v);
}

int metrics_render(const struct pool_metrics *m, const struct metrics_gauges *g, struct buf *out)
{
    buf_printf(out, "# HELP agent_runner_build_info Runner version and protocol.\n"
                    "# TYPE agent_runner_build_info gauge\n"
                    "agent_runner_build_info{version=\"%s\",protocol=\"%d\"} 1\n",
               AR_VERSION, AR_PROTOCOL);
    buf_append_str(out, "# HELP agent_runner_turns_total Turns by harness, provider and outcome.\n"
                        "# TYPE agent_runner_turns_total counter\n");
    for (unsigned h = 0; h < METRIC_HARNESSES && h < HARNESS_COUNT; h++)
        for (unsigned pr = 0; pr <= METRIC_PROVIDERS; pr++)
            for (unsigned o = 0; o < METRIC_OUTCOMES; o++) {
                uint64_t v = get(&m->turns[h][pr][o]);
                if (!v)
                    continue;
                buf_printf(out, "agent_runner_turns_total{harness=\"%s\",provider=\"",
                           harness_kind_name((enum harness_kind)h));
                if (pr < METRIC_PROVIDERS)
                    label_value(out, m->providers[pr]);
                else
                    buf_append_str(out, "other");
                buf_printf(out, "\",outcome=\"%s\"} %llu\n", outcome_names[o],
                           (unsigned long long)v);
            }
    counter(out, "agent_runner_warm_hits_total", "Turns that ran on a live environment.",
            g->warm_hits);
    counter(out, "agent_runner_egress_denied_total",
            "Connections from sandboxes that their egress policy refused.", g->egress_denied);
    counter(out, "agent_runner_model_calls_total",
            "Model calls the sandboxes' model gateways forwarded.", g->model_calls);
    counter(out, "agent_runner_model_refused_total",
            "Model calls the sandboxes' model gateways refused.", g->model_refused);
    counter(out, "agent_runner_usage_mismatch_total",
            "Turns whose harness-reported usage differed from the model gateway's measurement.",
            g->usage_mismatch);
    buf_append_str(out, "# HELP agent_runner_cold_starts_total Turns that started a new "
                        "environment, by why (miss, or the mismatch that evicted the old one).\n"
                        "# TYPE agent_runner_cold_starts_total counter\n");
    for (unsigned r = 0; r < METRIC_REASONS && r < TEARDOWN_COUNT; r++) {
        uint64_t v = get(&m->cold_starts[r]);
        if (v)
            buf_printf(out, "agent_runner_cold_starts_total{reason=\"%s\"} %llu\n",
                       r == 0 ? "miss" : teardown_reason_name((enum teardown_reason)r),
                       (unsigned long long)v);
    }
    buf_append_str(out, "# HELP agent_runner_teardowns_total Environments torn down, by reason.\n"
                        "# TYPE agent_runner_teardowns_total counter\n");
    for (unsigned r = 0; r < METRIC_REASONS && r < TEARDOWN_COUNT; r++) {
        uint64_t v = get(&m->teardowns[r]);
        if (v)
            buf_printf(out, "agent_runner_teardowns_total{reason=\"%s\"} %llu\n",
                       teardown_reason_name((enum teardown_reason)r), (unsigned long long)v);
    }
    buf_append_str(out, "# HELP agent_runner_sessions Session table slots by state.\n"
                        "# TYPE agent_runner_sessions gauge\n");
    for (size_t st = 0; st < g->nstates && st < METRIC_STATES; st++)
        buf_printf(out, "agent_runner_sessions{state=\"%s\"} %llu\n", g->state_name[st],
                   (unsigned long long)g->state_count[st]);
    histogram(out, "agent_runner_keeper_spawn_seconds",
              "Time to start a keeper and its sandbox and attach to it.", &m->keeper_spawn);
    histogram(out, "agent_runner_first_event_seconds",
              "Time from the start of a turn to the harness's first output.", &m->first_event);
    buf_printf(out, "# HELP agent_runner_runs_in_flight Runs being served now.\n"
                    "# TYPE agent_runner_runs_in_flight gauge\nagent_runner_runs_in_flight %llu\n",
               (unsigned long long)g->inflight);
    counter(out, "agent_runner_admission_rejected_total",
            "Runs refused with 429 because the runner was at capacity.",
            g->admission_rejected);
    counter(out, "agent_runner_worker_restarts_total", "Worker processes respawned.",
            g->worker_restarts);
    counter(out, "agent_runner_keeper_spawns_total", "Keepers started.",
            get(&m->keeper_spawn.count));
    counter(out, "agent_runner_shm_repairs_total",
            "Times a process died holding the session table lock and the table was repaired.",
            g->repairs);
    render_leases(m, out);
    return 0;
}
