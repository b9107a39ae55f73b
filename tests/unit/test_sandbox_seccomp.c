/*
 * sandbox_seccomp: the filter's decisions, checked two ways — a classic-BPF interpreter run
 * over synthetic seccomp_data (every ABI, argument edge cases), and the real kernel in a child
 * that loads the exported program and tries the calls (plus node, when installed).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/seccomp.h"
#include "suites.h"

#define RET_ALLOW SECCOMP_RET_ALLOW
#define RET_KILL SECCOMP_RET_KILL_PROCESS
#define RET_ERRNO(e) (SECCOMP_RET_ERRNO | (uint32_t)(e))
#define RET_BAD 0xdeadbeefu

static uint32_t load32(const struct seccomp_data *d, uint32_t k)
{
    uint32_t v = 0;

    if (k + 4 <= sizeof(*d))
        memcpy(&v, (const char *)d + k, 4);
    return v;
}

/* A classic BPF interpreter for the instructions a seccomp program may use. */
static uint32_t run_bpf(const struct sock_filter *p, size_t n, const struct seccomp_data *d)
{
    uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = {0};
    size_t pc = 0;

    while (pc < n) {
        const struct sock_filter *f = &p[pc++];
        uint32_t src = BPF_SRC(f->code) == BPF_X ? x : f->k;
        bool cond;

        switch (BPF_CLASS(f->code)) {
        case BPF_LD:
            if (f->code == (BPF_LD | BPF_W | BPF_ABS))
                a = load32(d, f->k);
            else if (f->code == (BPF_LD | BPF_IMM))
                a = f->k;
            else if (f->code == (BPF_LD | BPF_MEM) && f->k < BPF_MEMWORDS)
                a = mem[f->k];
            else
                return RET_BAD;
            break;
        case BPF_LDX:
            if (f->code == (BPF_LDX | BPF_IMM))
                x = f->k;
            else if (f->code == (BPF_LDX | BPF_MEM) && f->k < BPF_MEMWORDS)
                x = mem[f->k];
            else
                return RET_BAD;
            break;
        case BPF_ST:
            if (f->k >= BPF_MEMWORDS)
                return RET_BAD;
            mem[f->k] = a;
            break;
        case BPF_STX:
            if (f->k >= BPF_MEMWORDS)
                return RET_BAD;
            mem[f->k] = x;
            break;
        case BPF_ALU:
            switch (BPF_OP(f->code)) {
            case BPF_AND:
                a &= src;
                break;
            case BPF_OR:
                a |= src;
                break;
            case BPF_ADD:
                a += src;
                break;
            case BPF_SUB:
                a -= src;
                break;
            case BPF_RSH:
                a >>= src;
                break;
            case BPF_LSH:
                a <<= src;
                break;
            default:
                return RET_BAD;
            }
            break;
        case BPF_JMP:
            if (BPF_OP(f->code) == BPF_JA) {
                pc += f->k;
                break;
            }
            switch (BPF_OP(f->code)) {
            case BPF_JEQ:
                cond = a == src;
                break;
            case BPF_JGT:
                cond = a > src;
                break;
            case BPF_JGE:
                cond = a >= src;
                break;
            case BPF_JSET:
                cond = (a & src) != 0;
                break;
            default:
                return RET_BAD;
            }
            pc += cond ? f->jt : f->jf;
            break;
        case BPF_RET:
            return BPF_RVAL(f->code) == BPF_A ? a : f->k;
        case BPF_MISC:
            if (BPF_MISCOP(f->code) == BPF_TAX)
                x = a;
            else
                a = x;
            break;
        default:
            return RET_BAD;
        }
    }
    return RET_BAD;
}

static struct sock_filter *prog;
static size_t prog_n;

static uint32_t decide(uint32_t arch, int nr, uint64_t a0, uint64_t a1)
{
    struct seccomp_data d;

    memset(&d, 0, sizeof(d));
    d.arch = arch;
    d.nr = nr;
    d.args[0] = a0;
    d.args[1] = a1;
    return run_bpf(prog, prog_n, &d);
}

