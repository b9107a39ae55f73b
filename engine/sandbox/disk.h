/*
 * sandbox_disk — the disk cap of a sandbox's workspace.
 *
 * Mechanism: a size- and inode-capped tmpfs that the (root) runner mounts over the
 * environment's workspace folder before it writes the workspace files, and unmounts at
 * teardown. Chosen over the alternatives because it costs ~0.15 ms per environment
 * (mount + unmount, measured on the CI machine), needs nothing from the host's file system,
 * and its teardown is one umount: whatever tree the agent built (30,000 levels, a million
 * files) is freed by the kernel without a walk. A loop-mounted ext4 image costs ~30 ms of
 * mkfs plus ~10 ms of loop set-up per environment and a loop device each; project quotas need
 * the state folder on XFS or ext4 mounted with prjquota, which most hosts do not have.
 *
 * Interplay with the memory limit: tmpfs pages are charged to the memory cgroup of the
 * process that writes them — the sandbox. The sandbox's cgroup ceiling is therefore memory +
 * disk + /tmp + home (sandbox_config_memory_ceiling), so a full disk is reported as the disk
 * limit (ENOSPC, sandbox_disk_full) and never turns into an OOM kill, and processes always get
 * their own memory limit. Hosts must have RAM (or swap for the runner itself) for the warm
 * environments they keep: slots x that ceiling in the worst case.
 *
 * Mounts are tagged with the source name "agent-runner.<instance>" so that the start-up sweep
 * finds the ones a crashed predecessor left, and made private (no propagation of what happens
 * inside them). The mount lives in the runner's mount namespace (the unit's own one under
 * systemd).
 */
#ifndef AR_SANDBOX_DISK_H
#define AR_SANDBOX_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sandbox_disk_usage {
    uint64_t size, used, avail; /* bytes */
    uint64_t inodes, inodes_free;
};

/*
 * Mount the capped tmpfs on dir (an existing, empty folder): size bytes, at most inodes
 * files, root folder uid:gid mode 0700, nosuid, nodev. -errno with a message on failure.
 */
int sandbox_disk_mount(const char *dir, const char *instance, uint64_t bytes, uint64_t inodes,
                       uid_t uid, gid_t gid, char *err, size_t errlen);

/* 1 when dir is the root of a mount, 0 when not, -errno. */
int sandbox_disk_is_mounted(const char *dir);

/* Unmount dir (and anything stacked on it). Not mounted is success. */
int sandbox_disk_unmount(const char *dir);

int sandbox_disk_usage(const char *dir, struct sandbox_disk_usage *ret);

/*
 * After a turn: 1 when the workspace ran out of room (less than 1 % or 64 KiB left, or no
 * inode left) — the turn reports sandbox_disk_limit; 0 when not; -errno.
 */
int sandbox_disk_full(const char *dir);
/* The same of the file system fd (an O_PATH descriptor will do) lies on. */
int sandbox_disk_full_fd(int fd);

/*
 * Start-up sweep: unmount every tmpfs of this instance mounted at <envs_dir>/<id>/workspace
 * for which keep(id, ctx) is false (keep may be NULL). Returns how many, or the first error.
 */
int sandbox_disk_sweep(const char *instance, const char *envs_dir,
                       bool (*keep)(const char *id, void *ctx), void *ctx);

/* Can this process mount the cap? Tries a 1 MiB tmpfs on a scratch folder made in dir. */
int sandbox_disk_probe(const char *dir, char *err, size_t errlen);

#endif
