/*
 * kept — the store of harnesses' own session state (kept.h).
 */
#include "session/kept.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "harness/harness.h"

#define MAGIC "agent-runner-kept 1 "
#define MAGIC_LEN (sizeof(MAGIC) - 1)
#define HEX_LEN (2 * IDENTITY_DIGEST_LEN)
#define HEADER_LEN (MAGIC_LEN + HEX_LEN + 1)
#define META_LINE_MAX 4096
#define FILE_LINE_MAX (KEPT_PATH_MAX + 128)
/* what a state's file holds besides its files' bytes: header, meta, one line per file */
#define OVERHEAD_MAX (HEADER_LEN + META_LINE_MAX + KEPT_FILES_MAX * (FILE_LINE_MAX + 1))
#define TMP_PREFIX ".tmp-"
#define TMP_STALE_S 60
#define PATH_MAX_KEPT 512

void kept_state_init(struct kept_state *st)
{
    memset(st, 0, sizeof(*st));
}

void kept_state_release(struct kept_state *st)
{
    for (size_t i = 0; i < st->nfiles; i++) {
        free(st->files[i].path);
        free(st->files[i].data);
    }
    free(st->files);
    kept_state_init(st);
}

bool kept_path_ok(const char *path)
{
    const char *p = path;

    if (!path || !path[0] || path[0] == '/' || strlen(path) >= KEPT_PATH_MAX)
        return false;
    for (const unsigned char *c = (const unsigned char *)path; *c; c++)
        if (*c < 0x20 || *c == 0x7f || *c == '\\')
            return false;
    while (*p) {
        size_t n = strcspn(p, "/");

        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        p += n;
        if (*p == '/' && !*++p)
            return false; /* a trailing slash names no file */
    }
    return true;
}

int kept_state_adopt(struct kept_state *st, const char *path, uint8_t *data, size_t size)
{
    struct kept_file *grown;
    char *copy;

    if (!kept_path_ok(path))
        return -EINVAL;
    if (st->nfiles >= KEPT_FILES_MAX)
        return -E2BIG;
    copy = strdup(path);
    grown = copy ? realloc(st->files, (st->nfiles + 1) * sizeof(*grown)) : NULL;
    if (!grown) {
        free(copy);
        return -ENOMEM;
    }
    st->files = grown;
    st->files[st->nfiles++] = (struct kept_file){.path = copy, .data = data, .size = size};
    st->bytes += size;
    return 0;
}

int kept_state_add(struct kept_state *st, const char *path, const void *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    int r;

    if (!copy)
        return -ENOMEM;
    if (size)
        memcpy(copy, data, size);
    r = kept_state_adopt(st, path, copy, size);
    if (r < 0)
        free(copy);
    return r;
}

static int sha256(const void *data, size_t len, uint8_t ret[IDENTITY_DIGEST_LEN])
{
    unsigned int n = 0;

    if (EVP_Digest(data, len, ret, &n, EVP_sha256(), NULL) != 1 || n != IDENTITY_DIGEST_LEN)
        return -EIO;
    return 0;
}

static int hex_decode(const char *hex, size_t len, uint8_t *out, size_t outlen)
{
    if (!hex || len != 2 * outlen)
        return -EINVAL;
    for (size_t i = 0; i < outlen; i++) {
        int v = 0;

        for (int k = 0; k < 2; k++) {
            char c = hex[2 * i + (size_t)k];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;

            if (d < 0)
                return -EINVAL;
            v = v * 16 + d;
        }
        out[i] = (uint8_t)v;
    }
    return 0;
}

static void add_hex(json_object *o, const char *name, const uint8_t d[IDENTITY_DIGEST_LEN])
{
    char hex[HEX_LEN + 1];

    util_hex_encode(d, IDENTITY_DIGEST_LEN, hex);
    json_object_object_add(o, name, json_object_new_string(hex));
}

/* The meta line (without its '\n'). */
static json_object *meta_of(const struct kept_state *st)
{
    json_object *m = json_object_new_object();

    json_object_object_add(m, "harness", json_object_new_string(harness_kind_name(st->harness)));
    json_object_object_add(m, "acpSession", json_object_new_string(st->acp_session));
    add_hex(m, "configFp", st->config_fp);
    add_hex(m, "historyFp", st->history_fp);
    add_hex(m, "userFp", st->user_fp);
    json_object_object_add(m, "savedMs", json_object_new_int64(st->saved_ms));
    json_object_object_add(m, "files", json_object_new_int((int)st->nfiles));
    return m;
}

