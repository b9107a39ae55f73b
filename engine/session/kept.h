/*
 * kept — a session's harness state kept outside its environment, so that a cold start can give
 * the harness its own conversation back (ACP session/load) instead of a text replay (README
 * "Sessions": kept harness state).
 *
 * The store: one file per session, <state_dir>/kept/<SHA-256 of the pool key, hex>, so no
 * project or session id appears on disk. The folder is 0700 and the files 0600, the runner's
 * own: no sandbox ever sees them (the engine itself writes the files into the next sandbox, as
 * that sandbox's user).
 *
 *   "agent-runner-kept 1 <SHA-256 hex of everything after this line>\n"
 *   <meta: one JSON line {harness, acpSession, configFp, historyFp, userFp, savedMs, files}>\n
 *   per file: <{"path","size"}: one JSON line>\n <size raw bytes>\n
 *
 * A save writes a temporary file in the same folder, fsyncs it and renames it over the old
 * one: a reader finds the old state or the new one, never a mix. A load takes a file only whole
 * and with a matching digest: a truncated or altered one is -EBADMSG, never half used.
 *
 * Bounds (struct kept_config): a session's state at most max_bytes (a bigger one is not kept,
 * and the older one of the session goes: it no longer matches the conversation); all of them
 * together at most total_bytes, the least recently used ones (saved or loaded longest ago: the
 * file's mtime, which a load renews) evicted first; a state neither saved nor loaded for ttl_ms
 * is removed by kept_sweep. /kill removes a session's state (kept_remove).
 */
#ifndef AR_KEPT_H
#define AR_KEPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "core/contracts.h"
#include "session/identity.h"

#define KEPT_DIR "kept"
#define KEPT_FILES_MAX 64   /* files of one session's state */
#define KEPT_PATH_MAX 256   /* a file's path, relative to the sandbox home */
#define KEPT_SCAN_MAX 65536 /* states one sweep or eviction looks at */

struct kept_file {
    char *path; /* relative to the sandbox home ("a/b.jsonl": no "..", ".", "//", no "/" first) */
    uint8_t *data;
    size_t size;
};

struct kept_state {
    enum harness_kind harness;
    char acp_session[128]; /* the harness's session id: what session/load names */
    uint8_t config_fp[IDENTITY_DIGEST_LEN];
    uint8_t history_fp[IDENTITY_DIGEST_LEN]; /* the conversation after the saved turn */
    uint8_t user_fp[IDENTITY_DIGEST_LEN];    /* its user side only (identity_user_fp) */
    int64_t saved_ms;                        /* wall clock */
    size_t nfiles;
    struct kept_file *files; /* owned */
    size_t bytes;            /* sum of the files' sizes */
};

void kept_state_init(struct kept_state *st);
void kept_state_release(struct kept_state *st);
/* Append a copy of data as path. -E2BIG past KEPT_FILES_MAX, -EINVAL for a bad path. */
int kept_state_add(struct kept_state *st, const char *path, const void *data, size_t size);
/* The same taking data (malloc'd) over on success; on failure it stays the caller's. */
int kept_state_adopt(struct kept_state *st, const char *path, uint8_t *data, size_t size);
/* A path a kept state may name (relative, no "." or ".." part, printable, < KEPT_PATH_MAX). */
bool kept_path_ok(const char *path);

/* The state as the file holds it, appended to out (sized by the caller). */
int kept_encode(const struct kept_state *st, struct buf *out);
/*
 * Parse a whole kept file. -EBADMSG with err saying what is wrong (no header, digest mismatch:
 * truncated or altered, bad meta, a file running past the end, bytes left over). ret is
 * written only on success (release it).
 */
int kept_decode(const void *data, size_t len, struct kept_state *ret, char *err, size_t errlen);

/* <state_dir>/kept/<hex of SHA-256(key)> into out. -ENAMETOOLONG. */
int kept_path(const char *state_dir, const char *key, char *out, size_t outlen);

/*
 * Save key's state (atomically, see the top). -EFBIG when it is over cfg->max_bytes: then the
 * session's older state is removed too. Then the store is brought under cfg->total_bytes.
 * -errno with err naming the step on failure (the older state is left as it was).
 */
int kept_save(const char *state_dir, const struct kept_config *cfg, const char *key,
              const struct kept_state *st, char *err, size_t errlen);
/*
 * Load key's state and mark it used. -ENOENT when there is none; -EBADMSG (err says why) when
 * the file is not a whole, unaltered state or is over cfg->max_bytes; -errno.
 */
int kept_load(const char *state_dir, const struct kept_config *cfg, const char *key,
              struct kept_state *ret, char *err, size_t errlen);
/* Remove key's state: 1 when there was one, 0 when not, -errno. */
int kept_remove(const char *state_dir, const char *key);
/*
 * Remove the states older than cfg->ttl_ms (by mtime, against now_wall_ms), leftover temporary
 * files older than a minute, then evict down to cfg->total_bytes. How many were removed, or
 * -errno (a missing store is 0).
 */
int kept_sweep(const char *state_dir, const struct kept_config *cfg, int64_t now_wall_ms);

#endif
