/*
 * env_setup — prepare a new environment's host folder before its keeper starts:
 *
 *   <state>/envs/<id>/            0700, owned by the keeper, removed when it ends
 *   <state>/envs/<id>/workspace/  bound read-write at /workspace in the sandbox
 *
 * and write the workspace files the request asks for: agentsMd (CLAUDE.md for claude,
 * AGENTS.md otherwise), harnessFiles and skills. Every write goes through
 * util_write_file_beneath(), so a symlink left in a warm workspace cannot redirect it.
 * On failure nothing is left behind: the caller removes the folder (environment.c does).
 */
#ifndef AR_ENV_SETUP_H
#define AR_ENV_SETUP_H

#include <stddef.h>

#include "core/contracts.h"

#define ENV_ID_LEN 16

struct env_paths {
    char id[ENV_ID_LEN * 2 + 1];
    char dir[192];
    char workspace[300];
    char socket[300];
};

/* Pick a fresh id under state_dir/envs and create dir + workspace. */
int env_setup_create(const char *state_dir, struct env_paths *ret, char *err, size_t errlen);

/* Write the request's workspace files. AR_E_INVALID_REQUEST names the field at fault. */
int env_setup_workspace(const struct env_paths *paths, const struct run_request *req, char *err,
                        size_t errlen);

#endif
