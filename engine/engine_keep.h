/*
 * engine_keep — the engine's side of a session's kept harness state (session/kept.h; README
 * "Sessions": kept harness state): what a cold start does with it (load the harness's own
 * session, or replay the conversation as text and say why), the files written into the new
 * sandbox before ACP session/load, and the state saved after every turn that ended well.
 *
 * A local sandbox's files are kept here; a remote provider's sandbox keeps its own disk across
 * a stop, so only what names its session is kept, and it is loaded when the sandbox was
 * resumed (a replaced one lost the files: replay).
 * Saving runs on the worker after the turn's result is known and before the environment is
 * parked or destroyed: the worker has what makes a kept state usable later — the conversation's
 * fingerprint after the turn (the same one the session table parks), the configuration's, the
 * run's credentials to check the files against — and it is still attached to the live sandbox.
 */
#ifndef AR_ENGINE_KEEP_H
#define AR_ENGINE_KEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine_turn.h"
#include "environment/environment.h"
#include "session/kept.h"

enum keep_resume {
    KEEP_NEW = 0, /* no earlier conversation */
    KEEP_REPLAY,  /* the conversation is replayed as text */
    KEEP_LOAD,    /* the harness reopens its own kept session (session/load) */
};

struct engine_keep {
    enum keep_resume resume;
    char note[320];       /* why a kept state was not (or could not be) loaded; "" */
    bool load_failed;     /* session/load failed on an environment: start another and replay */
    struct kept_state st; /* KEEP_LOAD: what is restored and loaded */
};

/* "new", "replay", "load": environment_ready's "resume". */
const char *engine_keep_resume_name(enum keep_resume r);

/*
 * A cold start's choice for t (rebuilt: the history was rebuilt from platform records). Never
 * fails: no kept state, an unreadable, altered or stale one, another harness or configuration
 * all mean a replay (note says why, when there was a kept state).
 */
void engine_keep_plan(const struct engine_turn *t, bool rebuilt, struct engine_keep *ret);

/* A planned load did not happen: a replay from now on, saying why. */
void engine_keep_fall_back(struct engine_keep *k, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * Before session/load: the kept files into env's sandbox home, as its user; on a remote
 * sandbox nothing (its disk has them) when it was resumed, else -ENOENT. -errno, err.
 */
int engine_keep_restore(const struct engine_turn *t, const struct environment *env,
                        const struct engine_keep *k, char *err, size_t errlen);

/*
 * After a turn that ended well (not paused) on env: save the harness's session state with
 * next_fp (the conversation's fingerprint after the turn). A state that cannot be kept (over a
 * bound, or holding a credential of the run) removes the session's older one.
 */
void engine_keep_save(const struct engine_turn *t, const struct environment *env,
                      const uint8_t next_fp[IDENTITY_DIGEST_LEN]);

void engine_keep_release(struct engine_keep *k);

#endif
