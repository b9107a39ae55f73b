/*
 * engine_cluster — the engine's face of engine/cluster (the public part is in engine.h and
 * admin.h): the settings read with the engine's, and the /metrics lines.
 */
#ifndef AR_ENGINE_CLUSTER_H
#define AR_ENGINE_CLUSTER_H

#include <stddef.h>

#include "base/buf.h"
#include "engine.h"

/* AGENT_RUNNER_REDIS_URL and the rest (cluster.h): cfg->cluster, NULL when it is not set.
 * -EINVAL with err naming the variable, -ENOMEM. */
int engine_cluster_config_read(struct engine_config *cfg, engine_getenv_fn get, void *ctx,
                               char *err, size_t errlen);
void engine_cluster_config_release(struct engine_config *cfg);
/* The agent_runner_cluster_* lines, appended to out (nothing without a cluster). */
int engine_cluster_metrics(const struct engine_config *cfg, struct buf *out);

#endif
