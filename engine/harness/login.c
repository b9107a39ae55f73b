/* login — the operator's harness logins (login.h). */
#include "harness/login.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "base/jsonx.h"
#include "base/log.h"
#include "base/util.h"

#define LOGIN_JSON_DEPTH 32

const char *login_state_name(enum login_state s)
{
    switch (s) {
    case LOGIN_READY:
        return "ready";
    case LOGIN_NOT_CONFIGURED:
        return "not_configured";
    case LOGIN_MISSING:
        return "login_missing";
    case LOGIN_UNUSABLE:
        return "login_unusable";
    case LOGIN_UNSUPPORTED:
        return "unsupported";
    }
    return "unsupported";
}

/* An absent folder or file is a missing login; any other failure is an unusable one. */
static enum login_state state_of_errno(int e)
{
    return e == ENOENT || e == ENOTDIR ? LOGIN_MISSING : LOGIN_UNUSABLE;
}

/* The whole of fd, a regular file of 1..LOGIN_FILE_MAX bytes, into a new buffer. */
static enum login_state read_login_fd(int fd, char **ret_data, size_t *ret_len)
{
    struct stat st;
    size_t len = 0, cap;
    char *data;

    if (fstat(fd, &st) == -1)
        return LOGIN_UNUSABLE;
    if (!S_ISREG(st.st_mode) || st.st_size <= 0 || (uint64_t)st.st_size > LOGIN_FILE_MAX)
        return LOGIN_UNUSABLE;
    cap = (size_t)st.st_size + 1; /* a file that grows while read is cut at the cap: unusable */
    data = malloc(cap + 1);
    if (!data)
        return LOGIN_UNUSABLE;
    for (;;) {
        ssize_t n = read(fd, data + len, cap - len);
        if (n == -1 && errno == EINTR)
            continue;
        if (n < 0 || (n > 0 && len + (size_t)n >= cap)) {
            OPENSSL_cleanse(data, cap + 1);
            free(data);
            return LOGIN_UNUSABLE;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    if (len == 0) {
        free(data);
        return LOGIN_UNUSABLE;
    }
    data[len] = '\0';
    *ret_data = data;
    *ret_len = len;
    return LOGIN_READY;
}

enum login_state login_read(const char *dir, const char *name, json_object **ret_doc)
{
    enum login_state s;
    json_object *doc = NULL;
    char jerr[128], *data = NULL;
    size_t len = 0;
    int dfd, fd;

    if (!dir || !dir[0])
        return LOGIN_NOT_CONFIGURED;
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd == -1)
        return state_of_errno(errno);
    /* O_NONBLOCK: a FIFO planted as the login must not hang the request */
    fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd == -1) {
        s = state_of_errno(errno);
        close(dfd);
        return s;
    }
    close(dfd);
    s = read_login_fd(fd, &data, &len);
    close(fd);
    if (s != LOGIN_READY)
        return s;
    if (jsonx_parse(data, len, LOGIN_JSON_DEPTH, &doc, jerr, sizeof(jerr)) < 0)
        doc = NULL; /* the parser's message may quote the file: dropped */
    OPENSSL_cleanse(data, len);
    free(data);
    if (!doc || !json_object_is_type(doc, json_type_object) ||
        json_object_object_length(doc) == 0) {
        json_object_put(doc);
        return LOGIN_UNUSABLE;
    }
    *ret_doc = doc;
    return LOGIN_READY;
}

/* ---- GET /subscription-status ------------------------------------------------------------ */

/*
 * pi's auth.json maps pi provider ids to logins; the ids pi writes for its subscription
 * (OAuth) logins, as provider families. Anything else (API keys, other providers) is not named.
 */
static const struct {
    const char *pi_id;
    const char *family;
} pi_families[] = {{"anthropic", "anthropic"}, {"openai-codex", "openai"}};

static bool pi_is_oauth(json_object *entry)
{
    const char *type = jsonx_str(entry, "type");

    if (type)
        return strcmp(type, "oauth") == 0;
    return jsonx_str(entry, "access") && jsonx_str(entry, "refresh");
}

