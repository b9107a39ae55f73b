/*
 * util — small, dependency-free helpers shared by every binary: strict number parsing,
 * clocks, random identifiers, constant-time comparison, the one error-message setter and a
 * few file-system verbs.
 *
 * Every function that can fail returns >= 0 on success and -errno on failure; out-parameters
 * are written only on success.
 */
#ifndef AR_UTIL_H
#define AR_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Parse a whole decimal string into [min, max]. -EINVAL on junk or empty, -ERANGE outside. */
int util_parse_u64(const char *str, uint64_t min, uint64_t max, uint64_t *ret);

/* Milliseconds on CLOCK_MONOTONIC / CLOCK_REALTIME. Cannot fail. */
int64_t util_now_ms(void);
int64_t util_wall_ms(void);
/* Nanoseconds on CLOCK_MONOTONIC / CLOCK_REALTIME. Cannot fail. */
int64_t util_now_ns(void);
int64_t util_wall_ns(void);
/* Sleep ms milliseconds (nothing when ms <= 0), resumed after a signal; async-signal-safe. */
void util_sleep_ms(int64_t ms);
/* A point in time of ms milliseconds (>= 0) as the timespec pthread_cond_timedwait takes, on
 * whatever clock ms was read from (the condition variable's). Cannot fail. */
void util_deadline_ts(int64_t ms, struct timespec *ret);

/* Fill buf with len random bytes from getrandom(2), through a per-thread page that one call
 * fills for many ids (wiped in a forked child; see util.c). */
int util_random_bytes(void *buf, size_t len);
/* Write 2*nbytes lower-case hex digits of random data plus a NUL into out (size >= 2n+1). */
int util_random_hex(char *out, size_t nbytes);
/* A random RFC 4122 version 4 UUID string; out must hold 37 bytes. */
int util_random_uuid(char out[37]);

/*
 * A plain name that can stand as one path component or URL path segment: 1..max characters of
 * [A-Za-z0-9._-], not "." or "..".
 */
bool util_plain_name(const char *s, size_t max);
/* The value of one hex digit (either case), -1 when c is not one. */
int util_hex_digit(char c);
/*
 * Percent-decode [s, s+len) into out (outlen bytes, its NUL included); with plus_space a '+'
 * is a space (a query component). -EINVAL for an escape that is not two hex digits or a
 * decoded NUL, -E2BIG when out has no room.
 */
int util_percent_decode(const char *s, size_t len, bool plus_space, char *out, size_t outlen);
/* Whether s holds a control character (below 0x20) or DEL. */
bool util_has_ctl(const char *s);
/*
 * Whether every byte of s is visible: no space, control character or DEL (bytes from 0x80 up
 * are taken as they are), so s can stand in a URL or a header line as it is. "" is.
 */
bool util_visible(const char *s);

/* Constant-time equality of two byte strings (time depends only on the lengths). */
bool util_ct_equal(const void *a, size_t alen, const void *b, size_t blen);

/* Lower-case hex of len bytes into out (size >= 2*len+1). Cannot fail. */
void util_hex_encode(const uint8_t *in, size_t len, char *out);

/* mkdir -p with the given mode for every created component. */
int util_mkdir_p(const char *path, mode_t mode);
/* Create or replace path with exactly len bytes of data (O_NOFOLLOW, mode). */
int util_write_file(const char *path, const void *data, size_t len, mode_t mode);
/*
 * Create or replace root/rel with data, creating missing parent folders (0755), never
 * following a symlink on the way (a hostile workspace cannot redirect the write).
 * rel must be a relative path without "." or ".." components.
 */
int util_write_file_beneath(const char *root, const char *rel, const void *data, size_t len,
                            mode_t mode);
/* Read a whole file (at most max bytes) into a NUL-terminated malloc'ed buffer. */
int util_read_file(const char *path, size_t max, char **ret_data, size_t *ret_len);

/* strdup that returns NULL for NULL. */
char *util_xstrdup(const char *s);

/* Write all of buf to fd, retrying on EINTR and short writes. */
int util_write_all(int fd, const void *buf, size_t len);
/*
 * A listening unix stream socket at path (close-on-exec, non-blocking; a stale file there is
 * replaced) whose file has the given mode: the fd, or -ENAMETOOLONG / -errno.
 */
int util_unix_listen(const char *path, mode_t mode, int backlog);

/* Process start time (clock ticks since boot, field 22 of /proc/<pid>/stat); 0 if gone or
 * unreadable (a field that is no decimal number). */
uint64_t util_proc_start_time(pid_t pid);

/* True when pid is alive and, if start_time is non-zero, still the same process. */
bool util_proc_alive(pid_t pid, uint64_t start_time);

/* getpid(), cached per process (reset in a forked child): cheap enough for hot paths. */
pid_t util_self_pid(void);

/* Block the signals and return a close-on-exec, non-blocking signalfd for them. */
int util_signalfd_for(const int *signals, size_t n);

/* Add O_NONBLOCK to fd's status flags (nothing when they cannot be read, e.g. fd < 0). */
void util_set_nonblock(int fd);

/* Point fd at /dev/null (read-write); left as it is when /dev/null cannot be opened. */
void util_redirect_null(int fd);

/*
 * The error-message setter every module uses: fmt into err (errlen bytes, always
 * terminated); nothing when err is NULL or errlen is 0. util_fail also returns r, so a failure
 * path reads `return util_fail(-EINVAL, err, errlen, "...", ...)`.
 */
void util_vseterr(char *err, size_t errlen, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
void util_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int util_fail(int r, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
