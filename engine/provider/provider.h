/*
 * provider — sandbox providers. A provider turns a sandbox description (JSON, built by the
 * harness and environment modules, carried to the keeper in its spec) into a running,
 * isolated process tree. Only `local` (bubblewrap) exists; remote providers would add a file
 * here and a row to provider_capabilities().
 *
 * Sandbox description (all paths absolute):
 *   {"workspace": host dir bound read-write at /workspace (the only host-writable place),
 *    "roBinds": [host paths bound read-only at the same path],
 *    "network": "on" | "off",
 *    "files": [{"path": in-sandbox path under /home/agent or /etc/passwd|group,
 *               "content": text, "mode": int}],
 *    "env": {"NAME": "value", ...}   (the complete harness environment),
 *    "argv": ["cmd", ...], "cwd": "/workspace",
 *    "limits": {"tmpBytes": int, "homeBytes": int}   (optional; sandbox_config defaults)}
 */
#ifndef AR_PROVIDER_H
#define AR_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#define SANDBOX_WORKSPACE "/workspace"
#define SANDBOX_HOME "/home/agent"

struct provider_caps {
    const char *name;
    bool reusable_leases;  /* environments may stay warm between turns */
    bool network_off;      /* can remove the network entirely */
    bool network_allowlist;
    bool filesystem_modes;
};

/* Capability snapshot of a provider by name, NULL when unknown. */
const struct provider_caps *provider_capabilities(const char *name);

/*
 * local: build the bubblewrap command for a sandbox description.
 * Files are materialised from memfds created here; their fds (close-on-exec cleared) are
 * returned in fds[0..*ret_nfds) and must stay open until bwrap has started, then be closed.
 * argv receives a NULL-terminated malloc'ed vector of malloc'ed strings (free with
 * provider_argv_free), envp likewise ("NAME=value").
 */
int local_sandbox_command(const char *bwrap, json_object *sandbox, char ***ret_argv,
                          char ***ret_envp, int *fds, size_t maxfds, size_t *ret_nfds,
                          char *err, size_t errlen);
void provider_argv_free(char **argv);

#endif
