/* kept: the store of harnesses' session state — format, digest, paths, bounds, eviction, TTL. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "base/buf.h"
#include "base/fstree.h"
#include "base/util.h"
#include "session/kept.h"
#include "suites.h"

static void tmpdir(char *buf, size_t len)
{
    snprintf(buf, len, "/tmp/ar-unit-kept-XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(buf));
}

static void sample(struct kept_state *st, const char *sid, size_t extra)
{
    char *big = calloc(1, extra + 1);

    kept_state_init(st);
    st->harness = HARNESS_PI;
    snprintf(st->acp_session, sizeof(st->acp_session), "%s", sid);
    memset(st->config_fp, 0x11, sizeof(st->config_fp));
    memset(st->history_fp, 0x22, sizeof(st->history_fp));
    memset(st->user_fp, 0x33, sizeof(st->user_fp));
    st->saved_ms = 1234;
    CU_ASSERT_EQUAL(kept_state_add(st, ".pi/agent/sessions/--workspace--/a.jsonl",
                                   "{\"type\":\"session\"}\n", 19),
                    0);
    /* binary bytes, a NUL and newlines survive */
    CU_ASSERT_EQUAL(kept_state_add(st, "b/c.jsonl", "x\0y\n\n", 5), 0);
    memset(big, 'z', extra);
    CU_ASSERT_EQUAL(kept_state_add(st, "big.jsonl", big, extra), 0);
    free(big);
}

static void encode(const struct kept_state *st, struct buf *b)
{
    buf_init(b, 64 << 20);
    CU_ASSERT_EQUAL_FATAL(kept_encode(st, b), 0);
}

