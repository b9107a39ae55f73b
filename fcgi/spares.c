#include "spares.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "admin.h"
#include "base/log.h"
#include "base/util.h"

#define BACKOFF_MIN_MS 1000
#define BACKOFF_MAX_MS 60000
#define MAKER_WAIT_MS 15000
#define REFILL_TICK_MS 250

void spares_init(struct spares *s, const struct engine_config *cfg, int sig_fd)
{
    memset(s, 0, sizeof(*s));
    s->cfg = cfg;
    s->maker_fd_close = sig_fd;
    s->backoff_ms = BACKOFF_MIN_MS;
    s->shell_backoff_ms = BACKOFF_MIN_MS;
}

/* MemAvailable in MiB, or -1 when /proc/meminfo does not say. */
static int64_t mem_available_mib(void)
{
    char *text = NULL, *p;
    uint64_t kib;
    int64_t r = -1;

    if (util_read_file("/proc/meminfo", 16384, &text, NULL) < 0)
        return -1;
    p = strstr(text, "MemAvailable:");
    if (p) {
        p += strlen("MemAvailable:");
        while (*p == ' ')
            p++;
        p[strcspn(p, " \n")] = '\0';
        if (util_parse_u64(p, 0, UINT64_MAX / 2, &kib) == 0)
            r = (int64_t)(kib / 1024);
    }
    free(text);
    return r;
}

/* Under memory pressure spares go first: drain the oldest one. */
static void shed_one(struct spares *s)
{
    pid_t keeper = admin_spare_shed(s->cfg);

    if (keeper > 0)
        log_info("memory is short: stopping a spare (keeper %d)", (int)keeper);
}

static void run_maker(struct spares *s, enum harness_kind kind)
{
    char err[512];
    sigset_t none;
    int r;

    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (s->maker_fd_close >= 0)
        close(s->maker_fd_close);
    util_redirect_null(STDIN_FILENO); /* not the FastCGI socket */
    r = admin_spare_make(s->cfg, kind, err, sizeof(err));
    if (r < 0) {
        log_warn("cannot start a %s spare: %s", engine_harness_name(kind), err);
        _exit(1);
    }
    _exit(0);
}

/* The shell maker child: shells one after another until none is missing. */
static void run_shell_maker(struct spares *s)
{
    char err[512];
    sigset_t none;

    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (s->maker_fd_close >= 0)
        close(s->maker_fd_close);
    util_redirect_null(STDIN_FILENO);
    for (unsigned n = 0; n < ADMIN_SHELLS_MAX && admin_shell_missing(s->cfg) > 0; n++) {
        if (admin_shell_make(s->cfg, err, sizeof(err)) < 0) {
            log_warn("cannot make a sandbox shell: %s", err);
            _exit(1);
        }
    }
    _exit(0);
}

static void shells_tick(struct spares *s, int64_t avail)
{
    pid_t pid;

    if (s->shell_maker || util_now_ms() < s->shell_not_before || admin_shell_missing(s->cfg) <= 0)
        return;
    if (avail >= 0 && avail < SPARES_START_MIN_MIB)
        return;
    pid = fork();
    if (pid == 0)
        run_shell_maker(s);
    if (pid < 0) {
        log_warn("cannot fork a shell maker: %s", strerror(errno));
        s->shell_not_before = util_now_ms() + s->shell_backoff_ms;
        return;
    }
    s->shell_maker = pid;
}

void spares_tick(struct spares *s, bool draining)
{
    int64_t avail;
    int kind;
    pid_t pid;

    if (draining)
        return;
    if (admin_shells_wanted(s->cfg) && !admin_spares_wanted(s->cfg))
        shells_tick(s, mem_available_mib());
    if (!admin_spares_wanted(s->cfg))
        return;
    avail = mem_available_mib();
    if (admin_shells_wanted(s->cfg))
        shells_tick(s, avail);
    if (avail >= 0 && avail < SPARES_KEEP_MIN_MIB)
        shed_one(s);
    if (s->maker || util_now_ms() < s->not_before)
        return;
    if (avail >= 0 && avail < SPARES_START_MIN_MIB)
        return;
    kind = admin_spare_next(s->cfg, &s->next_kind); /* never the table's last free slot */
    if (kind < 0)
        return;
    pid = fork();
    if (pid == 0)
        run_maker(s, (enum harness_kind)kind);
    if (pid < 0) {
        log_warn("cannot fork a spare maker: %s", strerror(errno));
        s->not_before = util_now_ms() + s->backoff_ms;
        return;
    }
    s->maker = pid;
}

int spares_reaped(struct spares *s, pid_t pid, int status)
{
    if (s->shell_maker && pid == s->shell_maker) {
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;

        s->shell_maker = 0;
        s->shell_not_before = ok ? 0 : util_now_ms() + s->shell_backoff_ms;
        s->shell_backoff_ms =
            ok ? BACKOFF_MIN_MS
               : (s->shell_backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS
                                                           : s->shell_backoff_ms * 2);
        return 1;
    }
    if (!s->maker || pid != s->maker)
        return 0;
    s->maker = 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        s->backoff_ms = BACKOFF_MIN_MS;
        s->not_before = 0;
    } else {
        s->not_before = util_now_ms() + s->backoff_ms;
        s->backoff_ms = s->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : s->backoff_ms * 2;
    }
    return 1;
}

/* Wait for a maker child (bounded), then it is gone. */
static void stop_maker(pid_t *maker, int64_t deadline)
{
    int status;

    while (*maker) {
        pid_t pid = waitpid(*maker, &status, WNOHANG);

        if (pid == *maker || (pid < 0 && errno != EINTR)) {
            *maker = 0;
            break;
        }
        if (util_now_ms() > deadline) {
            kill(*maker, SIGKILL);
            while (waitpid(*maker, &status, 0) == -1 && errno == EINTR)
                ;
            *maker = 0;
            break;
        }
        usleep(10000);
    }
}

void spares_stop(struct spares *s)
{
    int64_t deadline = util_now_ms() + MAKER_WAIT_MS;
    int status;

    stop_maker(&s->shell_maker, deadline);

    while (s->maker) {
        pid_t pid = waitpid(s->maker, &status, WNOHANG);

        if (pid == s->maker || (pid < 0 && errno != EINTR)) {
            s->maker = 0;
            break;
        }
        if (util_now_ms() > deadline) {
            kill(s->maker, SIGKILL);
            while (waitpid(s->maker, &status, 0) == -1 && errno == EINTR)
                ;
            s->maker = 0;
            break;
        }
        usleep(10000);
    }
}

int spares_timeout_ms(const struct spares *s)
{
    if (admin_shells_wanted(s->cfg))
        return SHELLS_TICK_MS;
    if (!admin_spares_wanted(s->cfg))
        return -1;
    /* claims are noticed within a tick: the refill starts while the claimed turn runs */
    return REFILL_TICK_MS;
}
