/*
 * fuzz_kept — a kept harness state read back from the store (engine/session/kept.c). The store
 * is the runner's own, but its files hold whatever a hostile agent wrote into its harness's
 * session log, and a file may be truncated or altered on disk. Input: a whole kept file.
 * Properties:
 *   - decoding fails only with -EBADMSG (or -EIO from the digest), and leaves nothing behind;
 *   - a decoded state holds at most KEPT_FILES_MAX files, every path passes kept_path_ok, and
 *     bytes is the sum of the sizes;
 *   - a decoded state re-encodes, and that decodes to the same state.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "session/kept.h"

static void same(const struct kept_state *a, const struct kept_state *b)
{
    FUZZ_CHECK(a->harness == b->harness && strcmp(a->acp_session, b->acp_session) == 0);
    FUZZ_CHECK(memcmp(a->history_fp, b->history_fp, sizeof(a->history_fp)) == 0);
    FUZZ_CHECK(memcmp(a->user_fp, b->user_fp, sizeof(a->user_fp)) == 0);
    FUZZ_CHECK(memcmp(a->config_fp, b->config_fp, sizeof(a->config_fp)) == 0);
    FUZZ_CHECK(a->saved_ms == b->saved_ms && a->nfiles == b->nfiles && a->bytes == b->bytes);
    for (size_t i = 0; i < a->nfiles; i++) {
        FUZZ_CHECK(strcmp(a->files[i].path, b->files[i].path) == 0);
        FUZZ_CHECK(a->files[i].size == b->files[i].size);
        FUZZ_CHECK(memcmp(a->files[i].data, b->files[i].data, a->files[i].size) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kept_state st, back;
    char err[256];
    struct buf out;
    size_t sum = 0;
    int r = kept_decode(data, size, &st, err, sizeof(err));

    if (r < 0) {
        FUZZ_CHECK(r == -EBADMSG || r == -EIO);
        FUZZ_CHECK(err[0] != '\0');
        return 0;
    }
    FUZZ_CHECK(st.nfiles <= KEPT_FILES_MAX);
    for (size_t i = 0; i < st.nfiles; i++) {
        FUZZ_CHECK(kept_path_ok(st.files[i].path));
        sum += st.files[i].size;
    }
    FUZZ_CHECK(sum == st.bytes && st.acp_session[0]);
    buf_init(&out, size * 2 + 65536);
    FUZZ_CHECK(kept_encode(&st, &out) == 0);
    FUZZ_CHECK(kept_decode(out.data, out.len, &back, err, sizeof(err)) == 0);
    same(&st, &back);
    kept_state_release(&back);
    kept_state_release(&st);
    buf_release(&out);
    return 0;
}
