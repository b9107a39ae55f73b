/*
 * sandbox_seccomp — the system-call filter every sandbox runs under, in the spirit of
 * Flatpak's (flatpak-run.c setup_seccomp) and built with libseccomp: everything is allowed
 * except what a coding agent has no business doing and what has been the door of kernel
 * escapes. bwrap loads it (`--seccomp FD`) right before it execs the harness, after its own
 * set-up, with no_new_privs.
 *
 * Refused with EPERM:
 *   kernel keyrings      add_key, keyctl, request_key
 *   eBPF and perf        bpf, perf_event_open
 *   userfaultfd          (the classic race amplifier of kernel exploits)
 *   kernel code/state    kexec_load, kexec_file_load, init_module, finit_module,
 *                        delete_module, reboot, swapon, swapoff, acct, syslog, quotactl,
 *                        quotactl_fd, nfsservctl, lookup_dcookie, _sysctl, uselib, iopl,
 *                        ioperm, modify_ldt, vhangup
 *   clocks               settimeofday, clock_settime, clock_adjtime, adjtimex
 *   mounts, namespaces   mount, umount2, pivot_root, chroot, unshare, setns, and clone with
 *                        any CLONE_NEW* flag (bwrap's --disable-userns covers user
 *                        namespaces too)
 *   other processes      ptrace, process_vm_readv, process_vm_writev, pidfd_getfd
 *   file handles         name_to_handle_at, open_by_handle_at (the "shocker" escape)
 *   NUMA policy          mbind, get_mempolicy, set_mempolicy, migrate_pages, move_pages
 *   fanotify_init
 *   personality          anything but PER_LINUX (no READ_IMPLIES_EXEC, no ASLR opt-out)
 *   terminal injection   ioctl TIOCSTI and TIOCLINUX (CVE-2017-5226, CVE-2023-28100)
 * Refused with ENOSYS (callers fall back): clone3 (its flags live in memory the filter cannot
 * read; glibc falls back to clone, whose flags it can), io_uring_setup/enter/register (libuv
 * falls back to its thread pool), the new mount API (open_tree, move_mount, fsopen, fsconfig,
 * fsmount, fspick, mount_setattr, open_tree_attr).
 * Sockets: only AF_UNSPEC, AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK; others EAFNOSUPPORT.
 *
 * Architectures: only the native one (x86_64 or aarch64). Any other ABI — i386 through
 * int 0x80, x32 (syscall numbers with bit 30), arm32 on arm64 — kills the process: a sandbox
 * has no 32-bit program to run, and a filter with rules for only some ABIs is the classic
 * seccomp bypass.
 */
#ifndef AR_SANDBOX_SECCOMP_H
#define AR_SANDBOX_SECCOMP_H

#include <stddef.h>

#define SANDBOX_SECCOMP_BYTES_MAX (4096u * 8) /* BPF_MAXINSNS instructions of 8 bytes */

/*
 * The filter as classic BPF in lower-case hex, built with libseccomp once per process (the
 * first call; thread-safe) and kept for the process's life: the worker puts it in every local
 * sandbox's description ("seccomp", provider.h), so the keeper — one process per sandbox —
 * neither compiles it nor loads libseccomp. -errno with a message on failure (every call).
 */
int sandbox_seccomp_program(const char **ret_hex, char *err, size_t errlen);

/*
 * The programme hex (sandbox_seccomp_program's, as the keeper receives it) into a sealed
 * memfd, positioned at 0 and close-on-exec (clear it in the child that execs bwrap, or hand
 * it over the way local.c does). *ret_fd owns it. -EINVAL for text that is not whole 8-byte
 * BPF instructions in hex (at most SANDBOX_SECCOMP_BYTES_MAX bytes), -errno, with a message.
 * seccomp_fd.c: no libseccomp.
 */
int sandbox_seccomp_memfd_of(const char *hex, int *ret_fd, char *err, size_t errlen);

/* sandbox_seccomp_program into a memfd (sandbox_seccomp_memfd_of): the tests' way. */
int sandbox_seccomp_memfd(int *ret_fd, char *err, size_t errlen);

#endif