/*
 * Where an encoded state goes: a buffer (kept_encode) or a file (kept_save, so a big state is
 * never held twice), with the digest of everything after the header computed on the way.
 */
struct sink {
    struct buf *buf;
    int fd;
    EVP_MD_CTX *md;
};

static int sink_put(struct sink *k, const void *data, size_t len)
{
    int r = k->buf ? buf_append(k->buf, data, len) : util_write_all(k->fd, data, len);

    if (r == 0 && EVP_DigestUpdate(k->md, data, len) != 1)
        r = -EIO;
    return r;
}

static int sink_line(struct sink *k, json_object *o)
{
    size_t n;
    const char *text = jsonx_text(o, &n);
    int r = sink_put(k, text, n);

    return r == 0 ? sink_put(k, "\n", 1) : r;
}

/* The body (meta, files) into k; hex receives the digest of it. */
static int emit_body(const struct kept_state *st, struct sink *k, char hex[HEX_LEN + 1])
{
    uint8_t d[IDENTITY_DIGEST_LEN];
    unsigned int n = 0;
    json_object *m = meta_of(st), *f;
    int r;

    if (EVP_DigestInit_ex(k->md, EVP_sha256(), NULL) != 1) {
        json_object_put(m);
        return -EIO;
    }
    r = sink_line(k, m);
    json_object_put(m);
    for (size_t i = 0; r == 0 && i < st->nfiles; i++) {
        f = json_object_new_object();
        json_object_object_add(f, "path", json_object_new_string(st->files[i].path));
        json_object_object_add(f, "size", json_object_new_int64((int64_t)st->files[i].size));
        r = sink_line(k, f);
        json_object_put(f);
        if (r == 0)
            r = sink_put(k, st->files[i].data, st->files[i].size);
        if (r == 0)
            r = sink_put(k, "\n", 1);
    }
    if (r == 0 && (EVP_DigestFinal_ex(k->md, d, &n) != 1 || n != IDENTITY_DIGEST_LEN))
        r = -EIO;
    if (r == 0)
        util_hex_encode(d, sizeof(d), hex);
    return r;
}

/* The header with a placeholder digest (HEADER_LEN bytes), to be filled in once known. */
static const char placeholder[HEADER_LEN + 1] =
    MAGIC "0000000000000000000000000000000000000000000000000000000000000000\n";

int kept_encode(const struct kept_state *st, struct buf *out)
{
    struct sink k = {.buf = out, .fd = -1, .md = EVP_MD_CTX_new()};
    size_t start = out->len;
    char hex[HEX_LEN + 1];
    int r = k.md ? buf_append(out, placeholder, HEADER_LEN) : -ENOMEM;

    if (r == 0)
        r = emit_body(st, &k, hex);
    EVP_MD_CTX_free(k.md);
    if (r < 0) {
        out->len = start;
        return r;
    }
    memcpy(out->data + start + MAGIC_LEN, hex, HEX_LEN);
    return 0;
}

/* One JSON line starting at *pos, at most max bytes: parsed, *pos moved past its '\n'. */
static int take_line(const char *data, size_t len, size_t *pos, size_t max, json_object **ret)
{
    const char *p = data + *pos;
    size_t left = len - *pos;
    const char *nl = memchr(p, '\n', left < max ? left : max);
    char why[64];

    if (!nl)
        return -EBADMSG;
    if (jsonx_parse_once(p, (size_t)(nl - p), 4, ret, why, sizeof(why)) < 0 || !*ret ||
        !json_object_is_type(*ret, json_type_object)) {
        json_object_put(*ret);
        *ret = NULL;
        return -EBADMSG;
    }
    *pos += (size_t)(nl - p) + 1;
    return 0;
}

static int64_t int_member(json_object *o, const char *name, int64_t min, int64_t max)
{
    json_object *v = jsonx_get(o, name);
    int64_t n;

    if (!v || !json_object_is_type(v, json_type_int))
        return -1;
    n = json_object_get_int64(v);
    return n < min || n > max ? -1 : n;
}

static int fp_member(json_object *o, const char *name, uint8_t out[IDENTITY_DIGEST_LEN])
{
    const char *hex = jsonx_str(o, name);

    return hex ? hex_decode(hex, strlen(hex), out, IDENTITY_DIGEST_LEN) : -EINVAL;
}

