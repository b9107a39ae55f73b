/*
 * daytona_plan — a sandbox description (provider.h), made for the local layout, turned into
 * what runs in a Daytona sandbox: the harness's files, environment and command with the local
 * paths mapped to the sandbox user's, and the workspace's contents as files to upload.
 * No network I/O: the keeper reads the host workspace folder, nothing else.
 *
 * Path mapping (each path, each argv word, each environment value and each element of a
 * ':'-separated one):
 *   SANDBOX_HOME (/home/agent)[/...]      -> <home>[/...]   (the sandbox user's home)
 *   SANDBOX_WORKSPACE (/workspace)[/...]  -> <home>/workspace[/...]
 *   a roBinds folder[/...]                -> <harness_dir>[/...] when harness_dir is set, else
 *                                            unchanged (the image has it at the same path)
 * The local sandbox's synthesized /etc files are left out: the image has its own users.
 *
 * The workspace: every regular file under the description's host "workspace" folder (symlinks
 * are skipped, never followed), at most DAYTONA_PLAN_FILES_MAX files and
 * DAYTONA_PLAN_BYTES_MAX bytes in all (more is -E2BIG naming the limit, never a silent cut),
 * mode 0755 when the host file is executable, else 0644.
 *
 * The keeper channel (daytona_relay.h): when the description names "channelRelay" (the
 * runner's harness folder, whose extension/bin/channel-relay.js runs on its pinned Node), the
 * plan sets RUNNER_CHANNEL to <home>/.agent-runner/channel/channel.sock (a folder the
 * sandbox user owns: the image need not let it write under /run) and says how to start the
 * relay there: relay_command, a shell command without any credential.
 */
#ifndef AR_DAYTONA_PLAN_H
#define AR_DAYTONA_PLAN_H

#include <stddef.h>

#include <json-c/json.h>

#include "base/buf.h"

#define DAYTONA_PLAN_FILES_MAX 2000
#define DAYTONA_PLAN_BYTES_MAX (64u * 1024 * 1024)
#define DAYTONA_PLAN_PATH_MAX 1024
#define DAYTONA_PLAN_STATE ".agent-runner" /* our folder in the home (env file, launcher) */
#define DAYTONA_PLAN_SOCK_MAX 108          /* sun_path */
#define DAYTONA_PLAN_RELAY "extension/bin/channel-relay.js" /* in the harness folder */

struct daytona_plan {
    char home[DAYTONA_PLAN_PATH_MAX];
    char workspace[DAYTONA_PLAN_PATH_MAX]; /* <home>/workspace: the harness's cwd */
    char state_dir[DAYTONA_PLAN_PATH_MAX]; /* <home>/.agent-runner */
    json_object *files;                    /* owned: [{path, content, mode}] in sandbox paths */
    json_object *env;                      /* owned: the harness environment, mapped */
    json_object *argv;                     /* owned */
    json_object *folders; /* owned: roBinds as the sandbox must have them (strings) */
    size_t workspace_files;
    char channel_sock[DAYTONA_PLAN_SOCK_MAX]; /* RUNNER_CHANNEL in the sandbox ("" = none) */
    char *relay_command; /* owned, NULL when the description has no channelRelay */
};

/*
 * Build the plan of sandbox for a sandbox whose user's home is home. harness_dir: where the
 * image has the harness folder (NULL or "" = the same path as on the runner). On failure err
 * names the problem and nothing is kept.
 */
int daytona_plan_build(json_object *sandbox, const char *home, const char *harness_dir,
                       struct daytona_plan *ret, char *err, size_t errlen);
void daytona_plan_release(struct daytona_plan *p);

/*
 * Map one path-like value (see above) into out (at most len); -ENAMETOOLONG.
 * ro_binds may be NULL.
 */
int daytona_plan_map(const char *value, const char *home, json_object *ro_binds,
                     const char *harness_dir, char *out, size_t len);

/*
 * The preflight command a new sandbox runs once (through the exec seam): create the
 * workspace, then check that every folder the harness needs is there. Exit status 3: the
 * workspace cannot be made; 4 + i: folders[i] is missing.
 */
int daytona_plan_preflight(const struct daytona_plan *p, struct buf *out);

#endif
