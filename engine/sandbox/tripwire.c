/* tripwire — an environment's limit counters held open (tripwire.h). */
#include "sandbox/tripwire.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "sandbox/disk.h"

void sandbox_tripwire_init(struct sandbox_tripwire *t)
{
    t->n = 0;
    t->ws_fd = -1;
    t->armed = false;
    for (int i = 0; i < SANDBOX_TRIPWIRE_MAX; i++)
        t->fd[i] = -1;
}

static int open_counter(struct sandbox_tripwire *t, const char *dir, const char *file, bool memory,
                        bool v2)
{
    char path[SANDBOX_CG_PATH_MAX + 32];
    int fd;

    if (t->n >= SANDBOX_TRIPWIRE_MAX)
        return -E2BIG;
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path))
        return -ENAMETOOLONG;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    t->fd[t->n] = fd;
    t->memory[t->n] = memory;
    t->v2[t->n] = v2;
    t->n++;
    return 0;
}

int sandbox_tripwire_open(struct sandbox_tripwire *t, const struct sandbox_cgroup *cg,
                          const char *workspace)
{
    int r = 0;

    sandbox_tripwire_init(t);
    /* memory counters first: an OOM kill wins over refused forks */
    for (size_t i = 0; r == 0 && i < cg->n; i++)
        if (cg->h[i].ctrl & SANDBOX_CG_MEMORY)
            r = open_counter(t, cg->h[i].dir, cg->h[i].v2 ? "memory.events" : "memory.oom_control",
                             true, cg->h[i].v2);
    for (size_t i = 0; r == 0 && i < cg->n; i++)
        if (cg->h[i].ctrl & SANDBOX_CG_PIDS)
            r = open_counter(t, cg->h[i].dir, "pids.events", false, cg->h[i].v2);
    if (r == 0 && workspace && sandbox_disk_is_mounted(workspace) == 1) {
        t->ws_fd = open(workspace, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (t->ws_fd < 0)
            r = -errno;
    }
    if (r == 0 && t->n == 0 && t->ws_fd < 0)
        r = -ENOENT; /* nothing to watch: the worker's own reads stay */
    t->armed = true;
    if (r < 0)
        sandbox_tripwire_close(t);
    return r;
}

bool sandbox_tripwire_armed(const struct sandbox_tripwire *t)
{
    return t->armed;
}

/* The counter `key` of the file behind fd, 0 when absent or unreadable. */
static uint64_t counter(int fd, const char *key)
{
    char text[512];
    uint64_t v = 0;
    ssize_t n;

    do {
        n = pread(fd, text, sizeof(text) - 1, 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    (void)sandbox_cgroup_parse_key(text, key, &v);
    return v;
}

const char *sandbox_tripwire_check(const struct sandbox_tripwire *t)
{
    for (int i = 0; i < t->n; i++)
        if (t->memory[i] && counter(t->fd[i], "oom_kill") > 0)
            return sandbox_cgroup_trip_code(SANDBOX_TRIP_MEMORY);
    for (int i = 0; i < t->n; i++)
        if (!t->memory[i] && counter(t->fd[i], "max") > 0)
            return sandbox_cgroup_trip_code(SANDBOX_TRIP_PIDS);
    if (t->ws_fd >= 0 && sandbox_disk_full_fd(t->ws_fd) == 1)
        return "sandbox_disk_limit";
    return "none";
}

void sandbox_tripwire_close(struct sandbox_tripwire *t)
{
    if (!t->armed)
        return;
    for (int i = 0; i < t->n; i++)
        if (t->fd[i] >= 0)
            close(t->fd[i]);
    if (t->ws_fd >= 0)
        close(t->ws_fd);
    sandbox_tripwire_init(t);
}
