/*
 * daytona_bridge — run a harness inside a Daytona sandbox and give the keeper its stdio as
 * local file descriptors, so the keeper's poll loop relays ACP to it exactly as it does to a
 * local bubblewrap child.
 *
 * How ACP is carried (tests/fixtures/fake_daytona.md "Carrying ACP over the fake"):
 * a toolbox process session per harness start, the harness started in it with
 * `exec {runAsync:true, suppressInputEcho:true}`; each line the keeper writes is one
 * `POST .../command/{cid}/input`; the command log is followed over a WebSocket
 * (X-Daytona-SDK-Version 0.198.0: binary frames of the raw log with 0x01x3/0x02x3 stdout /
 * stderr markers), demultiplexed (daytona_demux) into the stdout and stderr pipes. The stream
 * is opened with X-Daytona-Skip-Last-Activity-Update so an idle session lets the sandbox
 * auto-stop; the bridge marks activity itself (POST last-activity) at most once a minute while
 * lines flow or while the keeper says a turn is in flight. A stream that closes is not taken as
 * the harness's exit: the command is looked up (0, 50, 100, 200 ms) and, while it runs, the
 * log is reopened and the replayed bytes already delivered are skipped; once it exited, a
 * non-follow log fetch delivers any tail the stream missed, then stdout and stderr reach EOF
 * and the exit status is posted.
 *
 * Credentials: the harness environment (which may hold the run's model key) is never on a
 * command line and never in the sandbox's create `env` (which the API returns in every
 * description): it is uploaded as a file of `NAME='value'` lines (mode 0600, in a 0700 folder)
 * that a generated launcher sources under `env -i` before it execs argv.
 *
 * Workspace once, not per turn (a full upload per turn was most of a 30 s Daytona follow-up
 * in Paperclip's measurements): every upload goes through a manifest of path -> SHA-256
 * (path, mode, content); a warm or resumed start uploads only files whose digest changed, in
 * one bulk upload. The manifest lives with the environment (the keeper); a fresh manifest
 * (e.g. after a runner restart) simply uploads everything once.
 *
 * Threads: two per bridge (the input writer, the log reader), each with its own
 * daytona_client; both block every signal, so a keeper's signalfd still sees them all.
 */
#ifndef AR_DAYTONA_BRIDGE_H
#define AR_DAYTONA_BRIDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "provider/daytona/daytona_api.h"
#include "provider/daytona/daytona_manifest.h"
#include "provider/daytona/daytona_toolbox.h"

#define DAYTONA_BRIDGE_DIR "/home/daytona/.agent-runner" /* default state_dir */
#define DAYTONA_BRIDGE_ACTIVITY_MS 60000
#define DAYTONA_BRIDGE_LINE_MAX (16u * 1024 * 1024)
#define DAYTONA_BRIDGE_LOST 255 /* exit status when the harness could not be followed */

/* ---- harness launch ------------------------------------------------------------------- */

/*
 * The harness: a sandbox description as the harness modules build it, with in-sandbox paths.
 *   files  [{"path": absolute, "content": text, "mode": int}]   (may be NULL)
 *   env    {"NAME": "value"}: the complete harness environment
 *   argv   ["cmd", "arg", ...]
 *   cwd    working directory (created when missing)
 */
struct daytona_harness {
    json_object *files;
    json_object *env;
    json_object *argv;
    const char *cwd;
    const char *state_dir; /* our folder in the sandbox (env file, launcher); NULL =
                              DAYTONA_BRIDGE_DIR. Snapshots differ in their user's home:
                              daytona_toolbox_home() tells */
    long activity_ms;      /* how often activity is marked while busy; 0 = 60 s. Keep it
                              under half the sandbox's auto-stop interval */
    const char *command;   /* instead of files/env/argv/cwd: this shell command as it is,
                              nothing uploaded (it must hold no credential: the session's
                              command list shows it). The keeper channel relay */
    /* called after the upload, right before the harness is started (may be NULL): a
       failure (< 0, err set) ends the start with nothing left of it */
    int (*before_start)(void *ctx, char *err, size_t errlen);
    void *before_start_ctx;
};

/* The env file text: NAME='value' lines (single quotes escaped). Names are validated. */
int daytona_bridge_env_file(json_object *env, struct buf *out, char *err, size_t errlen);
/* The launcher script: sources env_path with set -a, cd cwd, exec argv (all quoted). */
int daytona_bridge_launcher(const char *env_path, json_object *argv, const char *cwd,
                            struct buf *out, char *err, size_t errlen);

struct daytona_bridge;

struct daytona_bridge_fds {
    int stdin_fd;  /* caller-owned: write ACP lines ('\n'-terminated) for the harness */
    int stdout_fd; /* caller-owned: the harness's stdout, EOF once it exited */
    int stderr_fd; /* caller-owned: its stderr */
    int exit_fd;   /* bridge-owned: readable once the exit status is known */
};

struct daytona_bridge_stats {
    struct daytona_manifest_stats sync;
    long start_ms;       /* session + exec + stream, after the sync */
    uint64_t lines_in;   /* ACP lines posted */
    uint64_t bytes_out;  /* stdout + stderr bytes delivered */
    unsigned reconnects; /* log streams reopened */
    unsigned activity_marks;
};

/*
 * Sync the harness files, start the harness in a new session of sb, follow its log. On
 * success *ret_fds holds the descriptors (close-on-exec, blocking on the bridge side).
 * m (required) is updated with what was uploaded.
 */
int daytona_bridge_start(const struct daytona_config *cfg, const struct daytona_sandbox *sb,
                         const struct daytona_harness *h, struct daytona_manifest *m,
                         struct daytona_bridge **ret, struct daytona_bridge_fds *ret_fds, char *err,
                         size_t errlen);

/* A turn is in flight (the keeper knows): keep marking the sandbox active. */
void daytona_bridge_set_busy(struct daytona_bridge *b, bool busy);

/* The harness's exit status (0-255, DAYTONA_BRIDGE_LOST when it was lost), -EAGAIN while it
 * runs. */
int daytona_bridge_exit_status(const struct daytona_bridge *b);

void daytona_bridge_stats(const struct daytona_bridge *b, struct daytona_bridge_stats *ret);

/*
 * Stop following and writing; with kill_harness, delete the session (its process group dies).
 * Joins the threads. Idempotent.
 */
void daytona_bridge_stop(struct daytona_bridge *b, bool kill_harness);
/* Stop (without killing) if needed and free. NULL is a no-op. */
void daytona_bridge_free(struct daytona_bridge *b);

#endif