/* The program as the sandbox gets it: the sealed memfd sandbox_seccomp_memfd hands over. */
static void load_prog(void)
{
    char err[256] = "";
    struct stat st;
    void *p = NULL;
    size_t len = 0;
    int fd = -1;

    if (prog)
        return;
    CU_ASSERT_EQUAL_FATAL(sandbox_seccomp_memfd(&fd, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(fstat(fd, &st), 0);
    len = (size_t)st.st_size;
    CU_ASSERT_FATAL(len > 0 && len % sizeof(struct sock_filter) == 0);
    p = malloc(len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(read(fd, p, len), (ssize_t)len); /* positioned at 0 */
    close(fd);
    prog = p;
    prog_n = len / sizeof(struct sock_filter);
}

static void test_sandbox_seccomp_decisions(void)
{
#if defined(__x86_64__)
    const uint32_t me = AUDIT_ARCH_X86_64;

    load_prog();
    CU_ASSERT(prog_n < 4096); /* the kernel's limit for one program */
    CU_ASSERT_EQUAL(decide(me, SYS_getpid, 0, 0), RET_ALLOW);
    CU_ASSERT_EQUAL(decide(me, SYS_read, 0, 0), RET_ALLOW);
    CU_ASSERT_EQUAL(decide(me, SYS_bpf, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_perf_event_open, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_keyctl, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_add_key, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_request_key, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_userfaultfd, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_kexec_load, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_kexec_file_load, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_init_module, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_finit_module, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_delete_module, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_mount, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_umount2, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_pivot_root, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_unshare, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_setns, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_ptrace, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_process_vm_readv, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_reboot, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_swapon, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_acct, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_syslog, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_quotactl, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_settimeofday, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_clock_settime, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_open_by_handle_at, 0, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_clone3, 0, 0), RET_ERRNO(ENOSYS));
    CU_ASSERT_EQUAL(decide(me, SYS_io_uring_setup, 0, 0), RET_ERRNO(ENOSYS));
    CU_ASSERT_EQUAL(decide(me, SYS_fsopen, 0, 0), RET_ERRNO(ENOSYS));
    CU_ASSERT_EQUAL(decide(me, SYS_open_tree, 0, 0), RET_ERRNO(ENOSYS));
    CU_ASSERT_EQUAL(decide(me, SYS_move_mount, 0, 0), RET_ERRNO(ENOSYS));
    CU_ASSERT_EQUAL(decide(me, 467 /* open_tree_attr */, 0, 0), RET_ERRNO(ENOSYS));

    /* clone: threads and forks pass, any namespace flag does not */
    CU_ASSERT_EQUAL(decide(me, SYS_clone,
                           CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
                               CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID |
                               CLONE_CHILD_CLEARTID,
                           0),
                    RET_ALLOW);
    CU_ASSERT_EQUAL(decide(me, SYS_clone, SIGCHLD, 0), RET_ALLOW);
    CU_ASSERT_EQUAL(decide(me, SYS_clone, CLONE_NEWUSER | SIGCHLD, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_clone, CLONE_NEWNET, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_clone, CLONE_NEWNS, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_clone, CLONE_NEWPID, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_clone, CLONE_NEWCGROUP, 0), RET_ERRNO(EPERM));

    /* ioctl: the request is 32 bits; garbage in the high half does not get TIOCSTI through */
    CU_ASSERT_EQUAL(decide(me, SYS_ioctl, 0, TIOCSTI), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_ioctl, 0, 0xdead000000000000ull | TIOCSTI), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_ioctl, 0, 0x541C /* TIOCLINUX */), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_ioctl, 0, TIOCGWINSZ), RET_ALLOW);

    CU_ASSERT_EQUAL(decide(me, SYS_personality, PER_LINUX, 0), RET_ALLOW);
    CU_ASSERT_EQUAL(decide(me, SYS_personality, READ_IMPLIES_EXEC, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_personality, ADDR_NO_RANDOMIZE, 0), RET_ERRNO(EPERM));
    CU_ASSERT_EQUAL(decide(me, SYS_personality, 1ull << 32, 0), RET_ERRNO(EPERM));

    CU_ASSERT_EQUAL(decide(me, SYS_socket, AF_INET, 0), RET_ALLOW);
    CU_ASSERT_EQUAL(decide(me, SYS_socket, AF_INET6, 0), RET_ALLOW);
    CU_ASSERT_EQUAL(decide(me, SYS_socket, AF_UNIX, 0), RET_ALLOW);
    CU_ASSERT_EQUAL(decide(me, SYS_socket, AF_NETLINK, 0), RET_ALLOW);
    CU_ASSERT_EQUAL(decide(me, SYS_socket, AF_PACKET, 0), RET_ERRNO(EAFNOSUPPORT));
    CU_ASSERT_EQUAL(decide(me, SYS_socket, AF_ALG, 0), RET_ERRNO(EAFNOSUPPORT));
    CU_ASSERT_EQUAL(decide(me, SYS_socket, AF_VSOCK, 0), RET_ERRNO(EAFNOSUPPORT));
    CU_ASSERT_EQUAL(decide(me, SYS_socket, 3 /* AF_AX25 */, 0), RET_ERRNO(EAFNOSUPPORT));
    CU_ASSERT_EQUAL(decide(me, SYS_socket, 100000, 0), RET_ERRNO(EAFNOSUPPORT));

    /* foreign ABIs are killed whatever the call: i386 (int 0x80), x32, arm */
    CU_ASSERT_EQUAL(decide(AUDIT_ARCH_I386, 20 /* getpid */, 0, 0), RET_KILL);
    CU_ASSERT_EQUAL(decide(AUDIT_ARCH_I386, 26 /* ptrace */, 0, 0), RET_KILL);
    CU_ASSERT_EQUAL(decide(me, 0x40000000 | SYS_getpid, 0, 0), RET_KILL);
    CU_ASSERT_EQUAL(decide(me, 0x40000000 | SYS_bpf, 0, 0), RET_KILL);
    CU_ASSERT_EQUAL(decide(AUDIT_ARCH_ARM, 20, 0, 0), RET_KILL);
#else
    printf("\n    skipped: the decision table is written for x86_64\n");
#endif
}