static int read_meta(json_object *m, struct kept_state *st, int64_t *ret_files)
{
    const char *harness = jsonx_str(m, "harness"), *sid = jsonx_str(m, "acpSession");

    if (!harness || harness_lookup(harness, true, &st->harness) < 0)
        return -EBADMSG;
    if (!sid || !sid[0] || strlen(sid) >= sizeof(st->acp_session) || util_has_ctl(sid))
        return -EBADMSG;
    snprintf(st->acp_session, sizeof(st->acp_session), "%s", sid);
    if (fp_member(m, "configFp", st->config_fp) < 0 ||
        fp_member(m, "historyFp", st->history_fp) < 0 || fp_member(m, "userFp", st->user_fp) < 0)
        return -EBADMSG;
    st->saved_ms = int_member(m, "savedMs", 0, INT64_MAX);
    *ret_files = int_member(m, "files", 0, KEPT_FILES_MAX);
    return st->saved_ms < 0 || *ret_files < 0 ? -EBADMSG : 0;
}

/* The files after the meta line: exactly nfiles of them, then nothing. */
static int read_files(const char *data, size_t len, size_t pos, int64_t nfiles,
                      struct kept_state *st, char *err, size_t errlen)
{
    for (int64_t i = 0; i < nfiles; i++) {
        json_object *f = NULL;
        int64_t size;
        int r;

        if (take_line(data, len, &pos, FILE_LINE_MAX, &f) < 0)
            return util_fail(-EBADMSG, err, errlen, "file %lld: bad header", (long long)i);
        size = int_member(f, "size", 0, (int64_t)(len - pos));
        r = size < 0 || pos + (size_t)size >= len || data[pos + (size_t)size] != '\n'
                ? -EBADMSG
                : kept_state_add(st, jsonx_str(f, "path") ? jsonx_str(f, "path") : "", data + pos,
                                 (size_t)size);
        json_object_put(f);
        if (r < 0)
            return util_fail(-EBADMSG, err, errlen, "file %lld: %s", (long long)i,
                             r == -EINVAL ? "bad path" : "runs past the end");
        pos += (size_t)size + 1;
    }
    if (pos != len)
        return util_fail(-EBADMSG, err, errlen, "bytes left after the last file");
    return 0;
}

int kept_decode(const void *data, size_t len, struct kept_state *ret, char *err, size_t errlen)
{
    const char *text = data;
    uint8_t want[IDENTITY_DIGEST_LEN], got[IDENTITY_DIGEST_LEN];
    struct kept_state st;
    json_object *meta = NULL;
    int64_t nfiles = 0;
    size_t pos = HEADER_LEN;
    int r;

    if (len < HEADER_LEN || memcmp(text, MAGIC, MAGIC_LEN) != 0 || text[HEADER_LEN - 1] != '\n' ||
        hex_decode(text + MAGIC_LEN, HEX_LEN, want, sizeof(want)) < 0)
        return util_fail(-EBADMSG, err, errlen, "not a kept state (no header)");
    if (sha256(text + HEADER_LEN, len - HEADER_LEN, got) < 0)
        return util_fail(-EIO, err, errlen, "cannot digest the state");
    if (memcmp(want, got, sizeof(got)) != 0)
        return util_fail(-EBADMSG, err, errlen, "digest mismatch (truncated or altered)");
    kept_state_init(&st);
    r = take_line(text, len, &pos, META_LINE_MAX, &meta);
    if (r == 0)
        r = read_meta(meta, &st, &nfiles);
    json_object_put(meta);
    if (r < 0) {
        kept_state_release(&st);
        return util_fail(-EBADMSG, err, errlen, "bad meta line");
    }
    r = read_files(text, len, pos, nfiles, &st, err, errlen);
    if (r < 0) {
        kept_state_release(&st);
        return r;
    }
    *ret = st;
    return 0;
}

/* ---- the store ----------------------------------------------------------------------------- */

static int store_dir(const char *state_dir, char *out, size_t outlen)
{
    if ((size_t)snprintf(out, outlen, "%s/" KEPT_DIR, state_dir) >= outlen)
        return -ENAMETOOLONG;
    return 0;
}

