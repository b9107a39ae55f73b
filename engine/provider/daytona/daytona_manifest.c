#include "provider/daytona/daytona_manifest.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <openssl/evp.h>

#include "base/jsonx.h"
#include "base/util.h"

#define MANIFEST_MAX 8192
#define UPLOAD_FILES_MAX 4096
#define CHMOD_COMMAND_MAX (256u * 1024)

/* ---- manifest ------------------------------------------------------------------------- */

struct manifest_entry {
    char *path;
    char digest[65];
};

struct daytona_manifest {
    struct manifest_entry *e;
    size_t n, cap;
    char *record; /* the record's path in the sandbox, or NULL */
};

int daytona_manifest_new(struct daytona_manifest **ret)
{
    struct daytona_manifest *m = calloc(1, sizeof(*m));

    if (!m)
        return -ENOMEM;
    *ret = m;
    return 0;
}

void daytona_manifest_clear(struct daytona_manifest *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->e[i].path);
    m->n = 0;
}

void daytona_manifest_free(struct daytona_manifest *m)
{
    if (!m)
        return;
    daytona_manifest_clear(m);
    free(m->e);
    free(m->record);
    free(m);
}

size_t daytona_manifest_count(const struct daytona_manifest *m)
{
    return m->n;
}

int daytona_manifest_digest(const char *path, unsigned mode, const void *data, size_t len,
                            char ret[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    char head[32];
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok;

    if (!ctx)
        return -ENOMEM;
    snprintf(head, sizeof(head), "%c%o%c", 0, mode, 0);
    ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
         EVP_DigestUpdate(ctx, path, strlen(path)) == 1 &&
         EVP_DigestUpdate(ctx, head, 2 + strlen(head + 1)) == 1 &&
         EVP_DigestUpdate(ctx, data, len) == 1 && EVP_DigestFinal_ex(ctx, md, &mdlen) == 1 &&
         mdlen == 32;
    EVP_MD_CTX_free(ctx);
    if (!ok)
        return -EIO;
    util_hex_encode(md, 32, ret);
    return 0;
}

static struct manifest_entry *manifest_find(const struct daytona_manifest *m, const char *path)
{
    for (size_t i = 0; i < m->n; i++) {
        if (strcmp(m->e[i].path, path) == 0)
            return &m->e[i];
    }
    return NULL;
}

bool daytona_manifest_has(const struct daytona_manifest *m, const char *path, const char *digest)
{
    const struct manifest_entry *e = manifest_find(m, path);

    return e && strcmp(e->digest, digest) == 0;
}

int daytona_manifest_put(struct daytona_manifest *m, const char *path, const char *digest)
{
    struct manifest_entry *e = manifest_find(m, path);

    if (strlen(digest) != 64)
        return -EINVAL;
    if (!e) {
        if (m->n == MANIFEST_MAX)
            return -E2BIG;
        if (m->n == m->cap) {
            size_t cap = m->cap ? m->cap * 2 : 32;
            struct manifest_entry *grown = realloc(m->e, cap * sizeof(*grown));

            if (!grown)
                return -ENOMEM;
            m->e = grown;
            m->cap = cap;
        }
        e = &m->e[m->n];
        e->path = strdup(path);
        if (!e->path)
            return -ENOMEM;
        m->n++;
    }
    memcpy(e->digest, digest, 65);
    return 0;
}

/* ---- the record in the sandbox ---------------------------------------------------------- */

#define RECORD_MAX (4u * 1024 * 1024)

int daytona_manifest_set_record(struct daytona_manifest *m, const char *path)
{
    char *copy = NULL;

    if (path) {
        copy = strdup(path);
        if (!copy)
            return -ENOMEM;
    }
    free(m->record);
    m->record = copy;
    return 0;
}

int daytona_manifest_serialize(const struct daytona_manifest *m, struct buf *out)
{
    json_object *doc = json_object_new_object(), *files = json_object_new_object();
    const char *text;
    int r;

    if (!doc || !files) {
        json_object_put(doc);
        json_object_put(files);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->n; i++)
        json_object_object_add(files, m->e[i].path, json_object_new_string(m->e[i].digest));
    json_object_object_add(doc, "v", json_object_new_int(1));
    json_object_object_add(doc, "files", files);
    text = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN);
    r = text ? buf_append_str(out, text) : -ENOMEM;
    json_object_put(doc);
    return r;
}