static int try(long r)
{
    return r == -1 ? errno : 0;
}

static void *thread_fn(void *p)
{
    return p;
}

/* The real kernel: load the exported program in a child and try the calls. */
static void test_sandbox_seccomp_in_the_kernel(void)
{
    char err[256] = "", out[1024] = "";
    int pipefd[2], status, fd;
    size_t len = 0;
    ssize_t n;
    pid_t pid;

    CU_ASSERT_EQUAL_FATAL(sandbox_seccomp_memfd(&fd, err, sizeof(err)), 0);
    CU_ASSERT(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    CU_ASSERT(fcntl(fd, F_GET_SEALS) & F_SEAL_WRITE); /* nobody can change it after the fact */
    CU_ASSERT_EQUAL(write(fd, "x", 1), -1);
    load_prog();
    CU_ASSERT_EQUAL_FATAL(pipe(pipefd), 0);
    pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        struct sock_fprog fp = {.len = (unsigned short)prog_n, .filter = prog};
        char line[900];
        pthread_t t;
        int s, child_status = -1, tty;
        pid_t c;

        close(pipefd[0]);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fp) != 0)
            _exit(3);
        s = socket(AF_INET, SOCK_STREAM, 0);
        c = fork();
        if (c == 0)
            _exit(7);
        if (c > 0)
            waitpid(c, &child_status, 0);
        tty = open("/dev/null", O_RDWR);
        snprintf(
            line, sizeof(line),
            "bpf=%d keyctl=%d add_key=%d userfaultfd=%d perf=%d mount=%d unshare=%d "
            "clone3=%d io_uring=%d packet=%d inet=%d personality=%d personality0=%d "
            "tiocsti=%d ptrace=%d kexec=%d fork=%d thread=%d getpid=%d",
            try(syscall(SYS_bpf, 0, NULL, 0)), try(syscall(SYS_keyctl, 0, 0, 0, 0, 0)),
            try(syscall(SYS_add_key, "user", "x", "y", 1, 0)), try(syscall(SYS_userfaultfd, 0)),
            try(syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0)),
            try(mount("none", "/tmp", "tmpfs", 0, NULL)), try(unshare(CLONE_NEWUSER)),
            try(syscall(SYS_clone3, NULL, 0)), try(syscall(SYS_io_uring_setup, 1, NULL)),
            try(socket(AF_PACKET, SOCK_RAW, 0)), s >= 0 ? 0 : errno, try(personality(0xffffffff)),
            try(personality(PER_LINUX)), try(ioctl(tty, TIOCSTI, "x")),
            try(ptrace(PTRACE_TRACEME, 0, NULL, NULL)), try(syscall(SYS_kexec_load, 0, 0, NULL, 0)),
            WIFEXITED(child_status) ? WEXITSTATUS(child_status) : -1,
            pthread_create(&t, NULL, thread_fn, NULL) == 0 && pthread_join(t, NULL) == 0,
            getpid() > 0);
        if (write(pipefd[1], line, strlen(line)) < 0)
            _exit(2);
        _exit(0);
    }
    close(pipefd[1]);
    while (len < sizeof(out) - 1 && (n = read(pipefd[0], out + len, sizeof(out) - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = '\0';
    close(pipefd[0]);
    waitpid(pid, &status, 0);
    close(fd);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    {
        char want[600];
        snprintf(want, sizeof(want),
                 "bpf=%d keyctl=%d add_key=%d userfaultfd=%d perf=%d mount=%d unshare=%d "
                 "clone3=%d io_uring=%d packet=%d inet=0 personality=%d personality0=0 "
                 "tiocsti=%d ptrace=%d kexec=%d fork=7 thread=1 getpid=1",
                 EPERM, EPERM, EPERM, EPERM, EPERM, EPERM, EPERM, ENOSYS, ENOSYS, EAFNOSUPPORT,
                 EPERM, EPERM, EPERM, EPERM);
        CU_ASSERT_STRING_EQUAL(out, want);
    }
}

/* node (every harness is a node program, or spawned by one) runs under the filter */
static void test_sandbox_seccomp_node_runs_under_it(void)
{
    int status;
    pid_t pid;

    if (access("/usr/bin/node", X_OK) != 0) {
        printf("\n    skipped: /usr/bin/node is not installed\n");
        return;
    }
    load_prog();
    pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        struct sock_fprog fp = {.len = (unsigned short)prog_n, .filter = prog};
        char *argv[] = {"node", "-e",
                        "const fs=require('fs'),cp=require('child_process'),"
                        "{Worker}=require('worker_threads');"
                        "fs.writeFileSync('/dev/null','x');"
                        "const r=cp.spawnSync('/bin/sh',['-c','exit 5']);"
                        "require('os').networkInterfaces();"
                        "fs.promises.readFile('/proc/self/status').then(b=>{"
                        " const w=new Worker('process.exit(0)',{eval:true});"
                        " w.on('exit',c=>process.exit(r.status===5&&c===0&&b.length>0?0:1));"
                        "});",
                        NULL};
        int devnull = open("/dev/null", O_WRONLY);

        dup2(devnull, STDERR_FILENO);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fp) != 0)
            _exit(3);
        execv("/usr/bin/node", argv);
        _exit(127);
    }
    waitpid(pid, &status, 0);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Compiled once per process: the same programme each call; the keeper's copy is its bytes. */
