/*
 * replay — run a fuzz target over a committed corpus without libFuzzer (make fuzz-replay).
 *
 *   fuzz-replay-<target> [-v] DIR|FILE...
 *
 * Every regular file of each directory (not recursing), and every file named directly, is read
 * into a buffer of exactly its size (so a sanitizer build sees any over-read) and handed to
 * LLVMFuzzerTestOneInput(). Exits 1 on an unreadable argument or an empty directory; a broken
 * property aborts, after the input's path is printed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

#define REPLAY_INPUT_MAX (64u * 1024 * 1024)

static const char *current_input;
static bool verbose;

static void on_abort(int sig)
{
    static const char what[] = "replay: crashing input: ";

    if (current_input) {
        (void)!write(STDERR_FILENO, what, sizeof(what) - 1);
        (void)!write(STDERR_FILENO, current_input, strlen(current_input));
        (void)!write(STDERR_FILENO, "\n", 1);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Read the whole of path into a malloc'ed buffer of exactly its size (1 byte when empty). */
static int slurp(const char *path, uint8_t **ret_data, size_t *ret_len)
{
    struct stat st;
    uint8_t *data = NULL;
    size_t len = 0;
    int fd, r = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0) {
        r = -errno;
        goto out;
    }
    if ((uint64_t)st.st_size > REPLAY_INPUT_MAX) {
        r = -EFBIG;
        goto out;
    }
    data = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
    if (!data) {
        r = -ENOMEM;
        goto out;
    }
    while (len < (size_t)st.st_size) {
        ssize_t n = read(fd, data + len, (size_t)st.st_size - len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            r = n < 0 ? -errno : -EIO;
            goto out;
        }
        len += (size_t)n;
    }
    *ret_data = data;
    *ret_len = len;
    data = NULL;
out:
    free(data);
    close(fd);
    return r;
}

static int replay_file(const char *path)
{
    uint8_t *data = NULL;
    size_t len = 0;
    int r;

    r = slurp(path, &data, &len);
    if (r < 0) {
        fprintf(stderr, "replay: cannot read \"%s\": %s\n", path, strerror(-r));
        return r;
    }
    if (verbose)
        fprintf(stderr, "replay: \"%s\" (%zu bytes)\n", path, len);
    current_input = path;
    (void)LLVMFuzzerTestOneInput(data, len);
    current_input = NULL;
    free(data);
    return 0;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replay every regular file of dir in name order; the number replayed or -errno. */
static int replay_dir(const char *dir)
{
    struct dirent *de;
    char **names = NULL, path[4096];
    size_t n = 0, cap = 0;
    DIR *d;
    int r = 0;

    d = opendir(dir);
    if (!d)
        return -errno;
    while ((de = readdir(d))) {
        struct stat st;
        char **grown;

        if (de->d_name[0] == '.')
            continue;
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path)) {
            r = -ENAMETOOLONG;
            goto out;
        }
        if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            grown = realloc(names, cap * sizeof(*names));
            if (!grown) {
                r = -ENOMEM;
                goto out;
            }
            names = grown;
        }
        names[n] = strdup(path);
        if (!names[n]) {
            r = -ENOMEM;
            goto out;
        }
        n++;
    }
    if (n > 0)
        qsort(names, n, sizeof(*names), name_cmp);
    for (size_t i = 0; i < n; i++) {
        r = replay_file(names[i]);
        if (r < 0)
            goto out;
    }
    r = n > 0x7fffffff ? 0x7fffffff : (int)n;
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(d);
    return r;
}

int main(int argc, char **argv)
{
    int total = 0, first = 1;

    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        verbose = true;
        first = 2;
    }
    if (first >= argc) {
        fprintf(stderr, "usage: %s [-v] DIR|FILE...\n", argv[0]);
        return 2;
    }
    signal(SIGABRT, on_abort);
    for (int i = first; i < argc; i++) {
        struct stat st;
        int r;

        if (stat(argv[i], &st) < 0) {
            fprintf(stderr, "replay: \"%s\": %s\n", argv[i], strerror(errno));
            return 1;
        }
        if (S_ISDIR(st.st_mode)) {
            r = replay_dir(argv[i]);
            if (r == 0) {
                fprintf(stderr, "replay: \"%s\" holds no inputs\n", argv[i]);
                return 1;
            }
        } else {
            r = replay_file(argv[i]) < 0 ? -EIO : 1;
        }
        if (r < 0) {
            fprintf(stderr, "replay: \"%s\": %s\n", argv[i], strerror(-r));
            return 1;
        }
        total += r;
    }
    printf("%s: %d inputs replayed\n", argv[0], total);
    return 0;
}