int daytona_manifest_parse(struct daytona_manifest *m, const char *text, size_t len)
{
    json_tokener *tok = json_tokener_new_ex(8);
    json_object *doc = NULL, *files, *v;
    int r = 0;

    daytona_manifest_clear(m);
    if (!tok)
        return -ENOMEM;
    if (len <= INT32_MAX)
        doc = json_tokener_parse_ex(tok, text, (int)len);
    json_tokener_free(tok);
    files = jsonx_get(doc, "files");
    v = jsonx_get(doc, "v");
    if (!files || !json_object_is_type(files, json_type_object) || !v ||
        json_object_get_int(v) != 1) {
        json_object_put(doc);
        return -EBADMSG;
    }
    json_object_object_foreach(files, path, digest)
    {
        if (!json_object_is_type(digest, json_type_string) || path[0] != '/' ||
            json_object_get_string_len(digest) != 64) {
            r = -EBADMSG;
            break;
        }
        r = daytona_manifest_put(m, path, json_object_get_string(digest));
        if (r < 0)
            break;
    }
    json_object_put(doc);
    if (r < 0)
        daytona_manifest_clear(m);
    return r;
}

int daytona_manifest_restore(struct daytona_manifest *m, struct daytona_client *c, const char *tb)
{
    struct buf text;
    int r;

    daytona_manifest_clear(m);
    if (!m->record)
        return 0;
    buf_init(&text, RECORD_MAX);
    r = daytona_toolbox_download(c, tb, m->record, &text);
    if (r == 0 && daytona_manifest_parse(m, text.data ? text.data : "", text.len) < 0)
        r = 0; /* unreadable: start empty, upload everything once */
    else if (r == -ENOENT || r == -EACCES || r == -EINVAL || r == -E2BIG)
        r = 0; /* no record (or not ours to read): the same */
    buf_release(&text);
    return r;
}

/* The record as it will be once the files idx[0..ns) landed. */
static int record_after(const struct daytona_manifest *m, const struct daytona_manifest_file *files,
                        const size_t *idx, char (*dig)[65], size_t ns, struct buf *out)
{
    struct daytona_manifest *next;
    int r;

    r = daytona_manifest_new(&next);
    if (r < 0)
        return r;
    for (size_t i = 0; r >= 0 && i < m->n; i++)
        r = daytona_manifest_put(next, m->e[i].path, m->e[i].digest);
    for (size_t k = 0; r >= 0 && k < ns; k++)
        r = daytona_manifest_put(next, files[idx[k]].path, dig[idx[k]]);
    if (r >= 0)
        r = daytona_manifest_serialize(next, out);
    daytona_manifest_free(next);
    return r;
}

/* ---- sync ----------------------------------------------------------------------------- */

/*
 * The bulk upload writes 0644: set the other modes with one `chmod` command per mode, all in
 * one execute round trip (one permissions call per file when the command would be too long).
 */
