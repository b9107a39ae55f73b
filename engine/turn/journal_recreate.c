/*
 * journal_recreate — the keeper makes the journal of a turn whose worker died before it did
 * (journal.h). libc only: the keeper links it without the rest of the journal (OpenSSL).
 */
#include "turn/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "turn/journal_files.h"

/* The file starts with head: the worker made it before it died. */
static bool starts_with(int fd, const char *head, size_t len)
{
    char *got = malloc(len);
    bool same;

    if (!got)
        return false;
    same = pread(fd, got, len, 0) == (ssize_t)len && memcmp(got, head, len) == 0;
    free(got);
    return same;
}

int journal_recreate(const char *path, const char *head, size_t len)
{
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = JOURNAL_LOCK_WRITER,
                      .l_len = 1};
    int fd, r;

    if (!len || head[len - 1] != '\n')
        return -EINVAL;
    fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    if (starts_with(fd, head, len)) {
        close(fd);
        return 0;
    }
    /* the writer's lock for the time it takes: a live writer has the name (another turn of
     * the same id: this one stays without a journal) */
    if (fcntl(fd, F_OFD_SETLK, &l) < 0) {
        r = errno == EAGAIN || errno == EACCES ? -EEXIST : -errno;
        close(fd);
        return r;
    }
    /* an earlier turn of the same id, finished or abandoned, is replaced, as journal_create
     * does; the writer made it meanwhile: it is there */
    if (starts_with(fd, head, len)) {
        close(fd);
        return 0;
    }
    r = ftruncate(fd, 0) < 0 || fchmod(fd, 0600) < 0 ? -errno : util_write_all(fd, head, len);
    close(fd); /* no writer now: whoever comes for the turn takes it over */
    return r < 0 ? r : 1;
}