static void test_kept_roundtrip(void)
{
    struct kept_state st, got;
    char err[128];
    struct buf b;

    sample(&st, "sess-1", 1000);
    encode(&st, &b);
    CU_ASSERT_EQUAL_FATAL(kept_decode(b.data, b.len, &got, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(got.harness, HARNESS_PI);
    CU_ASSERT_STRING_EQUAL(got.acp_session, "sess-1");
    CU_ASSERT_EQUAL(memcmp(got.history_fp, st.history_fp, sizeof(st.history_fp)), 0);
    CU_ASSERT_EQUAL(memcmp(got.user_fp, st.user_fp, sizeof(st.user_fp)), 0);
    CU_ASSERT_EQUAL(memcmp(got.config_fp, st.config_fp, sizeof(st.config_fp)), 0);
    CU_ASSERT_EQUAL(got.saved_ms, 1234);
    CU_ASSERT_EQUAL_FATAL(got.nfiles, 3);
    CU_ASSERT_STRING_EQUAL(got.files[1].path, "b/c.jsonl");
    CU_ASSERT_EQUAL(got.files[1].size, 5);
    CU_ASSERT_EQUAL(memcmp(got.files[1].data, "x\0y\n\n", 5), 0);
    CU_ASSERT_EQUAL(got.bytes, st.bytes);
    kept_state_release(&got);
    kept_state_release(&st);
    buf_release(&b);
}

static void test_kept_refuses_altered_and_truncated(void)
{
    struct kept_state st, got;
    char err[128];
    struct buf b;

    sample(&st, "sess-2", 10);
    encode(&st, &b);
    for (size_t cut = 0; cut < b.len; cut += 7) {
        CU_ASSERT_EQUAL(kept_decode(b.data, cut, &got, err, sizeof(err)), -EBADMSG);
    }
    b.data[b.len - 3] ^= 1; /* one byte of a file */
    CU_ASSERT_EQUAL(kept_decode(b.data, b.len, &got, err, sizeof(err)), -EBADMSG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "digest mismatch"));
    b.data[b.len - 3] ^= 1;
    b.data[0] = 'A'; /* the header */
    CU_ASSERT_EQUAL(kept_decode(b.data, b.len, &got, err, sizeof(err)), -EBADMSG);
    kept_state_release(&st);
    buf_release(&b);
}

/* A kept file of body with a right digest: what is wrong is the content. */
static int decode_body(const char *body, char *err, size_t errlen)
{
    uint8_t d[32];
    char hex[65];
    unsigned int n = 0;
    struct kept_state got;
    struct buf b;
    int r;

    EVP_Digest(body, strlen(body), d, &n, EVP_sha256(), NULL);
    util_hex_encode(d, sizeof(d), hex);
    buf_init(&b, 1 << 20);
    buf_printf(&b, "agent-runner-kept 1 %s\n%s", hex, body);
    r = kept_decode(b.data, b.len, &got, err, errlen);
    if (r == 0)
        kept_state_release(&got);
    buf_release(&b);
    return r;
}

#define FP "\"0000000000000000000000000000000000000000000000000000000000000000\""
#define META(files)                                                                                \
    "{\"harness\":\"pi\",\"acpSession\":\"s\",\"configFp\":" FP ",\"historyFp\":" FP               \
    ",\"userFp\":" FP ",\"savedMs\":1,\"files\":" files "}\n"

static void test_kept_refuses_a_bad_body(void)
{
    char err[128];

    CU_ASSERT_EQUAL(decode_body(META("0"), err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(decode_body(META("1") "{\"path\":\"a\",\"size\":1}\nx\n", err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(decode_body("{}\n", err, sizeof(err)), -EBADMSG);
    CU_ASSERT_EQUAL(decode_body("not json\n", err, sizeof(err)), -EBADMSG);
    CU_ASSERT_EQUAL(decode_body(META("65"), err, sizeof(err)), -EBADMSG);
    /* fewer files than said, a file past the end, a bad path, bytes left over */
    CU_ASSERT_EQUAL(decode_body(META("1"), err, sizeof(err)), -EBADMSG);
    CU_ASSERT_EQUAL(decode_body(META("1") "{\"path\":\"a\",\"size\":9}\nx\n", err, sizeof(err)),
                    -EBADMSG);
    CU_ASSERT_EQUAL(decode_body(META("1") "{\"path\":\"../a\",\"size\":1}\nx\n", err, sizeof(err)),
                    -EBADMSG);
    CU_ASSERT_EQUAL(decode_body(META("1") "{\"path\":\"a\",\"size\":1}\nx\nmore", err, sizeof(err)),
                    -EBADMSG);
    CU_ASSERT_EQUAL(decode_body(META("1") "{\"path\":\"a\",\"size\":-1}\nx\n", err, sizeof(err)),
                    -EBADMSG);
    /* an unknown harness, a session id with a control character */
    CU_ASSERT_EQUAL(decode_body("{\"harness\":\"nope\",\"acpSession\":\"s\",\"configFp\":" FP
                                ",\"historyFp\":" FP ",\"userFp\":" FP
                                ",\"savedMs\":1,\"files\":0}\n",
                                err, sizeof(err)),
                    -EBADMSG);
    CU_ASSERT_EQUAL(decode_body("{\"harness\":\"pi\",\"acpSession\":\"s\\n\",\"configFp\":" FP
                                ",\"historyFp\":" FP ",\"userFp\":" FP
                                ",\"savedMs\":1,\"files\":0}\n",
                                err, sizeof(err)),
                    -EBADMSG);
}

static void test_kept_paths(void)
{
    CU_ASSERT_TRUE(kept_path_ok("a.jsonl"));
    CU_ASSERT_TRUE(kept_path_ok(".pi/agent/sessions/--workspace--/x.jsonl"));
    CU_ASSERT_FALSE(kept_path_ok(""));
    CU_ASSERT_FALSE(kept_path_ok("/etc/passwd"));
    CU_ASSERT_FALSE(kept_path_ok("../x"));
    CU_ASSERT_FALSE(kept_path_ok("a/../x"));
    CU_ASSERT_FALSE(kept_path_ok("a/./x"));
    CU_ASSERT_FALSE(kept_path_ok("a//x"));
    CU_ASSERT_FALSE(kept_path_ok("a/"));
    CU_ASSERT_FALSE(kept_path_ok("a\nb"));
    CU_ASSERT_FALSE(kept_path_ok("a\\b"));
    {
        char longp[KEPT_PATH_MAX + 1];
        memset(longp, 'a', sizeof(longp) - 1);
        longp[sizeof(longp) - 1] = '\0';
        CU_ASSERT_FALSE(kept_path_ok(longp));
    }
}

static void test_kept_file_count_is_bounded(void)
{
    struct kept_state st;
    char p[32];

    kept_state_init(&st);
    for (int i = 0; i < KEPT_FILES_MAX; i++) {
        snprintf(p, sizeof(p), "f%d.jsonl", i);
        CU_ASSERT_EQUAL(kept_state_add(&st, p, "x", 1), 0);
    }
    CU_ASSERT_EQUAL(kept_state_add(&st, "one-more.jsonl", "x", 1), -E2BIG);
    CU_ASSERT_EQUAL(kept_state_add(&st, "../bad", "x", 1), -EINVAL);
    kept_state_release(&st);
}

static void set_mtime(const char *path, time_t secs_ago)
{
    struct timespec ts[2];

    clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec -= secs_ago;
    ts[1] = ts[0];
    CU_ASSERT_EQUAL(utimensat(AT_FDCWD, path, ts, 0), 0);
}

static void test_kept_save_load_remove(void)
{
    struct kept_config cfg = {.max_bytes = 1 << 20, .total_bytes = 1 << 30, .ttl_ms = 60000};
    struct kept_state st, got;
    char dir[64], path[512], err[256];
    struct stat s;

    tmpdir(dir, sizeof(dir));
    sample(&st, "sess-3", 100);
    CU_ASSERT_EQUAL(kept_load(dir, &cfg, "p:s", &got, err, sizeof(err)), -ENOENT);
    CU_ASSERT_EQUAL_FATAL(kept_save(dir, &cfg, "p:s", &st, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(kept_path(dir, "p:s", path, sizeof(path)), 0);
    /* the runner's own: the folder 0700, the file 0600, named by a digest of the key */
    CU_ASSERT_EQUAL_FATAL(stat(path, &s), 0);
    CU_ASSERT_EQUAL(s.st_mode & 07777, 0600);
    CU_ASSERT_PTR_NULL(strstr(path, "p:s"));
    snprintf(err, sizeof(err), "%s/" KEPT_DIR, dir);
    CU_ASSERT_EQUAL_FATAL(stat(err, &s), 0);
    CU_ASSERT_EQUAL(s.st_mode & 07777, 0700);
    CU_ASSERT_EQUAL_FATAL(kept_load(dir, &cfg, "p:s", &got, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(got.acp_session, "sess-3");
    kept_state_release(&got);
    /* another session's key finds nothing */
    CU_ASSERT_EQUAL(kept_load(dir, &cfg, "p:other", &got, err, sizeof(err)), -ENOENT);
    CU_ASSERT_EQUAL(kept_remove(dir, "p:s"), 1);
    CU_ASSERT_EQUAL(kept_remove(dir, "p:s"), 0);
    CU_ASSERT_EQUAL(kept_load(dir, &cfg, "p:s", &got, err, sizeof(err)), -ENOENT);
    kept_state_release(&st);
    (void)fstree_remove(dir);
}

static void test_kept_over_the_session_bound_is_not_kept(void)
{
    struct kept_config cfg = {.max_bytes = 4096, .total_bytes = 1 << 30, .ttl_ms = 60000};
    struct kept_state small, big, got;
    char dir[64], err[256];

    tmpdir(dir, sizeof(dir));
    sample(&small, "small", 10);
    sample(&big, "big", 8192);
    CU_ASSERT_EQUAL(kept_save(dir, &cfg, "p:s", &small, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(kept_save(dir, &cfg, "p:s", &big, err, sizeof(err)), -EFBIG);
    /* the older state no longer matches the conversation: gone too */
    CU_ASSERT_EQUAL(kept_load(dir, &cfg, "p:s", &got, err, sizeof(err)), -ENOENT);
    kept_state_release(&small);
    kept_state_release(&big);
    (void)fstree_remove(dir);
}

static void test_kept_evicts_least_recently_used_over_the_total(void)
{
    struct kept_config cfg = {.max_bytes = 1 << 20, .total_bytes = 1 << 30, .ttl_ms = 3600000};
    struct kept_state st, got;
    char dir[64], a[512], b[512], c[512], err[256];
    struct stat s;

    tmpdir(dir, sizeof(dir));
    sample(&st, "x", 3000);
    CU_ASSERT_EQUAL(kept_save(dir, &cfg, "p:a", &st, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(kept_save(dir, &cfg, "p:b", &st, err, sizeof(err)), 0);
    kept_path(dir, "p:a", a, sizeof(a));
    kept_path(dir, "p:b", b, sizeof(b));
    kept_path(dir, "p:c", c, sizeof(c));
    set_mtime(a, 300);
    set_mtime(b, 200);
    /* a is used (loaded): b is now the least recently used */
    CU_ASSERT_EQUAL(kept_load(dir, &cfg, "p:a", &got, err, sizeof(err)), 0);
    kept_state_release(&got);
    CU_ASSERT_EQUAL_FATAL(stat(a, &s), 0);
    cfg.total_bytes = (uint64_t)s.st_size * 2 + 10; /* room for two */
    CU_ASSERT_EQUAL(kept_save(dir, &cfg, "p:c", &st, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(access(a, F_OK), 0);
    CU_ASSERT_NOT_EQUAL(access(b, F_OK), 0);
    CU_ASSERT_EQUAL(access(c, F_OK), 0);
    /* the one just saved is never its own victim, even alone over the total */
    cfg.total_bytes = 1;
    CU_ASSERT_EQUAL(kept_save(dir, &cfg, "p:c", &st, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(access(c, F_OK), 0);
    CU_ASSERT_NOT_EQUAL(access(a, F_OK), 0);
    kept_state_release(&st);
    (void)fstree_remove(dir);
}

static void test_kept_sweep_removes_expired_and_leftovers(void)
{
    struct kept_config cfg = {.max_bytes = 1 << 20, .total_bytes = 1 << 30, .ttl_ms = 60000};
    struct kept_state st;
    char dir[64], old[512], fresh[512], tmp[600], other[600], err[256];

    tmpdir(dir, sizeof(dir));
    sample(&st, "x", 10);
    CU_ASSERT_EQUAL(kept_save(dir, &cfg, "p:old", &st, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(kept_save(dir, &cfg, "p:fresh", &st, err, sizeof(err)), 0);
    kept_path(dir, "p:old", old, sizeof(old));
    kept_path(dir, "p:fresh", fresh, sizeof(fresh));
    set_mtime(old, 120);
    snprintf(tmp, sizeof(tmp), "%s/" KEPT_DIR "/.tmp-0123456789abcdef", dir);
    CU_ASSERT_EQUAL(util_write_file(tmp, "x", 1, 0600), 0);
    set_mtime(tmp, 3600);
    snprintf(other, sizeof(other), "%s/" KEPT_DIR "/not-a-state", dir);
    CU_ASSERT_EQUAL(util_write_file(other, "x", 1, 0600), 0);
    set_mtime(other, 36000);
    CU_ASSERT_EQUAL(kept_sweep(dir, &cfg, util_wall_ms()), 2);
    CU_ASSERT_NOT_EQUAL(access(old, F_OK), 0);
    CU_ASSERT_NOT_EQUAL(access(tmp, F_OK), 0);
    CU_ASSERT_EQUAL(access(fresh, F_OK), 0);
    CU_ASSERT_EQUAL(access(other, F_OK), 0); /* not the store's: left alone */
    kept_state_release(&st);
    (void)fstree_remove(dir);
    /* a store that does not exist yet */
    CU_ASSERT_EQUAL(kept_sweep("/nonexistent-ar-unit", &cfg, util_wall_ms()), 0);
}

CU_TestInfo kept_tests[] = {
    {"roundtrip", test_kept_roundtrip},
    {"refuses_altered_and_truncated", test_kept_refuses_altered_and_truncated},
    {"refuses_a_bad_body", test_kept_refuses_a_bad_body},
    {"paths", test_kept_paths},
    {"file_count_is_bounded", test_kept_file_count_is_bounded},
    {"save_load_remove", test_kept_save_load_remove},
    {"over_the_session_bound_is_not_kept", test_kept_over_the_session_bound_is_not_kept},
    {"evicts_least_recently_used_over_the_total",
     test_kept_evicts_least_recently_used_over_the_total},
    {"sweep_removes_expired_and_leftovers", test_kept_sweep_removes_expired_and_leftovers},
    CU_TEST_INFO_NULL,
};
