/*
 * sandbox_etc — the /etc a sandbox sees: synthesized, never the host's /etc.
 *
 * Written by the runner (memfd data, nothing of the host's content but resolv.conf's):
 *   passwd, group      root, the sandbox user (agent, 1000:1000, home /home/agent), nobody
 *   hosts              localhost and the sandbox's host name
 *   hostname           the sandbox's host name
 *   nsswitch.conf      files (and dns for hosts): no LDAP/sssd/systemd modules of the host
 *   resolv.conf        the keeper's name server (opts->resolv_conf), else a copy of the
 *                      host's; hosts gets opts->hosts_extra (the run's named hosts)
 * Symlinks replicated (their targets live under the bound /usr, or in the sandbox's /proc):
 *   localtime, os-release, mtab (-> ../proc/self/mounts)
 * Taken from the host when present and world-readable — public data only, so the view never
 * holds a secret even on a misconfigured host (folders bound read-only, files copied at the
 * sandbox's start into its root, which is read-only once set up):
 *   ld.so.cache (the loader), alternatives/ (the /usr/bin/awk -> /etc/alternatives/awk
 *   links), ssl/certs/ + ssl/openssl.cnf (the CA bundle OpenSSL, GnuTLS, curl, git, python
 *   and `node --use-openssl-ca` read; never ssl/private), pki/tls/certs +
 *   pki/ca-trust/extracted (the same on Fedora-family hosts), protocols, services, shells,
 *   mime.types, timezone, debian_version.
 * Everything else of the host's /etc (shadow, the runner's env file, TLS keys, sudoers,
 * ssh keys, machine-id, ...) does not exist inside.
 */
#ifndef AR_SANDBOX_ETC_H
#define AR_SANDBOX_ETC_H

#include <stddef.h>

enum sandbox_etc_kind {
    SANDBOX_ETC_DATA,    /* a file with `data` (copied into the sandbox, read-only) */
    SANDBOX_ETC_BIND,    /* host folder `src` bound read-only at `path` */
    SANDBOX_ETC_COPY,    /* host file `src` copied to `path` (read-only): no mount of its own */
    SANDBOX_ETC_SYMLINK, /* a symlink at `path` to `target` */
};

struct sandbox_etc_entry {
    enum sandbox_etc_kind kind;
    char *path;   /* inside the sandbox, under /etc */
    char *src;    /* BIND: host path */
    char *target; /* SYMLINK */
    char *data;   /* DATA */
    size_t len;
};

struct sandbox_etc {
    struct sandbox_etc_entry *v;
    size_t n;
};

struct sandbox_etc_opts {
    const char *host_root; /* where the host's /etc is looked up: "/" (tests: a fixture) */
    const char *hostname;  /* "sandbox" when NULL */
    const char *hosts_extra; /* lines appended to /etc/hosts (the named endpoints), or NULL */
    const char *resolv_conf; /* the resolv.conf to write instead of the host's, or NULL */
};

/* Build the entry list. -ENOMEM, or -errno of a host file that exists but cannot be read. */
int sandbox_etc_build(const struct sandbox_etc_opts *opts, struct sandbox_etc *ret);
void sandbox_etc_release(struct sandbox_etc *etc);

/* For tests: the entry for path, NULL when the view has none. */
const struct sandbox_etc_entry *sandbox_etc_find(const struct sandbox_etc *etc, const char *path);

#endif
