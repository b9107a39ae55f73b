/*
 * daytona_toolbox — the daemon inside a sandbox, reached through the toolbox proxy
 * (tests/fixtures/fake_daytona.md "Toolbox"): one-shot execute, process sessions (create,
 * exec async, input, command status, logs, the followed log as a WebSocket), files (bulk
 * upload with each `.path` part before its `.file` part, folders, modes, download) and the
 * user's home. tb is the sandbox's toolbox base URL (struct daytona_sandbox.toolbox). Every
 * call is sandbox activity unless it says otherwise. Errors as in daytona_client.h.
 */
#ifndef AR_DAYTONA_TOOLBOX_H
#define AR_DAYTONA_TOOLBOX_H

#include <stdbool.h>
#include <stddef.h>

#include "provider/daytona/daytona_client.h"

/* GET /user-home-dir: the sandbox user's home (absolute) into ret. */
int daytona_toolbox_home(struct daytona_client *c, const char *tb, char *ret, size_t len);

/* POST /process/execute: one-shot shell command, output combined (capped at max_output). */
int daytona_toolbox_execute(struct daytona_client *c, const char *tb, const char *command,
                            int timeout_s, size_t max_output, int *ret_exit_code,
                            struct buf *ret_output);

int daytona_toolbox_session_create(struct daytona_client *c, const char *tb, const char *sid);
int daytona_toolbox_session_delete(struct daytona_client *c, const char *tb, const char *sid);
/* POST .../exec {runAsync:true}: ret_cmd_id receives the command id (<= DAYTONA_ID_MAX). */
int daytona_toolbox_exec(struct daytona_client *c, const char *tb, const char *sid,
                         const char *command, bool suppress_input_echo,
                         char ret_cmd_id[DAYTONA_ID_MAX]);
/*
 * GET .../command/{cid}: 1 and *ret_exit_code when it exited, 0 while it runs.
 */
int daytona_toolbox_command_status(struct daytona_client *c, const char *tb, const char *sid,
                                   const char *cid, int *ret_exit_code);
/*
 * POST .../input {data}: the daemon appends the newline. skip_activity sends
 * X-Daytona-Skip-Last-Activity-Update (harness chatter between turns must not keep the
 * sandbox alive). -EPIPE (410) when the command is over.
 */
int daytona_toolbox_input(struct daytona_client *c, const char *tb, const char *sid,
                          const char *cid, const char *data, size_t len, bool skip_activity);
/*
 * GET .../logs (no follow): the raw marked log (`output`) into ret_raw, and the split
 * streams when the caller wants them (either may be NULL). Caps are the buffers' own.
 */
int daytona_toolbox_logs(struct daytona_client *c, const char *tb, const char *sid, const char *cid,
                         struct buf *ret_raw, struct buf *ret_stdout, struct buf *ret_stderr);

struct ws_conn;
/*
 * Open GET .../logs?follow=true as a WebSocket (binary frames of the raw marked log, replayed
 * from byte 0). skip_activity: the stream does not count as sandbox activity.
 */
int daytona_toolbox_follow(struct daytona_client *c, const char *tb, const char *sid,
                           const char *cid, bool skip_activity, struct ws_conn **ret, char *err,
                           size_t errlen);

struct daytona_toolbox_file {
    const char *path; /* absolute, or relative to the sandbox user's home */
    const void *data;
    size_t len;
};
/*
 * POST /files/bulk-upload: one multipart request, parts `files[i].path` then `files[i].file`.
 * -EIO when any entry failed (the message names the first).
 */
int daytona_toolbox_upload(struct daytona_client *c, const char *tb,
                           const struct daytona_toolbox_file *f, size_t n);
/* POST /files/folder?path=&mode= (parents created). mode as octal text, e.g. "700". */
int daytona_toolbox_folder(struct daytona_client *c, const char *tb, const char *path,
                           const char *mode);
/* POST /files/permissions?path=&mode= */
int daytona_toolbox_chmod(struct daytona_client *c, const char *tb, const char *path,
                          const char *mode);
/* GET /files/download?path= into ret (its cap applies). */
int daytona_toolbox_download(struct daytona_client *c, const char *tb, const char *path,
                             struct buf *ret);

/* Append s to out as one single-quoted shell word (for the commands execute and exec run). */
int daytona_shell_quote(const char *s, struct buf *out);

#endif
