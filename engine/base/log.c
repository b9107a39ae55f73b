#include "base/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/util.h"

#define LOG_LINE_MAX (16 * 1024)
#define LOG_REDACT_MAX 1024 /* secrets per thread; past it the thread's lines are withheld */
#define LOG_CTX_MAX 160
#define LOG_WITHHELD "[line withheld: a credential of this request could not be registered for redaction]"

int log_max_level = LOG_LEVEL_INFO;
static char log_component[32] = "agent-runner";

static _Thread_local char ctx_request[LOG_CTX_MAX];
static _Thread_local char ctx_session[LOG_CTX_MAX];
static _Thread_local char ctx_turn[LOG_CTX_MAX];
static _Thread_local char ctx_harness[32];
static _Thread_local char **redact;
static _Thread_local int nredact, capredact;
/* a secret could not be remembered: this thread's lines are withheld until the next clear */
static _Thread_local int redact_lost;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void log_setup(const char *component, enum log_level level)
{
    snprintf(log_component, sizeof(log_component), "%s", component);
    log_max_level = (int)level;
}

int log_level_parse(const char *s, enum log_level *ret)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *ret = (enum log_level)i;
            return 0;
        }
    }
    return -EINVAL;
}

static void ctx_copy(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src ? src : "");
}

void log_ctx_set(const char *request_id, const char *session_key, const char *turn_id,
                 const char *harness)
{
    ctx_copy(ctx_request, sizeof(ctx_request), request_id);
    ctx_copy(ctx_session, sizeof(ctx_session), session_key);
    ctx_copy(ctx_turn, sizeof(ctx_turn), turn_id);
    ctx_copy(ctx_harness, sizeof(ctx_harness), harness);
}

void log_ctx_clear(void)
{
    log_ctx_set(NULL, NULL, NULL, NULL);
}

void log_redact_add(const char *secret)
{
    char *copy;

    if (!secret || strlen(secret) < 4)
        return;
    for (int i = 0; i < nredact; i++)
        if (strcmp(redact[i], secret) == 0)
            return;
    if (nredact == capredact) {
        int cap = capredact ? capredact * 2 : 32;
        char **grown = cap <= LOG_REDACT_MAX ? realloc(redact, (size_t)cap * sizeof(*grown))
                                             : NULL;

        if (!grown) {
            redact_lost = 1; /* never a silent drop: the lines it could be in are withheld */
            return;
        }
        redact = grown;
        capredact = cap;
    }
    copy = strdup(secret);
    if (!copy) {
        redact_lost = 1;
        return;
    }
    redact[nredact++] = copy;
}

void log_redact_clear(void)
{
    for (int i = 0; i < nredact; i++)
        free(redact[i]);
    free(redact);
    redact = NULL;
    nredact = capredact = 0;
    redact_lost = 0;
}

bool log_redact_found(const void *data, size_t len)
{
    if (redact_lost)
        return true;
    for (int i = 0; i < nredact; i++)
        if (memmem(data, len, redact[i], strlen(redact[i])))
            return true;
    return false;
}

static void json_escape_into(struct buf *b, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int r;

        if (*p == '"' || *p == '\\')
            r = buf_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            r = buf_printf(b, "\\u%04x", *p);
        else
            r = buf_append_char(b, (char)*p);
        if (r < 0)
            return;
    }
}

static void field(struct buf *b, const char *name, const char *value)
{
    if (!value[0])
        return;
    buf_printf(b, ",\"%s\":\"", name);
    json_escape_into(b, value);
    buf_append_char(b, '"');
}

/* Replace every occurrence of each registered secret by "[redacted]". */
static void scrub(struct buf *line)
{
    for (int i = 0; i < nredact; i++) {
        size_t slen = strlen(redact[i]);
        char *hit;

        while ((hit = strstr(line->data, redact[i])) != NULL) {
            size_t off = (size_t)(hit - line->data);
            struct buf out;

            buf_init(&out, LOG_LINE_MAX * 2);
            buf_append(&out, line->data, off);
            buf_append_str(&out, "[redacted]");
            buf_append_str(&out, line->data + off + slen);
            buf_release(line);
            *line = out;
            if (!line->data)
                return;
        }
    }
}

char *log_redact_copy(const char *s, size_t max)
{
    struct buf b;
    char *out = NULL;
    size_t n = strlen(s);

    if (redact_lost)
        return strdup(LOG_WITHHELD);
    buf_init(&b, LOG_LINE_MAX * 2 > max * 2 ? LOG_LINE_MAX * 2 : max * 2);
    if (buf_append(&b, s, n < max ? n : max) == 0) {
        scrub(&b);
        if (b.data)
            out = strdup(b.data);
    }
    buf_release(&b);
    return out;
}

void log_write(enum log_level level, const char *fmt, ...)
{
    char msg[4096], ts[64];
    struct timespec now;
    struct tm tm;
    struct buf b;
    va_list ap;
    int saved = errno;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (redact_lost)
        snprintf(msg, sizeof(msg), "%s", LOG_WITHHELD);

    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);

    buf_init(&b, LOG_LINE_MAX);
    buf_printf(&b, "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"pid\":%d,\"component\":\"%s\"", ts,
               now.tv_nsec / 1000000, level_names[level], (int)getpid(), log_component);
    field(&b, "msg", msg);
    field(&b, "requestId", ctx_request);
    field(&b, "sessionKey", ctx_session);
    field(&b, "turnId", ctx_turn);
    field(&b, "harness", ctx_harness);
    buf_append_str(&b, "}\n");
    if (b.data) {
        scrub(&b);
        if (b.data)
            (void)!write(STDERR_FILENO, b.data, b.len);
    }
    buf_release(&b);
    errno = saved;
}

void log_level_from_env(const char *name)
{
    const char *v = getenv(name);
    enum log_level lvl;

    if (v && log_level_parse(v, &lvl) == 0)
        log_max_level = (int)lvl;
}

bool log_budget_take(struct log_budget *b, unsigned per_s, uint64_t *ret_dropped)
{
    int64_t now = util_now_ms();

    *ret_dropped = 0;
    if (now - b->window_ms >= 1000) {
        *ret_dropped = b->dropped;
        b->window_ms = now;
        b->logged = 0;
        b->dropped = 0;
    }
    if (b->logged >= per_s) {
        b->dropped++;
        return false;
    }
    b->logged++;
    return true;
}
