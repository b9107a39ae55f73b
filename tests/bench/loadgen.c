/*
 * loadgen — the turn load driver of `make bench` (tests/bench/run.py).
 *
 * Drives POST /run through nginx (TLS) with libcurl: one easy handle per session, reused for
 * every turn of that session so its keep-alive connection is reused; --threads threads, each
 * running a curl multi loop over its share of the sessions (default one thread: on a 2-core box
 * the driver competes with nginx, the workers, the keepers and the agents for CPU).
 *
 * warm mode (default): every session first runs a cold turn [user] with its own
 * projectId/sessionId (creating its warm environment: keeper + bwrap + scripted agent), then,
 * after all sessions are warm, --turns warm turns each. A warm follow-up carries
 * [user, assistant, user] (more when --chain > 1): the runner's continuity check compares the
 * user texts of the follow-up's history with the user texts of the previous turn, so after
 * --chain follow-ups the conversation is re-anchored with a one-message [user] turn on the same
 * session (still warm: a one-message turn needs no history check). With --chain 1 warm turns
 * alternate [user] and [user, assistant, user].
 *
 * --setup-url URL sends the cold setup turns there instead (several hosts: sessions claimed by
 * one member, their measured warm turns sent to another, which forwards them to the owner).
 *
 * --alternate URL (warm mode, one thread): two sessions, the first on --url and the second on
 * URL, and one turn in flight at a time, the two sessions taking turns, --block turns each
 * (default 1): two stacks that differ in one setting measured under the same machine, block
 * by block ("alternate" in the output: the second one's figures; "all": the first one's).
 *
 * cold mode (--cold): --turns turns per session without a sessionId: every turn starts a new
 * keeper + sandbox + agent and destroys it at the end.
 *
 * Per turn it measures the wall time from handing the request to curl to the arrival of the
 * final NDJSON record {"kind":"result",...} (and, as extra figures, to the agent-status event
 * environment_ready and to the first message_delta); it checks the HTTP status, that the result says
 * ok:true and that the output is exactly the scripted agent's "echo[k]: <text>" (k counts the
 * prompts that agent process answered, so a turn that silently went cold is an error too). At
 * the end of warm mode each session is removed with POST /kill (not measured).
 *
 * Output: one JSON object on stdout; "loadgen: measuring" and "loadgen: measured" on stderr
 * around the measured phase. Exit status 0 when every turn was right, 1 otherwise.
 */
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BODY_MAX (4u * 1024 * 1024)
#define LINE_MAX_BYTES (4u * 1024 * 1024)
#define TEXT_MAX 256
#define ERRORS_SHOWN 5

enum phase { PH_COLD_SETUP, PH_MEASURE, PH_KILL, PH_DONE };

struct sbuf {
    char *p;
    size_t len, cap, max;
};

struct samples {
    int64_t *ns;
    size_t n, cap;
};

struct opts {
    const char *url;
    const char *setup_url; /* --setup-url: where the cold setup turns go (default: url) */
    const char *alt_url;   /* --alternate: the second session's stack */
    char alt_kill_url[1024];
    const char *token;
    const char *prefix;
    char kill_url[1024];
    unsigned sessions, turns, threads, chain, block;
    bool cold;
};

struct thread;

struct session {
    struct thread *th;
    CURL *easy;
    struct curl_slist *headers;
    unsigned index;
    char sid[64];
    char **msgs; /* the conversation: even = user, odd = assistant */
    size_t nmsgs, cap_msgs;
    unsigned echo_next; /* k of the next expected "echo[k]: " */
    unsigned turns_done;
    unsigned seq; /* requests sent, names the user texts */
    unsigned chain_pos;
    enum phase phase;
    bool followup; /* the request in flight carries [user, assistant, user, ...] */
    struct sbuf body;
    struct sbuf line; /* the partial response line */
    char text[TEXT_MAX];  /* the new user text of the request in flight */
    char *output;         /* the result's output, unescaped */
    char *error;          /* the result's error, unescaped */
    int64_t t0, t_ready, t_delta, t_result; /* 0: not seen */
    bool got_result, result_ok;
};