static int fix_modes(struct daytona_client *c, const char *tb,
                     const struct daytona_manifest_file *files, const size_t *idx, size_t ns,
                     char *err, size_t errlen)
{
    struct buf cmd, out;
    bool any = false;
    int code = 0, r = 0;

    buf_init(&cmd, CHMOD_COMMAND_MAX);
    buf_init(&out, 4096);
    for (size_t k = 0; k < ns && r >= 0; k++) {
        unsigned mode = files[idx[k]].mode;
        bool first = true;

        if (mode == 0644)
            continue;
        /* one chmod per distinct mode, listing every file with it */
        for (size_t j = 0; j < k; j++) {
            if (files[idx[j]].mode == mode)
                first = false;
        }
        if (!first)
            continue;
        r = buf_printf(&cmd, "%schmod %o --", any ? " && " : "", mode);
        for (size_t j = k; r >= 0 && j < ns; j++) {
            if (files[idx[j]].mode != mode)
                continue;
            r = buf_append_char(&cmd, ' ');
            if (r >= 0)
                r = daytona_shell_quote(files[idx[j]].path, &cmd);
        }
        any = true;
    }
    if (!any)
        goto out;
    if (r == -E2BIG) {
        for (size_t k = 0; k < ns; k++) {
            char mode[8];

            if (files[idx[k]].mode == 0644)
                continue;
            snprintf(mode, sizeof(mode), "%o", files[idx[k]].mode);
            r = daytona_toolbox_chmod(c, tb, files[idx[k]].path, mode);
            if (r < 0) {
                snprintf(err, errlen, "chmod \"%.200s\": %s", files[idx[k]].path,
                         daytona_client_message(c));
                goto out;
            }
        }
        r = 0;
        goto out;
    }
    if (r < 0)
        goto out;
    r = daytona_toolbox_execute(c, tb, buf_str(&cmd), 60, out.max, &code, &out);
    if (r >= 0 && code != 0)
        r = -EIO;
    if (r < 0)
        snprintf(err, errlen, "chmod after upload: %s",
                 r == -EIO ? buf_str(&out) : daytona_client_message(c));
out:
    buf_release(&cmd);
    buf_release(&out);
    return r;
}

int daytona_manifest_sync(struct daytona_client *c, const char *tb, struct daytona_manifest *m,
                          const struct daytona_manifest_file *files, size_t n,
                          struct daytona_manifest_stats *ret, char *err, size_t errlen)
{
    int64_t t0 = util_now_ms();
    struct daytona_manifest_stats st = {.files = (unsigned)n};
    struct daytona_toolbox_file *send = NULL;
    struct buf record;
    char(*dig)[65] = NULL;
    size_t *idx = NULL, ns = 0;
    int r = 0;

    if (n > UPLOAD_FILES_MAX) {
        snprintf(err, errlen, "too many files to upload (%zu, at most %d)", n, UPLOAD_FILES_MAX);
        return -E2BIG;
    }
    buf_init(&record, RECORD_MAX);
    send = calloc(n + 1, sizeof(*send)); /* + the record */
    dig = calloc(n ? n : 1, sizeof(*dig));
    idx = calloc(n ? n : 1, sizeof(*idx));
    if (!send || !dig || !idx) {
        r = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (!daytona_abs_path_ok(files[i].path) || files[i].mode > 07777) {
            snprintf(err, errlen, "upload: bad path or mode for file #%zu", i);
            r = -EINVAL;
            goto out;
        }
        r = daytona_manifest_digest(files[i].path, files[i].mode, files[i].data, files[i].len,
                                    dig[i]);
        if (r < 0)
            goto out;
        if (daytona_manifest_has(m, files[i].path, dig[i]))
            continue;
        send[ns] = (struct daytona_toolbox_file){files[i].path, files[i].data, files[i].len};
        idx[ns++] = i;
        st.bytes += files[i].len;
    }
    if (ns > 0) {
        size_t nsend = ns;

        if (m->record) {
            r = record_after(m, files, idx, dig, ns, &record);
            if (r < 0)
                goto out;
            send[nsend++] = (struct daytona_toolbox_file){m->record, record.data, record.len};
        }
        r = daytona_toolbox_upload(c, tb, send, nsend);
        if (r < 0) {
            snprintf(err, errlen, "upload: %s",
                     daytona_client_message(c)[0] ? daytona_client_message(c)
                                                  : daytona_strerror(r));
            goto out;
        }
        r = fix_modes(c, tb, files, idx, ns, err, errlen);
        if (r < 0)
            goto out;
        for (size_t k = 0; k < ns; k++) {
            r = daytona_manifest_put(m, files[idx[k]].path, dig[idx[k]]);
            if (r < 0)
                goto out;
        }
    }
    st.uploaded = (unsigned)ns;
    st.ms = (long)(util_now_ms() - t0);
    if (ret)
        *ret = st;
    r = 0;
out:
    buf_release(&record);
    free(send);
    free(dig);
    free(idx);
    return r;
}