static void test_sandbox_seccomp_compiled_once(void)
{
    const char *a = NULL, *b = NULL;
    char err[256], got[64];
    int fd;

    CU_ASSERT_EQUAL_FATAL(sandbox_seccomp_program(&a, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(sandbox_seccomp_program(&b, err, sizeof(err)), 0);
    CU_ASSERT_PTR_EQUAL(a, b);
    CU_ASSERT(strlen(a) % 16 == 0 && strlen(a) > 0);
    CU_ASSERT_EQUAL_FATAL(sandbox_seccomp_memfd_of(a, &fd, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(lseek(fd, 0, SEEK_END), (off_t)(strlen(a) / 2));
    CU_ASSERT_EQUAL(pread(fd, got, 8, 0), 8);
    CU_ASSERT_NOT_EQUAL(write(fd, "x", 1), 1); /* sealed */
    close(fd);
    CU_ASSERT_EQUAL(sandbox_seccomp_memfd_of("0011223344556677X", &fd, err, sizeof(err)), -EINVAL);
    CU_ASSERT_EQUAL(sandbox_seccomp_memfd_of("00112233445566", &fd, err, sizeof(err)), -EINVAL);
}

CU_TestInfo sandbox_seccomp_tests[] = {
    {"test_sandbox_seccomp_compiled_once", test_sandbox_seccomp_compiled_once},
    {"test_sandbox_seccomp_decisions", test_sandbox_seccomp_decisions},
    {"test_sandbox_seccomp_in_the_kernel", test_sandbox_seccomp_in_the_kernel},
    {"test_sandbox_seccomp_node_runs_under_it", test_sandbox_seccomp_node_runs_under_it},
    CU_TEST_INFO_NULL,
};
