/*
 * metrics — the runner's Prometheus metrics, kept in the shared-memory header so every worker
 * reports the same totals. Updates are lock-free atomic increments; the only locked step is
 * registering a provider label value the first time it is seen (under the pool lock, no I/O).
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
 */
#ifndef AR_METRICS_H
#define AR_METRICS_H

#include <stdint.h>

#define METRIC_PROVIDERS 16
#define METRIC_PROVIDER_LEN 32
#define METRIC_HARNESSES 8
#define METRIC_OUTCOMES 5
#define METRIC_REASONS 24
#define METRIC_BUCKETS 13

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
};

struct pool;
struct buf;

/* provider NULL or "" counts as "none"; an unknown one past the table as "other". */
void metrics_turn(struct pool *p, unsigned harness, const char *provider,
                  enum metric_outcome outcome);
void metrics_cold_start(struct pool *p, unsigned reason);
void metrics_teardown(struct pool *p, unsigned reason);
void metrics_observe(struct metric_histogram *h, int64_t micros);

/* Totals over every label (agent-runner-ctl stats). */
uint64_t metrics_turns_total(const struct pool *p, enum metric_outcome outcome);
uint64_t metrics_cold_starts_total(const struct pool *p);
uint64_t metrics_keeper_spawns_total(const struct pool *p);

/* The Prometheus text exposition of everything above. */
int metrics_render(struct pool *p, struct buf *out);

#endif
