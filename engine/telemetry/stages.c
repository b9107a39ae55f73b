/* stages — a cold turn's stage stamps (stages.h). */
#include "telemetry/stages.h"

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"

struct stamp {
    int64_t ns;  /* CLOCK_MONOTONIC; 0: not passed */
    int64_t cpu; /* the process's (keeper) or thread's (worker) CPU, ns */
};

static int64_t clock_ns(clockid_t c)
{
    struct timespec ts;

    if (clock_gettime(c, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* --- keeper --------------------------------------------------------------------------------- */

static struct stamp kstamps[STAGES_K_COUNT];
static int64_t kcpu_base, kcpu_at_fork; /* the CPU before the detaching fork */

void stages_keeper_mark(enum stages_kpoint p)
{
    if ((unsigned)p < STAGES_K_COUNT)
        kstamps[p] = (struct stamp){clock_ns(CLOCK_MONOTONIC),
                                    kcpu_base + clock_ns(CLOCK_PROCESS_CPUTIME_ID)};
}

void stages_keeper_before_fork(void)
{
    kcpu_at_fork = kcpu_base + clock_ns(CLOCK_PROCESS_CPUTIME_ID);
}

void stages_keeper_forked(void)
{
    kcpu_base = kcpu_at_fork; /* a new process: its CPU clock started at 0 */
}

void stages_keeper_text(char *out, size_t len)
{
    size_t used = 0;

    if (len)
        out[0] = '\0';
    for (int i = 0; i < STAGES_K_COUNT && used < len; i++) {
        int n = snprintf(out + used, len - used, "%s%" PRId64 ":%" PRId64, i ? "," : "",
                         kstamps[i].ns, kstamps[i].cpu);
        if (n < 0 || (size_t)n >= len - used) {
            out[0] = '\0'; /* all or nothing */
            return;
        }
        used += (size_t)n;
    }
}

/* --- worker --------------------------------------------------------------------------------- */

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static const char *log_path;

static void log_init(void)
{
    const char *p = getenv("AGENT_RUNNER_STAGE_LOG");

    log_path = p && p[0] == '/' ? p : NULL;
}

bool stages_enabled(void)
{
    (void)pthread_once(&log_once, log_init);
    return log_path != NULL;
}

static _Thread_local struct {
    bool armed; /* stamping enabled, the turn begun: a cold start turns it on */
    bool on;
    struct stamp w[STAGES_W_COUNT];
    struct stamp k[STAGES_K_COUNT];
} turn;

void stages_turn_begin(void)
{
    memset(&turn, 0, sizeof(turn));
    turn.armed = stages_enabled();
    /* the wall clock only (vDSO): a CPU clock read is a system call, and every warm turn of a
     * stamping runner passes here; the stamps proper start with the environment's acquisition */
    if (turn.armed)
        turn.w[STAGES_W_REQ].ns = clock_ns(CLOCK_MONOTONIC);
}

bool stages_turn_on(void)
{
    return turn.on;
}

void stages_mark(enum stages_wpoint p)
{
    if (p == STAGES_W_ENV0 && turn.armed)
        turn.on = true;
    if (!turn.on || (unsigned)p >= STAGES_W_COUNT || turn.w[p].ns)
        return;
    turn.w[p] = (struct stamp){clock_ns(CLOCK_MONOTONIC), clock_ns(CLOCK_THREAD_CPUTIME_ID)};
}

void stages_keeper_parse(const char *text, size_t len)
{
    char buf[STAGES_K_COUNT * 44 + 1], *p = buf;

    if (!turn.on || !text || len >= sizeof(buf))
        return;
    memcpy(buf, text, len);
    buf[len] = '\0';
    for (int i = 0; i < STAGES_K_COUNT; i++) {
        char *colon = strchr(p, ':'), *comma;
        uint64_t ns, cpu;

        if (!colon)
            return;
        *colon = '\0';
        comma = strchr(colon + 1, ',');
        if (comma)
            *comma = '\0';
        if (util_parse_u64(p, 0, INT64_MAX, &ns) < 0 ||
            util_parse_u64(colon + 1, 0, INT64_MAX, &cpu) < 0)
            return;
        turn.k[i] = (struct stamp){(int64_t)ns, (int64_t)cpu};
        if (!comma)
            break;
        p = comma + 1;
    }
}

/* A stage: wall from one boundary to another; CPU of the worker's and the keeper's parts. */
struct stage {
    const char *name;
    char from_side, to_side; /* 'w' worker, 'k' keeper */
    int from, to;
    int wcpu_from, wcpu_to; /* worker CPU over [from, to] of the worker's points; -1 none */
    int kcpu_from, kcpu_to; /* keeper CPU; kcpu_from -1: since its exec */
};

#define NONE -2

static const struct stage stages[] = {
    {"request to environment", 'w', 'w', STAGES_W_REQ, STAGES_W_ENV0, NONE, NONE, NONE, NONE},
    {"uid, cgroup and workspace set-up", 'w', 'w', STAGES_W_ENV0, STAGES_W_SETUP, STAGES_W_ENV0,
     STAGES_W_SETUP, NONE, NONE},
    {"keeper start", 'w', 'k', STAGES_W_SETUP, STAGES_K_NET0, STAGES_W_SETUP, STAGES_W_READY, -1,
     STAGES_K_NET0},
    {"network namespace", 'k', 'k', STAGES_K_NET0, STAGES_K_NET1, NONE, NONE, STAGES_K_NET0,
     STAGES_K_NET1},
    {"/etc and seccomp programme", 'k', 'k', STAGES_K_NET1, STAGES_K_ETC1, NONE, NONE,
     STAGES_K_NET1, STAGES_K_ETC1},
    {"bwrap until exec", 'k', 'k', STAGES_K_ETC1, STAGES_K_EXEC, NONE, NONE, STAGES_K_ETC1,
     STAGES_K_EXEC},
    {"ready line and attach", 'k', 'w', STAGES_K_EXEC, STAGES_W_ATTACHED, STAGES_W_READY,
     STAGES_W_ATTACHED, STAGES_K_EXEC, STAGES_K_READY},
    {"harness start and ACP initialize", 'w', 'w', STAGES_W_ATTACHED, STAGES_W_INIT1,
     STAGES_W_ATTACHED, STAGES_W_INIT1, NONE, NONE},
    {"ACP session/new", 'w', 'w', STAGES_W_INIT1, STAGES_W_NEW1, STAGES_W_INIT1, STAGES_W_NEW1,
     NONE, NONE},
    {"prompt to first delta", 'w', 'w', STAGES_W_NEW1, STAGES_W_DELTA, STAGES_W_NEW1,
     STAGES_W_DELTA, NONE, NONE},
    {"first delta to the turn's end", 'w', 'w', STAGES_W_DELTA, STAGES_W_TD0, STAGES_W_DELTA,
     STAGES_W_TD0, NONE, NONE},
    {"teardown", 'w', 'w', STAGES_W_TD0, STAGES_W_TD1, STAGES_W_TD0, STAGES_W_TD1, NONE, NONE},
};

static const struct stamp *at(char side, int i)
{
    return side == 'k' ? &turn.k[i] : &turn.w[i];
}

static double ms(int64_t ns)
{
    return (double)ns / 1e6;
}

void stages_turn_end(void)
{
    char line[2048];
    size_t used;
    int fd, n;

    if (!turn.on)
        return;
    turn.on = turn.armed = false;
    for (int i = 0; i < STAGES_W_COUNT; i++)
        if (!turn.w[i].ns)
            return;                /* not a cold turn that ran to its end */
    if (!turn.k[STAGES_K_NET0].ns) /* no network namespace: the stage is empty */
        turn.k[STAGES_K_NET0] = turn.k[STAGES_K_NET1] = turn.k[STAGES_K_ETC0];
    for (int i = 0; i < STAGES_K_COUNT; i++)
        if (!turn.k[i].ns)
            return;
    n = snprintf(line, sizeof(line), "{\"totalMs\":%.3f,\"stages\":[",
                 ms(turn.w[STAGES_W_TD1].ns - turn.w[STAGES_W_REQ].ns));
    used = n > 0 ? (size_t)n : 0;
    for (size_t i = 0; i < ARRAY_SIZE(stages) && used < sizeof(line); i++) {
        const struct stage *s = &stages[i];
        int64_t cpu = 0;

        if (s->wcpu_from >= 0)
            cpu += turn.w[s->wcpu_to].cpu - turn.w[s->wcpu_from].cpu;
        if (s->kcpu_to >= 0)
            cpu += turn.k[s->kcpu_to].cpu - (s->kcpu_from >= 0 ? turn.k[s->kcpu_from].cpu : 0);
        n = snprintf(line + used, sizeof(line) - used, "%s[\"%s\",%.3f,%.3f]", i ? "," : "",
                     s->name, ms(at(s->to_side, s->to)->ns - at(s->from_side, s->from)->ns),
                     ms(cpu));
        if (n < 0)
            return;
        used += (size_t)n;
    }
    n = snprintf(line + used, used < sizeof(line) ? sizeof(line) - used : 0, "]}\n");
    if (n < 0 || used + (size_t)n >= sizeof(line))
        return;
    used += (size_t)n;
    fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return;
    (void)util_write_all(fd, line, used);
    close(fd);
}
