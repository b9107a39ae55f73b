#include "sandbox/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif
#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif

struct rule {
    const char *name;
    int err;
};

/* Refused outright, by name (names this libseccomp does not know are skipped). */
static const struct rule denied[] = {
    {"add_key", EPERM},
    {"keyctl", EPERM},
    {"request_key", EPERM},
    {"bpf", EPERM},
    {"perf_event_open", EPERM},
    {"userfaultfd", EPERM},
    {"kexec_load", EPERM},
    {"kexec_file_load", EPERM},
    {"init_module", EPERM},
    {"finit_module", EPERM},
    {"delete_module", EPERM},
    {"reboot", EPERM},
    {"swapon", EPERM},
    {"swapoff", EPERM},
    {"acct", EPERM},
    {"syslog", EPERM},
    {"quotactl", EPERM},
    {"quotactl_fd", EPERM},
    {"nfsservctl", EPERM},
    {"lookup_dcookie", EPERM},
    {"_sysctl", EPERM},
    {"uselib", EPERM},
    {"iopl", EPERM},
    {"ioperm", EPERM},
    {"modify_ldt", EPERM},
    {"vhangup", EPERM},
    {"settimeofday", EPERM},
    {"clock_settime", EPERM},
    {"clock_adjtime", EPERM},
    {"adjtimex", EPERM},
    {"mount", EPERM},
    {"umount2", EPERM},
    {"pivot_root", EPERM},
    {"chroot", EPERM},
    {"unshare", EPERM},
    {"setns", EPERM},
    {"ptrace", EPERM},
    {"process_vm_readv", EPERM},
    {"process_vm_writev", EPERM},
    {"pidfd_getfd", EPERM},
    {"name_to_handle_at", EPERM},
    {"open_by_handle_at", EPERM},
    {"mbind", EPERM},
    {"get_mempolicy", EPERM},
    {"set_mempolicy", EPERM},
    {"set_mempolicy_home_node", EPERM},
    {"migrate_pages", EPERM},
    {"move_pages", EPERM},
    {"fanotify_init", EPERM},
    {"clone3", ENOSYS},
    {"io_uring_setup", ENOSYS},
    {"io_uring_enter", ENOSYS},
    {"io_uring_register", ENOSYS},
    {"open_tree", ENOSYS},
    {"move_mount", ENOSYS},
    {"fsopen", ENOSYS},
    {"fsconfig", ENOSYS},
    {"fsmount", ENOSYS},
    {"fspick", ENOSYS},
    {"mount_setattr", ENOSYS},
};

/* Socket families a sandbox may open (ascending). */
static const int families[] = {AF_UNSPEC, AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};

static const unsigned long ns_flags[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,   CLONE_NEWUSER,
                                         CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP};

static int add(scmp_filter_ctx ctx, int err, int nr, unsigned count, const struct scmp_arg_cmp *arg)
{
    int r = count ? seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO((uint16_t)err), nr, count, arg)
                  : seccomp_rule_add(ctx, SCMP_ACT_ERRNO((uint16_t)err), nr, 0);
    return r;
}