struct thread {
    pthread_t tid;
    unsigned id;
    const struct opts *o;
    CURLM *multi;
    struct session *s;
    size_t ns;
    size_t active;
    struct samples all, follow, anchor, ready, delta, alt;
    uint64_t errors, new_connections, turns;
    char first_errors[ERRORS_SHOWN][256];
    unsigned nfirst;
};

static pthread_barrier_t barrier;
static int64_t t_measure_start, t_measure_end;

static int64_t util_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *msg)
{
    fprintf(stderr, "loadgen: %s\n", msg);
    exit(2);
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);

    if (!q)
        die("out of memory");
    return q;
}

static char *util_xstrdup(const char *s)
{
    char *d = strdup(s);

    if (!d)
        die("out of memory");
    return d;
}

static void sb_init(struct sbuf *b, size_t max)
{
    memset(b, 0, sizeof(*b));
    b->max = max;
}

static int sb_add(struct sbuf *b, const char *data, size_t n)
{
    if (n > b->max || b->len > b->max - n)
        return -E2BIG;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 512;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

static int sb_str(struct sbuf *b, const char *s)
{
    return sb_add(b, s, strlen(s));
}

/* s as a JSON string literal (quotes included). */
static int sb_json_str(struct sbuf *b, const char *s)
{
    int r = sb_add(b, "\"", 1);

    for (; r == 0 && *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];

        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            r = sb_add(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            r = sb_add(b, esc, 6);
        } else {
            r = sb_add(b, (const char *)&c, 1);
        }
    }
    return r == 0 ? sb_add(b, "\"", 1) : r;
}

static void samples_add(struct samples *sm, int64_t ns)
{
    if (sm->n == sm->cap) {
        sm->cap = sm->cap ? sm->cap * 2 : 1024;
        sm->ns = xrealloc(sm->ns, sm->cap * sizeof(*sm->ns));
    }
    sm->ns[sm->n++] = ns;
}

