/*
 * metrics — the runner's Prometheus metrics, kept in the shared-memory header so every worker
 * reports the same totals. Updates are lock-free atomic increments; the only locked step is
 * registering a provider label value the first time it is seen (the pool takes its lock for
 * it: pool_metrics_turn). This module knows the block, not the table: it never includes
 * pool.h (the pool includes it).
 *
 *   agent_runner_turns_total{harness,provider,outcome}     outcome: ok error paused cancelled limit
 *   agent_runner_warm_hits_total
 *   agent_runner_cold_starts_total{reason}                 miss, or the mismatch that evicted
 *   agent_runner_teardowns_total{reason}                   every environment torn down
 *   agent_runner_sessions{state}                           slots by state (gauge)
 *   agent_runner_keeper_spawn_seconds                      histogram: new keeper + sandbox ready
 *   agent_runner_first_event_seconds                       histogram: turn start to first output
 *   agent_runner_runs_in_flight                            gauge
 *   agent_runner_admission_rejected_total, agent_runner_worker_restarts_total
 *   agent_runner_sandbox_leases_total{outcome,reason}      remote leases: created, resumed,
 *                                                          replacement (+ why)
 *   agent_runner_sandbox_releases_total{disposition}       keep_running, stop_and_retain, destroy
 *   agent_runner_sandbox_sweep_total{action}               restart sweep: adopted kept deleted
 * failed agent_runner_sandbox_acquire_seconds                   histogram: remote lease acquisition
 *   agent_runner_egress_denied_total                       connections sandboxes were refused
 *   agent_runner_model_calls_total                         calls the model gateways forwarded
 *   agent_runner_model_refused_total                       ... and refused
 *   agent_runner_usage_mismatch_total                      turns whose harness-reported usage
 *                                                          differed from the measured one
 */
#ifndef AR_METRICS_H
#define AR_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define METRIC_PROVIDERS 16
#define METRIC_PROVIDER_LEN 32
#define METRIC_HARNESSES 8
#define METRIC_OUTCOMES 5
#define METRIC_REASONS 24
#define METRIC_BUCKETS 13
#define METRIC_STATES 8
#define METRIC_LEASE_OUTCOMES 3 /* enum provider_lease_outcome */
#define METRIC_LEASE_REASONS 5  /* enum provider_replacement_reason */
#define METRIC_DISPOSITIONS 3   /* enum provider_disposition */
#define METRIC_SWEEP_ACTIONS 4

enum metric_sweep_action { SWEEP_ADOPTED = 0, SWEEP_KEPT, SWEEP_DELETED, SWEEP_FAILED };

enum metric_outcome {
    OUTCOME_OK = 0,
    OUTCOME_ERROR,
    OUTCOME_PAUSED,
    OUTCOME_CANCELLED,
    OUTCOME_LIMIT,
};

struct metric_histogram {
    uint64_t buckets[METRIC_BUCKETS]; /* non-cumulative counts per upper bound */
    uint64_t inf;
    uint64_t count;
    uint64_t sum_us;
};

struct pool_metrics {
    char providers[METRIC_PROVIDERS][METRIC_PROVIDER_LEN];
    uint64_t turns[METRIC_HARNESSES][METRIC_PROVIDERS + 1][METRIC_OUTCOMES];
    uint64_t cold_starts[METRIC_REASONS];
    uint64_t teardowns[METRIC_REASONS];
    struct metric_histogram keeper_spawn;
    struct metric_histogram first_event;
    uint64_t leases[METRIC_LEASE_OUTCOMES][METRIC_LEASE_REASONS];
    uint64_t releases[METRIC_DISPOSITIONS];
    uint64_t sweeps[METRIC_SWEEP_ACTIONS];
    struct metric_histogram sandbox_acquire;
};

struct buf;

/* Gauges and header counters the pool reads for metrics_render. */
struct metrics_gauges {
    uint64_t warm_hits;
    uint64_t egress_denied;
    uint64_t model_calls;
    uint64_t model_refused;
    uint64_t usage_mismatch;
    uint64_t inflight;
    uint64_t admission_rejected;
    uint64_t worker_restarts;
    uint64_t repairs;
    size_t nstates;
    const char *state_name[METRIC_STATES];
    uint64_t state_count[METRIC_STATES];
};

/*
 * The label index of provider (NULL or "" is "none"): 0..METRIC_PROVIDERS-1, or
 * METRIC_PROVIDERS when it is not registered. Lock-free.
 */
unsigned metrics_provider_find(const struct pool_metrics *m, const char *provider);
/* Register provider's label (the caller holds the table lock); METRIC_PROVIDERS when full. */
unsigned metrics_provider_register_locked(struct pool_metrics *m, const char *provider);
/* Lock-free updates; provider is a label index (METRIC_PROVIDERS counts as "other"). */
void metrics_turn(struct pool_metrics *m, unsigned harness, unsigned provider,
                  enum metric_outcome outcome);
void metrics_cold_start(struct pool_metrics *m, unsigned reason);
void metrics_teardown(struct pool_metrics *m, unsigned reason);
void metrics_observe(struct metric_histogram *h, int64_t micros);
/* A remote lease was acquired (outcome, reason: provider.h values) in acquire_ms. */
void metrics_lease(struct pool_metrics *m, unsigned outcome, unsigned reason, int64_t acquire_ms);
/* A remote lease was released with a disposition (provider.h). */
void metrics_release(struct pool_metrics *m, unsigned disposition);
void metrics_sweep(struct pool_metrics *m, enum metric_sweep_action a, uint64_t n);

/* Totals over every label (agent-runner-ctl stats). */
uint64_t metrics_turns_total(const struct pool_metrics *m, enum metric_outcome outcome);
uint64_t metrics_cold_starts_total(const struct pool_metrics *m);
uint64_t metrics_keeper_spawns_total(const struct pool_metrics *m);

/* The Prometheus text exposition of everything above. */
int metrics_render(const struct pool_metrics *m, const struct metrics_gauges *g, struct buf *out);

#endif