static int build(scmp_filter_ctx ctx, char *err, size_t errlen)
{
    struct scmp_arg_cmp cmp;
    int r, nr, last;

    /* any ABI but the native one kills the process (libseccomp also rejects x32 numbers) */
    r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (r < 0)
        goto fail;
    for (size_t i = 0; i < ARRAY_SIZE(denied); i++) {
        nr = seccomp_syscall_resolve_name(denied[i].name);
        if (nr == __NR_SCMP_ERROR)
            continue; /* unknown to this libseccomp: the kernel is older, or it is */
        r = add(ctx, denied[i].err, nr, 0, NULL);
        if (r < 0 && r != -EDOM) {
            snprintf(err, errlen, "seccomp: cannot add the rule for %s: %s", denied[i].name,
                     strerror(-r));
            return r;
        }
    }
#if defined(__x86_64__)
    /* open_tree_attr (Linux 6.15) is newer than libseccomp 2.5: by number, native ABI only */
    r = add(ctx, ENOSYS, 467, 0, NULL);
    if (r < 0)
        goto fail;
#endif
    /* clone with any namespace flag (a0 on x86 and arm; s390 swaps the first two) */
    for (size_t i = 0; i < ARRAY_SIZE(ns_flags); i++) {
        cmp = SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]);
        r = add(ctx, EPERM, SCMP_SYS(clone), 1, &cmp);
        if (r < 0)
            goto fail;
    }
    /* ioctl's request is an unsigned int: compare the low 32 bits only */
    cmp = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI);
    r = add(ctx, EPERM, SCMP_SYS(ioctl), 1, &cmp);
    if (r < 0)
        goto fail;
    cmp = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCLINUX);
    r = add(ctx, EPERM, SCMP_SYS(ioctl), 1, &cmp);
    if (r < 0)
        goto fail;
    cmp = SCMP_A0(SCMP_CMP_NE, PER_LINUX);
    r = add(ctx, EPERM, SCMP_SYS(personality), 1, &cmp);
    if (r < 0)
        goto fail;
    /* socket(): every family between and above the allowed ones */
    last = -1;
    for (size_t i = 0; i < ARRAY_SIZE(families); i++) {
        for (int f = last + 1; f < families[i]; f++) {
            cmp = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)f);
            r = add(ctx, EAFNOSUPPORT, SCMP_SYS(socket), 1, &cmp);
            if (r < 0)
                goto fail;
        }
        last = families[i];
    }
    cmp = SCMP_A0(SCMP_CMP_GE, (scmp_datum_t)(last + 1));
    r = add(ctx, EAFNOSUPPORT, SCMP_SYS(socket), 1, &cmp);
    if (r < 0)
        goto fail;
    return 0;
fail:
    snprintf(err, errlen, "seccomp: cannot build the filter: %s", strerror(-r));
    return r;
}

static int export_to(int fd, char *err, size_t errlen)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    int r;

    if (!ctx) {
        snprintf(err, errlen, "seccomp: cannot initialise libseccomp");
        return -ENOMEM;
    }
    r = build(ctx, err, errlen);
    if (r == 0) {
        r = seccomp_export_bpf(ctx, fd);
        if (r < 0)
            snprintf(err, errlen, "seccomp: cannot export the filter: %s", strerror(-r));
    }
    seccomp_release(ctx);
    return r;
}

/* The process's programme: compiled once (pthread_once), kept as hex, or why it failed. */
static struct {
    pthread_once_t once;
    char *hex;
    int r;
    char err[256];
} program = {.once = PTHREAD_ONCE_INIT};

static void compile_once(void)
{
    int fd = memfd_create("agent-runner-seccomp", MFD_CLOEXEC);
    struct stat st;
    uint8_t *bpf = NULL;
    ssize_t n;
    int r;

    if (fd == -1) {
        r = -errno;
        snprintf(program.err, sizeof(program.err), "seccomp: memfd_create: %s", strerror(-r));
        goto out;
    }
    r = export_to(fd, program.err, sizeof(program.err));
    if (r < 0)
        goto out;
    r = fstat(fd, &st) == -1 ? -errno : 0;
    if (r == 0 && (st.st_size <= 0 || st.st_size > SANDBOX_SECCOMP_BYTES_MAX))
        r = -E2BIG;
    if (r == 0 && (!(bpf = malloc((size_t)st.st_size)) ||
                   !(program.hex = malloc((size_t)st.st_size * 2 + 1))))
        r = -ENOMEM;
    if (r == 0 && (n = pread(fd, bpf, (size_t)st.st_size, 0)) != st.st_size)
        r = n < 0 ? -errno : -EIO;
    if (r < 0) {
        snprintf(program.err, sizeof(program.err), "seccomp: reading the filter: %s", strerror(-r));
        free(program.hex);
        program.hex = NULL;
        goto out;
    }
    util_hex_encode(bpf, (size_t)st.st_size, program.hex);
out:
    free(bpf);
    if (fd >= 0)
        close(fd);
    program.r = r;
}

int sandbox_seccomp_program(const char **ret_hex, char *err, size_t errlen)
{
    pthread_once(&program.once, compile_once);
    if (program.r < 0) {
        snprintf(err, errlen, "%s", program.err);
        return program.r;
    }
    *ret_hex = program.hex;
    return 0;
}

int sandbox_seccomp_memfd(int *ret_fd, char *err, size_t errlen)
{
    const char *hex = NULL;
    int r = sandbox_seccomp_program(&hex, err, errlen);

    return r < 0 ? r : sandbox_seccomp_memfd_of(hex, ret_fd, err, errlen);
}
