#include "base/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int util_parse_u64(const char *str, uint64_t min, uint64_t max, uint64_t *ret)
{
    unsigned long long v;
    char *end;

    if (!str || *str < '0' || *str > '9')
        return -EINVAL;
    errno = 0;
    v = strtoull(str, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    if (errno != 0 || *end != '\0')
        return -EINVAL;
    if (v < min || v > max)
        return -ERANGE;
    *ret = (uint64_t)v;
    return 0;
}

static int64_t clock_ms(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t util_now_ms(void)
{
    return clock_ms(CLOCK_MONOTONIC);
}

int64_t util_wall_ms(void)
{
    return clock_ms(CLOCK_REALTIME);
}

static int64_t clock_ns(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t util_now_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

int64_t util_wall_ns(void)
{
    return clock_ns(CLOCK_REALTIME);
}

void util_deadline_ts(int64_t ms, struct timespec *ret)
{
    ret->tv_sec = (time_t)(ms / 1000);
    ret->tv_nsec = (long)(ms % 1000) * 1000000;
}

void util_sleep_ms(int64_t ms)
{
    struct timespec ts;

    if (ms <= 0)
        return;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

static int random_fill(uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n == -1) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/*
 * Random bytes come from a per-thread page filled by one getrandom(2) at a time: a warm turn's
 * ids (request, turn, trace: 48 bytes) cost one call per five turns, not three per turn. The
 * page is MADV_WIPEONFORK: a forked child (fork, or clone without CLONE_VM, at-fork handlers
 * or not) finds it zeroed and refills it, so parent and child never hand out the same bytes.
 * Bytes handed out are wiped from the page. Without the page (an old kernel), every call goes
 * to getrandom(2).
 */
#define RANDOM_POOL 4096

struct random_pool {
    uint32_t filled; /* 0 in a fresh or wiped page */
    uint32_t used;
    uint8_t bytes[RANDOM_POOL - 8];
};

static pthread_key_t random_key;
static pthread_once_t random_once = PTHREAD_ONCE_INIT;
static bool random_key_ok;
static _Thread_local struct random_pool *random_mine;
static _Thread_local bool random_tried;

static void random_pool_free(void *p)
{
    munmap(p, RANDOM_POOL);
}

static void random_key_init(void)
{
    random_key_ok = pthread_key_create(&random_key, random_pool_free) == 0;
}

static struct random_pool *random_pool_get(void)
{
    void *p;

    if (random_mine || random_tried)
        return random_mine;
    random_tried = true;
    (void)pthread_once(&random_once, random_key_init);
    if (!random_key_ok)
        return NULL;
    p = mmap(NULL, RANDOM_POOL, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (madvise(p, RANDOM_POOL, MADV_WIPEONFORK) != 0 || pthread_setspecific(random_key, p)) {
        munmap(p, RANDOM_POOL);
        return NULL;
    }
    random_mine = p;
    return p;
}

int util_random_bytes(void *buf, size_t len)
{
    struct random_pool *rp = len <= sizeof(rp->bytes) / 4 ? random_pool_get() : NULL;
    size_t have;

    if (!rp)
        return random_fill(buf, len);
    have = rp->filled ? sizeof(rp->bytes) - rp->used : 0;
    if (have < len) {
        int r = random_fill(rp->bytes, sizeof(rp->bytes));

        if (r < 0)
            return r;
        rp->filled = 1;
        rp->used = 0;
    }
    memcpy(buf, rp->bytes + rp->used, len);
    explicit_bzero(rp->bytes + rp->used, len);
    rp->used += (uint32_t)len;
    return 0;
}

void util_hex_encode(const uint8_t *in, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 0xf];
    }
    out[2 * len] = '\0';
}

int util_random_hex(char *out, size_t nbytes)
{
    uint8_t raw[64];
    int r;

    if (nbytes > sizeof(raw))
        return -EINVAL;
    r = util_random_bytes(raw, nbytes);
    if (r < 0)
        return r;
    util_hex_encode(raw, nbytes, out);
    return 0;
}

int util_random_uuid(char out[37])
{
    uint8_t u[16];
    char h[33];
    int r;

    r = util_random_bytes(u, sizeof(u));
    if (r < 0)
        return r;
    u[6] = (uint8_t)((u[6] & 0x0f) | 0x40);
    u[8] = (uint8_t)((u[8] & 0x3f) | 0x80);
    util_hex_encode(u, sizeof(u), h);
    snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", h, h + 8, h + 12, h + 16, h + 20);
    return 0;
}

int util_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int util_percent_decode(const char *s, size_t len, bool plus_space, char *out, size_t outlen)
{
    size_t o = 0;

    for (size_t i = 0; i < len; i++) {
        int c = (unsigned char)s[i];

        if (c == '+' && plus_space) {
            c = ' ';
        } else if (c == '%') {
            int hi = i + 2 < len ? util_hex_digit(s[i + 1]) : -1; /* both digits must be there */
            int lo = i + 2 < len ? util_hex_digit(s[i + 2]) : -1;

            if (hi < 0 || lo < 0)
                return -EINVAL;
            c = hi * 16 + lo;
            i += 2;
        }
        if (c == 0)
            return -EINVAL;
        if (o + 1 >= outlen)
            return -E2BIG;
        out[o++] = (char)c;
    }
    if (outlen == 0)
        return -E2BIG;
    out[o] = '\0';
    return 0;
}

bool util_plain_name(const char *s, size_t max)
{
    size_t n = 0;

    if (!s || !s[0] || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (; s[n]; n++) {
        char c = s[n];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return false;
    }
    return n <= max;
}

bool util_has_ctl(const char *s)
{
    for (; *s; s++) {
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    }
    return false;
}

bool util_visible(const char *s)
{
    for (; *s; s++) {
        if ((unsigned char)*s <= 0x20 || *s == 0x7f)
            return false;
    }
    return true;
}

bool util_ct_equal(const void *a, size_t alen, const void *b, size_t blen)
{
    const volatile uint8_t *pa = a, *pb = b;
    uint8_t diff = 0;

    if (alen != blen)
        return false;
    for (size_t i = 0; i < alen; i++)
        diff |= (uint8_t)(pa[i] ^ pb[i]);
    return diff == 0;
}

int util_mkdir_p(const char *path, mode_t mode)
{
    char tmp[PATH_MAX];
    size_t len = strlen(path);

    if (len == 0 || len >= sizeof(tmp))
        return -ENAMETOOLONG;
    memcpy(tmp, path, len + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, mode) == -1 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(tmp, mode) == -1 && errno != EEXIST)
        return -errno;
    return 0;
}

int util_write_file(const char *path, const void *data, size_t len, mode_t mode)
{
    int fd, r;

    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd == -1)
        return -errno;
    r = util_write_all(fd, data, len);
    if (close(fd) == -1 && r == 0)
        r = -errno;
    return r;
}

int util_write_file_beneath(const char *root, const char *rel, const void *data, size_t len,
                            mode_t mode)
{
    char part[256];
    const char *p = rel;
    struct stat st;
    int dfd, fd, r;

    dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd == -1)
        return -errno;
    for (;;) {
        size_t n = strcspn(p, "/");
        int next;

        if (n == 0 || n >= sizeof(part)) {
            r = -EINVAL;
            goto out;
        }
        memcpy(part, p, n);
        part[n] = '\0';
        if (strcmp(part, ".") == 0 || strcmp(part, "..") == 0) {
            r = -EINVAL;
            goto out;
        }
        if (p[n] == '\0')
            break;
        if (mkdirat(dfd, part, 0755) == -1 && errno != EEXIST) {
            r = -errno;
            goto out;
        }
        next = openat(dfd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next == -1) {
            r = errno == ELOOP ? -ELOOP : -errno;
            goto out;
        }
        close(dfd);
        dfd = next;
        p += n + 1;
    }
    /* O_NONBLOCK: a FIFO the sandbox planted fails (ENXIO) instead of blocking the writer
     * until a reader comes; anything but a regular file is refused */
    fd =
        openat(dfd, part, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
    if (fd == -1) {
        r = -errno;
        goto out;
    }
    if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode)) {
        r = -EINVAL;
        close(fd);
        goto out;
    }
    r = util_write_all(fd, data, len);
    if (close(fd) == -1 && r == 0)
        r = -errno;
out:
    close(dfd);
    return r;
}

