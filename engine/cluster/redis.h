/*
 * redis — a small synchronous Redis client for the cluster's coordination plane: one
 * connection (TCP, or TLS for rediss://), deadlines on every connect, read and write, AUTH and
 * SELECT at connect, commands pipelined. The protocol is hiredis's: commands are formatted by
 * redisFormatCommandArgv and replies parsed by its redisReader (hiredis 0.14, Debian 12's, has
 * no TLS of its own; the transport here is a socket or an OpenSSL session over one).
 *
 * A struct redis belongs to one thread at a time. It connects on first use and again after any
 * failure (a failed exchange closes the connection: a half-read reply is never trusted). The
 * password never reaches an error message, a log line or redis_url_text.
 *
 * Errors: -ECONNREFUSED, -ETIMEDOUT, -EHOSTUNREACH (no address), -EPROTO (TLS, or a reply that
 * is not RESP), -EACCES (AUTH refused), -E2BIG (a reply past REDIS_REPLY_MAX), -ENOMEM, -EIO;
 * err says which step failed, never with the password.
 */
#ifndef AR_REDIS_H
#define AR_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#define REDIS_HOST_MAX 256
#define REDIS_USER_MAX 128
#define REDIS_PASSWORD_MAX 256
#define REDIS_ARGS_MAX 12
#define REDIS_REPLY_MAX (4u << 20) /* bytes read for one pipeline's replies */

/* AGENT_RUNNER_REDIS_URL, parsed. */
struct redis_url {
    bool tls; /* rediss:// */
    char host[REDIS_HOST_MAX];
    uint16_t port; /* 6379 when absent */
    uint32_t db;   /* /N, 0 when absent */
    char user[REDIS_USER_MAX];
    char password[REDIS_PASSWORD_MAX]; /* "" = no AUTH */
};

/*
 * redis://[[user]:password@]host[:port][/db] or rediss://... (TLS); an IPv6 host in brackets.
 * Percent-escapes in user and password are decoded. -EINVAL with err naming the part.
 */
int redis_url_parse(const char *url, struct redis_url *ret, char *err, size_t errlen);
/* The URL for logs: scheme, host, port, db, and "***" for a password. */
void redis_url_text(const struct redis_url *u, char *out, size_t outlen);
/* Wipe the password. */
void redis_url_wipe(struct redis_url *u);

struct redis_opts {
    const struct redis_url *url; /* borrowed: must outlive the connection */
    const char *ca_file;         /* rediss: PEM bundle to verify against (NULL: the system's) */
    uint64_t connect_ms;         /* connect + TLS + AUTH + SELECT */
    uint64_t io_ms;              /* one exchange (a pipeline) */
};

/* One command: argc strings (binary-safe: len given). */
struct redis_cmd {
    int argc;
    const char *argv[REDIS_ARGS_MAX];
    size_t len[REDIS_ARGS_MAX];
};

/* Append a NUL-terminated argument (ignored past REDIS_ARGS_MAX: redis_pipeline refuses it). */
void redis_cmd_arg(struct redis_cmd *c, const char *s);

struct redis;

/* A connection object (no I/O yet). NULL on ENOMEM. */
struct redis *redis_new(const struct redis_opts *o);
/* Close and free. NULL is a no-op. */
void redis_free(struct redis *r);
/* Close the connection (the next exchange reconnects). */
void redis_close(struct redis *r);
/* Whether a connection is open (its last exchange succeeded). */
bool redis_connected(const struct redis *r);

/*
 * Send n commands in one write and read their n replies (connecting first when needed).
 * ret[i] are hiredis replies, freed by the caller with freeReplyObject (an error reply is
 * REDIS_REPLY_ERROR, not a failure). On failure nothing is left in ret and the connection is
 * closed.
 */
int redis_pipeline(struct redis *r, const struct redis_cmd *cmds, size_t n, redisReply **ret,
                   char *err, size_t errlen);
/* One command. */
int redis_command(struct redis *r, const struct redis_cmd *cmd, redisReply **ret, char *err,
                  size_t errlen);

#endif
