/*
 * cgroup_io — the file I/O of sandbox_cgroup (cgroup_io.h).
 */
#include "sandbox/cgroup_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

bool sandbox_cgroup_plain_name(const char *s)
{
    return util_plain_name(s, 64);
}

int sandbox_cgroup_write_at(const char *dir, const char *file, const char *s)
{
    char path[SANDBOX_CG_IO_PATH_MAX];
    size_t len = strlen(s);
    ssize_t n;
    int fd, r = 0;

    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path))
        return -ENAMETOOLONG;
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd == -1)
        return -errno;
    n = write(fd, s, len);
    if (n < 0)
        r = -errno;
    else if ((size_t)n != len)
        r = -EIO;
    close(fd);
    return r;
}

int sandbox_cgroup_read_at(const char *dir, const char *file, char **ret)
{
    char path[SANDBOX_CG_IO_PATH_MAX];

    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path))
        return -ENAMETOOLONG;
    return util_read_file(path, SANDBOX_CG_TEXT_MAX, ret, NULL);
}