static void samples_merge(struct samples *into, const struct samples *from)
{
    for (size_t i = 0; i < from->n; i++)
        samples_add(into, from->ns[i]);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* Nearest-rank percentile in ms of sorted samples. */
static double pct_ms(const struct samples *sm, double p)
{
    size_t rank;

    if (sm->n == 0)
        return 0;
    rank = (size_t)((double)sm->n * p / 100.0 + 0.999999999);
    if (rank < 1)
        rank = 1;
    if (rank > sm->n)
        rank = sm->n;
    return (double)sm->ns[rank - 1] / 1e6;
}

static void print_stats(const char *name, struct samples *sm, bool comma)
{
    double sum = 0;

    qsort(sm->ns, sm->n, sizeof(*sm->ns), cmp_i64);
    for (size_t i = 0; i < sm->n; i++)
        sum += (double)sm->ns[i];
    printf("\"%s\":{\"n\":%zu,\"mean_ms\":%.4f,\"min_ms\":%.4f,\"p50_ms\":%.4f,\"p90_ms\":%.4f,"
           "\"p99_ms\":%.4f,\"max_ms\":%.4f}%s",
           name, sm->n, sm->n ? sum / (double)sm->n / 1e6 : 0.0, pct_ms(sm, 0), pct_ms(sm, 50),
           pct_ms(sm, 90), pct_ms(sm, 99), pct_ms(sm, 100), comma ? "," : "");
}

static void note_error(struct session *s, const char *fmt, const char *detail)
{
    struct thread *th = s->th;

    th->errors++;
    if (th->nfirst < ERRORS_SHOWN) {
        snprintf(th->first_errors[th->nfirst], sizeof(th->first_errors[0]), "session %u: %s %.160s",
                 s->index, fmt, detail ? detail : "");
        th->nfirst++;
    }
}

static void push_msg(struct session *s, const char *text)
{
    if (s->nmsgs == s->cap_msgs) {
        s->cap_msgs = s->cap_msgs ? s->cap_msgs * 2 : 8;
        s->msgs = xrealloc(s->msgs, s->cap_msgs * sizeof(*s->msgs));
    }
    s->msgs[s->nmsgs++] = util_xstrdup(text);
}

static void clear_msgs(struct session *s)
{
    for (size_t i = 0; i < s->nmsgs; i++)
        free(s->msgs[i]);
    s->nmsgs = 0;
}

/* Unescape the JSON string starting right after its opening quote; NULL if malformed. */
static char *json_unescape(const char *p)
{
    struct sbuf out;

    sb_init(&out, LINE_MAX_BYTES);
    sb_add(&out, "", 0);
    for (; *p && *p != '"'; p++) {
        char c = *p;

        if (c == '\\') {
            p++;
            switch (*p) {
            case 'n':
                c = '\n';
                break;
            case 't':
                c = '\t';
                break;
            case 'r':
                c = '\r';
                break;
            case 'b':
                c = '\b';
                break;
            case 'f':
                c = '\f';
                break;
            case 'u': {
                unsigned v = 0;
                for (int i = 1; i <= 4; i++) {
                    char h = p[i];
                    if (!h)
                        goto bad;
                    v = v * 16 + (unsigned)(h >= 'a' ? h - 'a' + 10 : h >= 'A' ? h - 'A' + 10
                                                                                : h - '0');
                }
                p += 4;
                c = (char)(v < 0x80 ? v : '?'); /* only ASCII is expected from the scripted agent */
                break;
            }
            case '\0':
                goto bad;
            default:
                c = *p; /* \" \\ \/ */
                break;
            }
        }
        if (sb_add(&out, &c, 1) < 0)
            goto bad;
    }
    if (*p != '"')
        goto bad;
    return out.p;
bad:
    free(out.p);
    return NULL;
}

static void on_line(struct session *s, const char *line)
{
    const char *res, *ok, *out;

    if (strncmp(line, "{\"kind\":\"event\"", 15) == 0) {
        if (!s->t_ready && strstr(line, "\"phase\":\"environment_ready\""))
            s->t_ready = util_now_ns();
        else if (!s->t_delta && strstr(line, "\"type\":\"message_delta\""))
            s->t_delta = util_now_ns();
        return;
    }
    if (strncmp(line, "{\"kind\":\"result\"", 16) != 0)
        return;
    s->t_result = util_now_ns();
    s->got_result = true;
    res = strstr(line, "\"result\":{");
    ok = res ? strstr(res, "\"ok\":true") : NULL;
    s->result_ok = ok && ok == res + 10; /* "ok" is the first member of the result */
    out = strstr(line, "\"output\":\"");
    free(s->output);
    s->output = out ? json_unescape(out + 10) : NULL;
    out = strstr(line, "\"error\":\"");
    free(s->error);
    s->error = out ? json_unescape(out + 9) : NULL;
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *ctx)
{
    struct session *s = ctx;
    size_t n = size * nmemb, start = 0;

    for (size_t i = 0; i < n; i++) {
        if (data[i] != '\n')
            continue;
        if (sb_add(&s->line, data + start, i - start) < 0)
            return 0; /* a line past the cap: abort the transfer, counted as an error */
        on_line(s, s->line.p ? s->line.p : "");
        s->line.len = 0;
        start = i + 1;
    }
    if (start < n && sb_add(&s->line, data + start, n - start) < 0)
        return 0;
    return n;
}

static void add_common(struct sbuf *b, const struct session *s)
{
    sb_str(b, "{\"harness\":\"scripted\"");
    if (!s->th->o->cold) {
        sb_str(b, ",\"projectId\":\"bench\",\"sessionId\":");
        sb_json_str(b, s->sid);
    }
}

/* s is the --alternate session (its turns go to the second stack). */
static bool on_alt(const struct session *s)
{
    return s->th->o->alt_url && s->index % 2 == 1;
}

/* Build the next request of s and hand it to curl. */
static void start_turn(struct session *s)
{
    struct thread *th = s->th;
    const struct opts *o = th->o;
    struct sbuf *b = &s->body;

    b->len = 0;
    s->line.len = 0;
    s->got_result = s->result_ok = false;
    s->t_ready = s->t_delta = 0;
    free(s->output);
    s->output = NULL;
    free(s->error);
    s->error = NULL;
    if (s->phase == PH_KILL) {
        sb_str(b, "{\"projectId\":\"bench\",\"sessionId\":");
        sb_json_str(b, s->sid);
        sb_str(b, "}");
        curl_easy_setopt(s->easy, CURLOPT_URL, on_alt(s) ? o->alt_kill_url : o->kill_url);
    } else {
        /* several hosts: a session made on one member, its warm turns sent to another */
        curl_easy_setopt(s->easy, CURLOPT_URL,
                         on_alt(s)                                 ? o->alt_url
                         : s->phase == PH_COLD_SETUP && o->setup_url ? o->setup_url
                                                                     : o->url);
        snprintf(s->text, sizeof(s->text), "%s s%u turn %u", o->prefix, s->index, ++s->seq);
        s->followup = false;
        if (s->phase == PH_COLD_SETUP || o->cold) {
            clear_msgs(s);
        } else if (s->chain_pos < o->chain && s->nmsgs >= 2 && s->nmsgs % 2 == 0) {
            s->followup = true;
            s->chain_pos++;
        } else {
            clear_msgs(s); /* re-anchor: a one-message warm turn */
            s->chain_pos = 0;
        }
        push_msg(s, s->text);
        add_common(b, s);
        sb_str(b, ",\"messages\":[");
        for (size_t i = 0; i < s->nmsgs; i++) {
            sb_str(b, i ? ",{\"role\":" : "{\"role\":");
            sb_str(b, i % 2 == 0 ? "\"user\"" : "\"assistant\"");
            sb_str(b, ",\"content\":");
            if (sb_json_str(b, s->msgs[i]) < 0)
                die("request body too large");
            sb_str(b, "}");
        }
        sb_str(b, "]}");
    }
    curl_easy_setopt(s->easy, CURLOPT_POSTFIELDSIZE, (long)b->len);
    curl_easy_setopt(s->easy, CURLOPT_POSTFIELDS, b->p);
    s->t0 = util_now_ns();
    if (curl_multi_add_handle(th->multi, s->easy) != CURLM_OK)
        die("curl_multi_add_handle failed");
    th->active++;
}

/* A transfer of s ended with rc: check it, record it, and start the next one if due. */
static void finish_turn(struct session *s, CURLcode rc)
{
    struct thread *th = s->th;
    const struct opts *o = th->o;
    char expect[TEXT_MAX + 32];
    long status = 0, conns = 0;
    bool good = true;
    unsigned k;

    curl_multi_remove_handle(th->multi, s->easy);
    th->active--;
    curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(s->easy, CURLINFO_NUM_CONNECTS, &conns);
    if (s->phase == PH_KILL) {
        if (rc != CURLE_OK || status != 200)
            note_error(s, "kill failed", curl_easy_strerror(rc));
        s->phase = PH_DONE;
        return;
    }
    if (s->phase == PH_MEASURE)
        th->new_connections += (uint64_t)conns;
    snprintf(expect, sizeof(expect), "echo[%u]: %s", s->echo_next, s->text);
    if (rc != CURLE_OK) {
        note_error(s, "transfer failed:", curl_easy_strerror(rc));
        good = false;
    } else if (status != 200) {
        char st[32];
        snprintf(st, sizeof(st), "%ld", status);
        note_error(s, "http status", st);
        good = false;
    } else if (!s->got_result) {
        note_error(s, "no result record", NULL);
        good = false;
    } else if (!s->result_ok) {
        note_error(s, "result not ok:", s->error ? s->error : s->output);
        good = false;
    } else if (!s->output || strcmp(s->output, expect) != 0) {
        note_error(s, "unexpected output:", s->output ? s->output : "(none)");
        good = false;
    }
    if (s->phase == PH_MEASURE || o->cold) {
        th->turns++;
        if (good) {
            int64_t ns = s->t_result - s->t0;
            if (on_alt(s)) {
                samples_add(&th->alt, ns);
                goto next;
            }
            samples_add(&th->all, ns);
            samples_add(s->followup ? &th->follow : &th->anchor, ns);
            if (s->t_ready)
                samples_add(&th->ready, s->t_ready - s->t0);
            if (s->t_delta)
                samples_add(&th->delta, s->t_delta - s->t0);
        }
    }
next:
    /* follow the agent's own count, so one bad turn does not fail every later one */
    if (s->output && sscanf(s->output, "echo[%u]", &k) == 1)
        s->echo_next = k + 1;
    else
        s->echo_next++;
    if (o->cold)
        s->echo_next = 1;
    push_msg(s, s->output ? s->output : "");
    s->turns_done++;
    if (s->phase == PH_COLD_SETUP) {
        s->turns_done = 0;
        return; /* the measured phase starts once every session is warm */
    }
    if (o->alt_url && s->phase == PH_MEASURE) {
        /* the other's turn, every --block turns */
        struct session *n = s->turns_done % o->block == 0 || s->turns_done >= o->turns
                                ? &th->s[(size_t)(s - th->s + 1) % th->ns]
                                : s;
        if (n->turns_done < o->turns)
            start_turn(n);
        else if (s->turns_done < o->turns)
            start_turn(s);
        return;
    }
    if (s->turns_done < o->turns)
        start_turn(s);
}

static void run_loop(struct thread *th)
{
    while (th->active > 0) {
        CURLMsg *m;
        int running, left;

        if (curl_multi_perform(th->multi, &running) != CURLM_OK)
            die("curl_multi_perform failed");
        while ((m = curl_multi_info_read(th->multi, &left)) != NULL) {
            struct session *s = NULL;
            if (m->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&s);
            finish_turn(s, m->data.result);
        }
        if (th->active > 0 && curl_multi_poll(th->multi, NULL, 0, 1000, NULL) != CURLM_OK)
            die("curl_multi_poll failed");
    }
}

static void *thread_main(void *arg)
{
    struct thread *th = arg;
    const struct opts *o = th->o;

    if (!o->cold) {
        for (size_t i = 0; i < th->ns; i++) {
            th->s[i].phase = PH_COLD_SETUP;
            start_turn(&th->s[i]);
        }
        run_loop(th);
    }
    pthread_barrier_wait(&barrier);
    if (th->id == 0) {
        fprintf(stderr, "loadgen: measuring\n"); /* run.py takes its CPU snapshots here */
        fflush(stderr);
        t_measure_start = util_now_ns();
    }
    pthread_barrier_wait(&barrier);
    for (size_t i = 0; i < th->ns; i++) {
        th->s[i].phase = PH_MEASURE;
        if (o->turns > 0 && (!o->alt_url || i == 0)) /* alternating: one turn at a time */
            start_turn(&th->s[i]);
    }
    run_loop(th);
    pthread_barrier_wait(&barrier);
    if (th->id == 0) {
        t_measure_end = util_now_ns();
        fprintf(stderr, "loadgen: measured\n");
        fflush(stderr);
    }
    if (!o->cold) {
        for (size_t i = 0; i < th->ns; i++) {
            th->s[i].phase = PH_KILL;
            start_turn(&th->s[i]);
        }
        run_loop(th);
    }
    return NULL;
}

static unsigned parse_unsigned(const char *name, const char *v, unsigned min, unsigned max)
{
    char *end;
    unsigned long n;

    errno = 0;
    n = strtoul(v, &end, 10);
    if (errno || end == v || *end || n < min || n > max) {
        fprintf(stderr, "loadgen: %s must be an integer in [%u, %u]\n", name, min, max);
        exit(2);
    }
    return (unsigned)n;
}

static void usage(void)
{
    fprintf(stderr, "usage: loadgen --url https://127.0.0.1:PORT/run --token T [--sessions N] "
                    "[--turns N] [--threads N] [--chain N] [--cold] [--prefix P] "
                    "[--setup-url URL] [--alternate URL [--block N]]\n");
    exit(2);
}

static void setup_session(struct session *s, struct thread *th, unsigned index)
{
    const struct opts *o = th->o;
    char auth[512];

    memset(s, 0, sizeof(*s));
    s->th = th;
    s->index = index;
    s->echo_next = 1;
    snprintf(s->sid, sizeof(s->sid), "%s-%u", o->prefix, index);
    sb_init(&s->body, BODY_MAX);
    sb_init(&s->line, LINE_MAX_BYTES);
    s->easy = curl_easy_init();
    if (!s->easy)
        die("curl_easy_init failed");
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", o->token);
    s->headers = curl_slist_append(s->headers, auth);
    s->headers = curl_slist_append(s->headers, "Accept: application/x-ndjson");
    s->headers = curl_slist_append(s->headers, "Content-Type: application/json");
    s->headers = curl_slist_append(s->headers, "Expect:"); /* no 100-continue round trip */
    curl_easy_setopt(s->easy, CURLOPT_URL, o->url);
    curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, s->headers);
    curl_easy_setopt(s->easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(s->easy, CURLOPT_SSL_VERIFYPEER, 0L); /* the stack's self-signed cert */
    curl_easy_setopt(s->easy, CURLOPT_SSL_VERIFYHOST, 0L);
    curl_easy_setopt(s->easy, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->easy, CURLOPT_PRIVATE, (char *)s);
    curl_easy_setopt(s->easy, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(s->easy, CURLOPT_NOSIGNAL, 1L);
}

int main(int argc, char **argv)
{
    struct opts o = {
        .sessions = 1, .turns = 100, .threads = 1, .chain = 1, .block = 1, .prefix = NULL};
    struct samples all = {0}, follow = {0}, anchor = {0}, ready = {0}, delta = {0}, alt = {0};
    struct thread *threads;
    struct session *sessions;
    uint64_t errors = 0, conns = 0, turns = 0;
    char prefix[64];
    double secs;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--cold") == 0) {
            o.cold = true;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (strcmp(a, "--url") == 0)
            o.url = v;
        else if (strcmp(a, "--setup-url") == 0)
            o.setup_url = v;
        else if (strcmp(a, "--alternate") == 0)
            o.alt_url = v;
        else if (strcmp(a, "--block") == 0)
            o.block = parse_unsigned(a, v, 1, 1000000);
        else if (strcmp(a, "--token") == 0)
            o.token = v;
        else if (strcmp(a, "--prefix") == 0)
            o.prefix = v;
        else if (strcmp(a, "--sessions") == 0)
            o.sessions = parse_unsigned(a, v, 1, 100000);
        else if (strcmp(a, "--turns") == 0)
            o.turns = parse_unsigned(a, v, 0, 10000000);
        else if (strcmp(a, "--threads") == 0)
            o.threads = parse_unsigned(a, v, 1, 256);
        else if (strcmp(a, "--chain") == 0)
            o.chain = parse_unsigned(a, v, 0, 100000);
        else
            usage();
    }
    if (!o.url || !o.token || strlen(o.url) > 900 || !strrchr(o.url, '/'))
        usage();
    snprintf(o.kill_url, sizeof(o.kill_url), "%.*s/kill", (int)(strrchr(o.url, '/') - o.url),
             o.url);
    if (o.alt_url) {
        if (strlen(o.alt_url) > 900 || !strrchr(o.alt_url, '/') || o.cold)
            usage();
        snprintf(o.alt_kill_url, sizeof(o.alt_kill_url), "%.*s/kill",
                 (int)(strrchr(o.alt_url, '/') - o.alt_url), o.alt_url);
        o.sessions = 2;
        o.threads = 1;
    }
    if (!o.prefix) {
        snprintf(prefix, sizeof(prefix), "lg%ld", (long)getpid());
        o.prefix = prefix;
    }
    if (o.threads > o.sessions)
        o.threads = o.sessions;
    if (curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK)
        die("curl_global_init failed");
    threads = calloc(o.threads, sizeof(*threads));
    sessions = calloc(o.sessions, sizeof(*sessions));
    if (!threads || !sessions)
        die("out of memory");
    for (unsigned t = 0; t < o.threads; t++) {
        struct thread *th = &threads[t];
        unsigned first = (unsigned)((uint64_t)o.sessions * t / o.threads);
        unsigned last = (unsigned)((uint64_t)o.sessions * (t + 1) / o.threads);

        th->o = &o;
        th->id = t;
        th->multi = curl_multi_init();
        if (!th->multi)
            die("curl_multi_init failed");
        /* keep every session's connection: one per session */
        curl_multi_setopt(th->multi, CURLMOPT_MAXCONNECTS, (long)(last - first) + 4);
        th->s = &sessions[first];
        th->ns = last - first;
        for (unsigned i = first; i < last; i++)
            setup_session(&sessions[i], th, i);
    }
    if (pthread_barrier_init(&barrier, NULL, o.threads) != 0)
        die("pthread_barrier_init failed");
    for (unsigned t = 0; t < o.threads; t++)
        if (pthread_create(&threads[t].tid, NULL, thread_main, &threads[t]) != 0)
            die("pthread_create failed");
    for (unsigned t = 0; t < o.threads; t++)
        pthread_join(threads[t].tid, NULL);

    for (unsigned t = 0; t < o.threads; t++) {
        samples_merge(&all, &threads[t].all);
        samples_merge(&follow, &threads[t].follow);
        samples_merge(&anchor, &threads[t].anchor);
        samples_merge(&ready, &threads[t].ready);
        samples_merge(&delta, &threads[t].delta);
        samples_merge(&alt, &threads[t].alt);
        errors += threads[t].errors;
        conns += threads[t].new_connections;
        turns += threads[t].turns;
        for (unsigned e = 0; e < threads[t].nfirst; e++)
            fprintf(stderr, "loadgen: error: %s\n", threads[t].first_errors[e]);
    }
    secs = (double)(t_measure_end - t_measure_start) / 1e9;
    printf("{\"mode\":\"%s\",\"sessions\":%u,\"turns_per_session\":%u,\"threads\":%u,"
           "\"chain\":%u,\"turns\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"new_connections\":%" PRIu64
           ",\"elapsed_s\":%.4f,\"turns_per_s\":%.1f,",
           o.cold ? "cold" : "warm", o.sessions, o.turns, o.threads, o.chain, turns, errors, conns,
           secs, secs > 0 ? (double)turns / secs : 0.0);
    print_stats("all", &all, true);
    print_stats("followup", &follow, true);
    print_stats("anchor", &anchor, true);
    print_stats("environment_ready", &ready, true);
    print_stats("first_delta", &delta, !!o.alt_url);
    if (o.alt_url)
        print_stats("alternate", &alt, false);
    printf("}\n");

    for (unsigned i = 0; i < o.sessions; i++) {
        struct session *s = &sessions[i];
        clear_msgs(s);
        free(s->msgs);
        free(s->body.p);
        free(s->line.p);
        free(s->output);
        free(s->error);
        curl_slist_free_all(s->headers);
        curl_easy_cleanup(s->easy);
    }
    for (unsigned t = 0; t < o.threads; t++) {
        curl_multi_cleanup(threads[t].multi);
        free(threads[t].all.ns);
        free(threads[t].follow.ns);
        free(threads[t].anchor.ns);
        free(threads[t].ready.ns);
        free(threads[t].delta.ns);
        free(threads[t].alt.ns);
    }
    free(all.ns);
    free(follow.ns);
    free(anchor.ns);
    free(ready.ns);
    free(delta.ns);
    free(alt.ns);
    free(threads);
    free(sessions);
    curl_global_cleanup();
    return errors ? 1 : 0;
}