int kept_path(const char *state_dir, const char *key, char *out, size_t outlen)
{
    uint8_t d[IDENTITY_DIGEST_LEN];
    char hex[HEX_LEN + 1];
    int r = sha256(key, strlen(key), d);

    if (r < 0)
        return r;
    util_hex_encode(d, sizeof(d), hex);
    if ((size_t)snprintf(out, outlen, "%s/" KEPT_DIR "/%s", state_dir, hex) >= outlen)
        return -ENAMETOOLONG;
    return 0;
}

/* A state's file name: exactly 64 lower-case hex digits. */
static bool state_name(const char *name)
{
    uint8_t d[IDENTITY_DIGEST_LEN];

    return strlen(name) == HEX_LEN && hex_decode(name, HEX_LEN, d, sizeof(d)) == 0;
}

struct entry {
    char name[HEX_LEN + 1];
    int64_t mtime_ns;
    uint64_t size;
};

static int by_mtime(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;

    return x->mtime_ns < y->mtime_ns ? -1 : x->mtime_ns > y->mtime_ns;
}

/*
 * One pass over the store: temporary files left by a crash and (ttl_cut_ns > 0) states last
 * used before that time removed; the rest, when they add up to more than total, evicted
 * oldest first, never `keep` (the one just saved). How many were removed.
 */
static int tidy(const char *dir, uint64_t total, int64_t ttl_cut_ns, int64_t now_ns,
                const char *keep)
{
    struct entry *v = NULL;
    size_t n = 0, cap = 0;
    uint64_t sum = 0;
    struct dirent *de;
    struct stat st;
    int removed = 0, dfd;
    DIR *d = opendir(dir);

    if (!d)
        return errno == ENOENT ? 0 : -errno;
    dfd = dirfd(d);
    while ((de = readdir(d)) && n < KEPT_SCAN_MAX) {
        int64_t mt;

        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == -1 || !S_ISREG(st.st_mode))
            continue;
        mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        if (strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0) {
            if (mt < now_ns - (int64_t)TMP_STALE_S * 1000000000 &&
                unlinkat(dfd, de->d_name, 0) == 0)
                removed++;
            continue;
        }
        if (!state_name(de->d_name))
            continue;
        if (ttl_cut_ns > 0 && mt < ttl_cut_ns && (!keep || strcmp(keep, de->d_name) != 0)) {
            if (unlinkat(dfd, de->d_name, 0) == 0)
                removed++;
            continue;
        }
        if (n == cap) {
            struct entry *g = realloc(v, (cap ? cap * 2 : 64) * sizeof(*v));
            if (!g)
                break;
            v = g;
            cap = cap ? cap * 2 : 64;
        }
        memcpy(v[n].name, de->d_name, HEX_LEN); /* state_name: exactly HEX_LEN */
        v[n].name[HEX_LEN] = '\0';
        v[n].mtime_ns = mt;
        v[n].size = (uint64_t)st.st_size;
        sum += v[n].size;
        n++;
    }
    if (sum > total && n > 0)
        qsort(v, n, sizeof(*v), by_mtime);
    for (size_t i = 0; sum > total && i < n; i++) {
        if (keep && strcmp(keep, v[i].name) == 0)
            continue;
        if (unlinkat(dfd, v[i].name, 0) == 0) {
            sum -= v[i].size;
            removed++;
        }
    }
    free(v);
    closedir(d);
    return removed;
}

/* st encoded into dir/<tmp>, renamed to path: durable and atomic, never held in memory twice. */
static int write_atomic(const char *dir, const char *path, const struct kept_state *st, char *err,
                        size_t errlen)
{
    struct sink k = {.buf = NULL, .fd = -1, .md = EVP_MD_CTX_new()};
    char tmp[PATH_MAX_KEPT], rnd[17], hex[HEX_LEN + 1];
    int dfd, r;

    r = k.md ? util_random_hex(rnd, 8) : -ENOMEM;
    if (r < 0 || (size_t)snprintf(tmp, sizeof(tmp), "%s/" TMP_PREFIX "%s", dir, rnd) >=
                     sizeof(tmp)) {
        EVP_MD_CTX_free(k.md);
        return util_fail(r < 0 ? r : -ENAMETOOLONG, err, errlen, "cannot name a temporary file");
    }
    k.fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (k.fd == -1) {
        r = -errno;
        EVP_MD_CTX_free(k.md);
        return util_fail(r, err, errlen, "cannot create the temporary file: %s", strerror(-r));
    }
    r = util_write_all(k.fd, placeholder, HEADER_LEN);
    if (r == 0)
        r = emit_body(st, &k, hex);
    if (r == 0 && pwrite(k.fd, hex, HEX_LEN, (off_t)MAGIC_LEN) != (ssize_t)HEX_LEN)
        r = -EIO;
    if (r == 0 && fsync(k.fd) == -1)
        r = -errno;
    if (close(k.fd) == -1 && r == 0)
        r = -errno;
    EVP_MD_CTX_free(k.md);
    if (r == 0 && rename(tmp, path) == -1)
        r = -errno;
    if (r < 0) {
        (void)unlink(tmp);
        return util_fail(r, err, errlen, "cannot write the state: %s", strerror(-r));
    }
    /* the rename itself survives a crash once the folder is synced */
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return 0;
}