int util_read_file(const char *path, size_t max, char **ret_data, size_t *ret_len)
{
    char *data = NULL;
    size_t len = 0, cap = 0;
    int fd, r = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd == -1)
        return -errno;
    for (;;) {
        ssize_t n;

        if (cap - len < 4096 + 1) {
            char *nd;

            cap = cap ? cap * 2 : 8192;
            nd = realloc(data, cap);
            if (!nd) {
                r = -ENOMEM;
                goto out;
            }
            data = nd;
        }
        n = read(fd, data + len, cap - len - 1);
        if (n == -1) {
            if (errno == EINTR)
                continue;
            r = -errno;
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > max) {
            r = -EFBIG;
            goto out;
        }
    }
    if (!data) {
        data = malloc(1);
        if (!data) {
            r = -ENOMEM;
            goto out;
        }
    }
    data[len] = '\0';
    *ret_data = data;
    if (ret_len)
        *ret_len = len;
    data = NULL;
out:
    free(data);
    close(fd);
    return r;
}

char *util_xstrdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

int util_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n == -1) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int util_unix_listen(const char *path, mode_t mode, int backlog)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd, r;

    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd == -1)
        return -errno;
    (void)unlink(path);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1 || chmod(path, mode) == -1 ||
        listen(fd, backlog) == -1) {
        r = -errno;
        close(fd);
        return r;
    }
    return fd;
}

