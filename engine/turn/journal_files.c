/*
 * journal_files — a journal's file: names, lines, meta, locks (journal_files.h).
 */
#include "turn/journal_files.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "base/jsonx.h"
#include "base/util.h"

#define SCAN_CHUNK 65536

/* SHA-256, fetched once (an implicit fetch per digest costs more than the digest). */
static EVP_MD *sha256;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void)
{
    sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

int journal_files_name(const char *turn_id, const char *project_id, char out[JOURNAL_FILE_MAX])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    struct buf b;
    int r;

    pthread_once(&sha256_once, sha256_fetch);
    buf_init(&b, 2 * JOURNAL_ID_MAX + 2);
    r = buf_printf(&b, "%s\n%s", project_id ? project_id : "", turn_id);
    if (r == 0 && EVP_Digest(b.data, b.len, md, &n, sha256 ? sha256 : EVP_sha256(), NULL) != 1)
        r = -EIO;
    buf_release(&b);
    if (r < 0)
        return r;
    util_hex_encode(md, JOURNAL_NAME_LEN / 2, out);
    memcpy(out + JOURNAL_NAME_LEN, JOURNAL_SUFFIX, sizeof(JOURNAL_SUFFIX));
    return 0;
}

int journal_files_parse_line(const char *line, size_t len, uint64_t *ret_seq, uint64_t *ret_det,
                             size_t *ret_off)
{
    uint64_t v[2] = {0, 0};
    size_t i = 0;

    if (len >= 3 && line[0] == 'M' && line[1] == ' ' && line[2] == '{') {
        *ret_off = 2;
        return 2;
    }
    for (int k = 0; k < 2; k++) {
        size_t start = i;

        while (i < len && line[i] >= '0' && line[i] <= '9' && i - start < 19)
            v[k] = v[k] * 10 + (uint64_t)(line[i++] - '0');
        if (i == start || i >= len || line[i] != ' ')
            return -EBADMSG;
        i++;
    }
    if (i >= len || line[i] != '{')
        return -EBADMSG;
    *ret_seq = v[0];
    *ret_det = v[1];
    *ret_off = i;
    return 1;
}

static void copy_str(char *dst, size_t size, json_object *o, const char *key)
{
    const char *s = jsonx_str(o, key);

    if (s)
        snprintf(dst, size, "%s", s);
}

int journal_files_meta_apply(const char *json, size_t len, struct journal_meta *m)
{
    json_object *o = NULL, *v, *slot;
    char err[64];

    if (jsonx_parse(json, len, 4, &o, err, sizeof(err)) < 0 ||
        !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return -EBADMSG;
    }
    copy_str(m->turn_id, sizeof(m->turn_id), o, "turnId");
    copy_str(m->project_id, sizeof(m->project_id), o, "projectId");
    copy_str(m->session_key, sizeof(m->session_key), o, "sessionKey");
    if ((v = jsonx_get(o, "pid")))
        m->pid = (int32_t)json_object_get_int(v);
    if ((v = jsonx_get(o, "createdMs")))
        m->created_ms = json_object_get_int64(v);
    if ((v = jsonx_get(o, "detached")))
        m->detached = json_object_get_boolean(v);
    if ((v = jsonx_get(o, "finishedMs"))) {
        m->finished_ms = json_object_get_int64(v);
        m->state = JOURNAL_DONE;
    }
    slot = jsonx_get(o, "slot");
    if (slot) {
        m->has_slot = true;
        m->slot_index = (uint32_t)json_object_get_int64(jsonx_get(slot, "index"));
        m->slot_generation = (uint32_t)json_object_get_int64(jsonx_get(slot, "generation"));
    }
    json_object_put(o);
    return 0;
}

int journal_files_header(const struct journal_meta *m, struct buf *out)
{
    int r = buf_append_str(out, "M {\"turnId\":");

    if (r == 0)
        r = jsonx_append_string(out, m->turn_id);
    if (r == 0)
        r = buf_append_str(out, ",\"projectId\":");
    if (r == 0)
        r = jsonx_append_string(out, m->project_id);
    if (r == 0)
        r = buf_append_str(out, ",\"sessionKey\":");
    if (r == 0)
        r = jsonx_append_string(out, m->session_key);
    if (r == 0)
        r = buf_printf(out, ",\"pid\":%d,\"createdMs\":%lld,\"detached\":%s}\n", (int)m->pid,
                       (long long)m->created_ms, m->detached ? "true" : "false");
    return r;
}

/* One whole line of the scan (NUL-free, without its '\n'). */
static void scan_line(const char *line, size_t len, struct journal_meta *m, uint64_t *seq,
                      uint64_t *det, bool *header)
{
    uint64_t s, d;
    size_t off;
    int k = journal_files_parse_line(line, len, &s, &d, &off);

    if (k == 2 && journal_files_meta_apply(line + off, len - off, m) == 0)
        *header = true;
    else if (k == 1) {
        *seq = s;
        *det = d;
    }
}

int journal_files_scan(int fd, struct journal_meta *m, uint64_t *ret_end, uint64_t *ret_seq,
                       uint64_t *ret_det)
{
    struct buf line;
    char *chunk = malloc(SCAN_CHUNK);
    uint64_t pos = 0, end = 0, seq = 0, det = 0;
    bool header = false, skip = false;
    int r = 0;

    memset(m, 0, sizeof(*m));
    buf_init(&line, EVENT_LINE_MAX + 64);
    if (!chunk)
        return -ENOMEM;
    for (;;) {
        ssize_t n = pread(fd, chunk, SCAN_CHUNK, (off_t)pos);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            r = n < 0 ? -errno : 0;
            break;
        }
        for (ssize_t i = 0; i < n; i++) {
            if (chunk[i] == '\0') { /* a punched hole: what follows it starts mid-line */
                buf_reset(&line);
                skip = true; /* up to the next '\n' */
            } else if (chunk[i] == '\n') {
                if (!skip)
                    scan_line(buf_str(&line), line.len, m, &seq, &det, &header);
                buf_reset(&line);
                skip = false;
                end = pos + (uint64_t)i + 1;
            } else if (!skip && buf_append_char(&line, chunk[i]) < 0) {
                r = -E2BIG;
                break;
            }
        }
        pos += (uint64_t)n;
        if (r < 0)
            break;
    }
    buf_release(&line);
    free(chunk);
    if (r == 0 && !header)
        r = -EBADMSG;
    if (r == 0) {
        *ret_end = end;
        *ret_seq = seq;
        *ret_det = det;
    }
    return r;
}

static int ofd_lock(int fd, int cmd, short type, int which, struct flock *ret)
{
    struct flock l = {.l_type = type, .l_whence = SEEK_SET, .l_start = which, .l_len = 1};

    if (fcntl(fd, cmd, &l) < 0)
        return errno == EAGAIN || errno == EACCES ? -EAGAIN : -errno;
    if (ret)
        *ret = l;
    return 0;
}

int journal_files_lock(int fd, int which, bool exclusive)
{
    return ofd_lock(fd, F_OFD_SETLK, exclusive ? F_WRLCK : F_RDLCK, which, NULL);
}

void journal_files_unlock(int fd, int which)
{
    (void)ofd_lock(fd, F_OFD_SETLK, F_UNLCK, which, NULL);
}

bool journal_files_locked(int fd, int which, bool exclusive)
{
    struct flock l = {.l_type = F_UNLCK};

    if (ofd_lock(fd, F_OFD_GETLK, exclusive ? F_WRLCK : F_RDLCK, which, &l) < 0)
        return true; /* cannot tell: assume someone holds it */
    return l.l_type != F_UNLCK;
}