int kept_save(const char *state_dir, const struct kept_config *cfg, const char *key,
              const struct kept_state *st, char *err, size_t errlen)
{
    char dir[PATH_MAX_KEPT], path[PATH_MAX_KEPT];
    int r;

    if (store_dir(state_dir, dir, sizeof(dir)) < 0 ||
        kept_path(state_dir, key, path, sizeof(path)) < 0)
        return util_fail(-ENAMETOOLONG, err, errlen, "the state folder's path is too long");
    if (st->bytes > cfg->max_bytes) {
        (void)kept_remove(state_dir, key);
        return util_fail(-EFBIG, err, errlen, "%zu bytes, over the limit of %llu", st->bytes,
                         (unsigned long long)cfg->max_bytes);
    }
    r = util_mkdir_p(dir, 0700);
    if (r < 0)
        return util_fail(r, err, errlen, "cannot create the state folder: %s", strerror(-r));
    r = write_atomic(dir, path, st, err, errlen);
    if (r == 0)
        (void)tidy(dir, cfg->total_bytes, 0, util_wall_ns(), strrchr(path, '/') + 1);
    return r;
}

int kept_load(const char *state_dir, const struct kept_config *cfg, const char *key,
              struct kept_state *ret, char *err, size_t errlen)
{
    char path[PATH_MAX_KEPT];
    char *data = NULL;
    struct stat st;
    size_t len = 0;
    int fd, r;

    if (kept_path(state_dir, key, path, sizeof(path)) < 0)
        return util_fail(-ENAMETOOLONG, err, errlen, "the state folder's path is too long");
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd == -1)
        return errno == ENOENT ? -ENOENT
                               : util_fail(-errno, err, errlen, "cannot open: %s", strerror(errno));
    if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode)) {
        r = util_fail(-EBADMSG, err, errlen, "not a regular file");
        goto out;
    }
    if ((uint64_t)st.st_size > cfg->max_bytes + OVERHEAD_MAX) {
        r = util_fail(-EBADMSG, err, errlen, "over the size limit");
        goto out;
    }
    data = malloc((size_t)st.st_size + 1);
    if (!data) {
        r = util_fail(-ENOMEM, err, errlen, "out of memory");
        goto out;
    }
    while (len < (size_t)st.st_size) {
        ssize_t got = read(fd, data + len, (size_t)st.st_size - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    r = kept_decode(data, len, ret, err, errlen);
    if (r == 0)
        (void)futimens(fd, NULL); /* used: the last to be evicted */
out:
    free(data);
    close(fd);
    return r;
}

int kept_remove(const char *state_dir, const char *key)
{
    char path[PATH_MAX_KEPT];

    if (kept_path(state_dir, key, path, sizeof(path)) < 0)
        return -ENAMETOOLONG;
    if (unlink(path) == -1)
        return errno == ENOENT ? 0 : -errno;
    return 1;
}

int kept_sweep(const char *state_dir, const struct kept_config *cfg, int64_t now_wall_ms)
{
    char dir[PATH_MAX_KEPT];
    int64_t cut = 0;

    if (store_dir(state_dir, dir, sizeof(dir)) < 0)
        return -ENAMETOOLONG;
    if (cfg->ttl_ms > 0 && (int64_t)cfg->ttl_ms < now_wall_ms)
        cut = (now_wall_ms - (int64_t)cfg->ttl_ms) * 1000000;
    return tidy(dir, cfg->total_bytes, cut, now_wall_ms * 1000000, NULL);
}
