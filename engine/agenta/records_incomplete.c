/*
 * records_incomplete — the "records incomplete" marks (records_incomplete.h).
 */
#include "agenta/records_incomplete.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "base/log.h"
#include "base/util.h"
#include "core/contracts.h"

static pthread_mutex_t incomplete_lock = PTHREAD_MUTEX_INITIALIZER;

static char *incomplete[RECORDS_INCOMPLETE_MAX];

static size_t nincomplete, incomplete_next;

/* ---- the incomplete set ----------------------------------------------------------------- */

/* The folder every process of the runner shares for the marks ("" = this process only). */
static char incomplete_dir[512];

/* <incomplete_dir>/<sha256 of the key in hex>: a key may hold any byte, a file name may not. */
static int mark_path(const char *session_key, char *out, size_t outlen)
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    char hex[65], dir[sizeof(incomplete_dir)];
    int n;

    pthread_mutex_lock(&incomplete_lock);
    memcpy(dir, incomplete_dir, sizeof(dir));
    pthread_mutex_unlock(&incomplete_lock);
    if (!dir[0])
        return -ENOENT;
    if (EVP_Digest(session_key, strlen(session_key), md, &mdlen, EVP_sha256(), NULL) != 1 ||
        mdlen != sizeof(md))
        return -EIO;
    for (size_t i = 0; i < sizeof(md); i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    n = snprintf(out, outlen, "%s/%s", dir, hex);
    return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

int records_incomplete_dir(const char *dir)
{
    if (!dir || !dir[0]) {
        pthread_mutex_lock(&incomplete_lock);
        incomplete_dir[0] = '\0';
        pthread_mutex_unlock(&incomplete_lock);
        return 0;
    }
    if (dir[0] != '/' || strlen(dir) >= sizeof(incomplete_dir) - 80)
        return -EINVAL;
    pthread_mutex_lock(&incomplete_lock);
    snprintf(incomplete_dir, sizeof(incomplete_dir), "%s", dir);
    pthread_mutex_unlock(&incomplete_lock);
    return 0;
}

static bool remembered(const char *session_key)
{
    bool found = false;

    pthread_mutex_lock(&incomplete_lock);
    for (size_t i = 0; i < nincomplete && !found; i++)
        found = strcmp(incomplete[i], session_key) == 0;
    pthread_mutex_unlock(&incomplete_lock);
    return found;
}

bool records_incomplete_has(const char *session_key)
{
    char path[640];

    if (!session_key)
        return false;
    if (remembered(session_key))
        return true;
    /* another worker (or a runner before a restart) may have lost one of its records */
    return mark_path(session_key, path, sizeof(path)) == 0 && access(path, F_OK) == 0;
}

/* The mark as a file every worker sees; it holds the key, for whoever looks at the folder. */
static void mark_file(const char *session_key)
{
    char path[640], *slash;
    int fd, r;

    if (mark_path(session_key, path, sizeof(path)) < 0)
        return;
    slash = strrchr(path, '/');
    *slash = '\0';
    r = util_mkdir_p(path, 0700);
    *slash = '/';
    if (r < 0) {
        log_debug("records: cannot create the folder of \"%s\": %s", path, ar_strerror(r));
        return;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd == -1) {
        log_debug("records: cannot mark session \"%s\" incomplete in \"%s\": %s", session_key, path,
                  strerror(errno));
        return;
    }
    (void)util_write_all(fd, session_key, strlen(session_key));
    close(fd);
}

void records_incomplete_note(const char *session_key)
{
    char *copy, *old = NULL;

    if (!session_key || remembered(session_key))
        return;
    mark_file(session_key);
    copy = strdup(session_key);
    if (!copy)
        return;
    pthread_mutex_lock(&incomplete_lock);
    if (nincomplete < RECORDS_INCOMPLETE_MAX) {
        incomplete[nincomplete++] = copy;
    } else {
        /* full: forget the oldest mark in memory (the file, if any, stays) */
        old = incomplete[incomplete_next];
        incomplete[incomplete_next] = copy;
        incomplete_next = (incomplete_next + 1) % RECORDS_INCOMPLETE_MAX;
    }
    pthread_mutex_unlock(&incomplete_lock);
    free(old);
}