/* The sorted, distinct families of doc's subscription logins (NULL when there are none). */
static json_object *pi_providers(json_object *doc)
{
    bool seen[ARRAY_SIZE(pi_families)] = {false};
    const char *names[ARRAY_SIZE(pi_families)];
    size_t n = 0;
    json_object *arr;

    for (size_t i = 0; i < ARRAY_SIZE(pi_families); i++)
        if (pi_is_oauth(jsonx_get(doc, pi_families[i].pi_id)))
            seen[i] = true;
    for (size_t i = 0; i < ARRAY_SIZE(pi_families); i++) {
        bool dup = false;
        if (!seen[i])
            continue;
        for (size_t j = 0; j < n; j++)
            dup = dup || strcmp(names[j], pi_families[i].family) == 0;
        if (!dup)
            names[n++] = pi_families[i].family;
    }
    if (n == 0)
        return NULL;
    /* insertion sort: at most a handful of names */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            const char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    arr = json_object_new_array();
    for (size_t i = 0; arr && i < n; i++)
        json_object_array_add(arr, json_object_new_string(names[i]));
    return arr;
}

struct probe {
    const char *harness; /* the wire name */
    const char *dir;     /* NULL: this runner cannot use a login for the harness */
    const char *file;
    const char *provider; /* the harness's one provider family, or NULL (pi) */
    bool pi;
};

static json_object *probe_status(const struct probe *p)
{
    json_object *o = json_object_new_object(), *doc = NULL, *providers;
    enum login_state s = LOGIN_UNSUPPORTED;

    if (!o)
        return NULL;
    if (p->file)
        s = login_read(p->dir, p->file, &doc);
    json_object_object_add(o, "state", json_object_new_string(login_state_name(s)));
    if (p->provider)
        json_object_object_add(o, "provider", json_object_new_string(p->provider));
    if (p->pi && s == LOGIN_READY) {
        providers = pi_providers(doc);
        if (providers)
            json_object_object_add(o, "providers", providers);
    }
    json_object_put(doc);
    return o;
}

json_object *login_status(const struct login_dirs *dirs)
{
    const struct probe probes[] = {
        {"codex", dirs->codex_home, "auth.json", "openai", false},
        {"claude", dirs->claude_config_dir, ".credentials.json", "anthropic", false},
        /* pi_core and pi_agenta both run pi: one login, reported for each name */
        {"pi_core", dirs->pi_agent_dir, "auth.json", NULL, true},
        {"pi_agenta", dirs->pi_agent_dir, "auth.json", NULL, true},
        {"opencode", NULL, NULL, NULL, false},
    };
    json_object *o = json_object_new_object(), *h = json_object_new_object();

    if (!o || !h) {
        json_object_put(o);
        json_object_put(h);
        return NULL;
    }
    json_object_object_add(o, "version", json_object_new_int(LOGIN_STATUS_VERSION));
    for (size_t i = 0; i < ARRAY_SIZE(probes); i++) {
        json_object *one = probe_status(&probes[i]);
        if (!one) {
            json_object_put(h);
            json_object_put(o);
            return NULL;
        }
        json_object_object_add(h, probes[i].harness, one);
    }
    json_object_object_add(o, "harnesses", h);
    return o;
}

/* ---- what a run does with a login ---------------------------------------------------------- */

void login_redact(json_object *doc)
{
    if (json_object_is_type(doc, json_type_string)) {
        if (json_object_get_string_len(doc) >= 8)
            log_redact_add(json_object_get_string(doc));
    } else if (json_object_is_type(doc, json_type_object)) {
        json_object_object_foreach(doc, k, v)
        {
            (void)k;
            login_redact(v);
        }
    } else if (json_object_is_type(doc, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(doc); i++)
            login_redact(json_object_array_get_idx(doc, i));
    }
}

int login_epoch_mix(const uint8_t key[32], uint8_t epoch[32], const uint8_t digest[32])
{
    uint8_t in[64], out[EVP_MAX_MD_SIZE];
    unsigned int n = 0;

    memcpy(in, epoch, 32);
    memcpy(in + 32, digest, 32);
    if (!HMAC(EVP_sha256(), key, 32, in, sizeof(in), out, &n) || n != 32)
        return -EIO;
    memcpy(epoch, out, 32);
    return 0;
}