/* The fields of /proc/<pid>/stat after the command name ("S 1 ..."), or NULL. */
static const char *proc_stat_fields(pid_t pid, char *buf, size_t size)
{
    char path[64], *p;
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd == -1)
        return NULL;
    n = read(fd, buf, size - 1);
    close(fd);
    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    /* the command name may hold spaces and parentheses: skip to the last ')' */
    p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p + 2 : NULL;
}

uint64_t util_proc_start_time(pid_t pid)
{
    char buf[1024];
    const char *p = proc_stat_fields(pid, buf, sizeof(buf));

    /* fields start at 3 (state); the start time is field 22 */
    char digits[24];
    size_t n = 0;
    uint64_t v;

    for (int field = 3; field < 22 && p; field++) {
        p = strchr(p, ' ');
        if (p)
            p++;
    }
    if (!p)
        return 0;
    /* the field ends at the next space: parse exactly its digits (0 when it is no number) */
    while (p[n] && p[n] != ' ' && n + 1 < sizeof(digits)) {
        digits[n] = p[n];
        n++;
    }
    digits[n] = '\0';
    return util_parse_u64(digits, 0, UINT64_MAX, &v) == 0 ? v : 0;
}

bool util_proc_alive(pid_t pid, uint64_t start_time)
{
    char buf[1024];
    const char *p;

    if (pid <= 0)
        return false;
    if (kill(pid, 0) == -1 && errno == ESRCH)
        return false;
    p = proc_stat_fields(pid, buf, sizeof(buf));
    /* a zombie is dead for our purposes */
    if (!p || p[0] == 'Z' || p[0] == 'X')
        return false;
    return start_time == 0 || util_proc_start_time(pid) == start_time;
}

static pid_t cached_pid;
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;

static void forget_pid(void)
{
    cached_pid = 0;
}

static void watch_fork(void)
{
    pthread_atfork(NULL, NULL, forget_pid);
}

pid_t util_self_pid(void)
{
    pthread_once(&pid_once, watch_fork);
    if (!cached_pid)
        cached_pid = getpid();
    return cached_pid;
}

int util_signalfd_for(const int *signals, size_t n)
{
    sigset_t set;
    int fd;

    sigemptyset(&set);
    for (size_t i = 0; i < n; i++)
        sigaddset(&set, signals[i]);
    if (sigprocmask(SIG_BLOCK, &set, NULL) == -1)
        return -errno;
    fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    return fd == -1 ? -errno : fd;
}

void util_set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    if (fl != -1)
        (void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void util_redirect_null(int fd)
{
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);

    if (null < 0)
        return;
    if (null == fd) {
        fcntl(fd, F_SETFD, 0);
        return;
    }
    dup2(null, fd);
    close(null);
}

void util_vseterr(char *err, size_t errlen, const char *fmt, va_list ap)
{
    if (!err || errlen == 0)
        return;
    vsnprintf(err, errlen, fmt, ap);
}

void util_seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    util_vseterr(err, errlen, fmt, ap);
    va_end(ap);
}

int util_fail(int r, char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    util_vseterr(err, errlen, fmt, ap);
    va_end(ap);
    return r;
}
