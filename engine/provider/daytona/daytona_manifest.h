/*
 * daytona_manifest — "workspace once, not per turn" (daytona_bridge.h): what was uploaded
 * into a sandbox, as path -> SHA-256 over (path, mode, content), and the upload of only what
 * changed, in one bulk upload plus one `chmod` execute for modes other than 0644. The
 * manifest lives with the environment (the keeper); it records a file only after it landed.
 * A fresh manifest (a new sandbox, a restarted runner) simply uploads everything once.
 */
#ifndef AR_DAYTONA_MANIFEST_H
#define AR_DAYTONA_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>

#include "provider/daytona/daytona_toolbox.h"

struct daytona_manifest;

int daytona_manifest_new(struct daytona_manifest **ret);
void daytona_manifest_free(struct daytona_manifest *m);
/* Forget everything (the sandbox was replaced: its files are gone). */
void daytona_manifest_clear(struct daytona_manifest *m);
/* For tests: the number of files recorded (what parse, serialize and clear leave behind). */
size_t daytona_manifest_count(const struct daytona_manifest *m);
/* 64 hex digits of SHA-256 over path, mode and content. */
int daytona_manifest_digest(const char *path, unsigned mode, const void *data, size_t len,
                            char ret[65]);
/* True when path was uploaded with exactly this digest. */
bool daytona_manifest_has(const struct daytona_manifest *m, const char *path, const char *digest);
int daytona_manifest_put(struct daytona_manifest *m, const char *path, const char *digest);

struct daytona_manifest_file {
    const char *path; /* absolute in-sandbox path */
    const void *data;
    size_t len;
    unsigned mode; /* e.g. 0600, 0644, 0755 */
};

struct daytona_manifest_stats {
    unsigned files;    /* considered */
    unsigned uploaded; /* sent (changed or new) */
    size_t bytes;      /* sent */
    long ms;
};

/*
 * The manifest's record in the sandbox (an absolute path, e.g. in our 0700 state folder):
 * from now on every sync that uploads something also writes the manifest as it will be after
 * that upload to this file, in the same bulk upload, so a later keeper (a resumed sandbox, a
 * restarted runner) starts from what the sandbox really holds. NULL turns it off.
 */
int daytona_manifest_set_record(struct daytona_manifest *m, const char *path);
/*
 * Replace the manifest with the sandbox's record (one download). A sandbox without one, or
 * with one that does not parse, leaves the manifest empty (everything is uploaded once): 0.
 * < 0 only when the sandbox could not be asked.
 */
int daytona_manifest_restore(struct daytona_manifest *m, struct daytona_client *c, const char *tb);
/* The record's text: {"v":1,"files":{path: digest}} (also parsed by restore). */
int daytona_manifest_serialize(const struct daytona_manifest *m, struct buf *out);
int daytona_manifest_parse(struct daytona_manifest *m, const char *text, size_t len);

/*
 * Upload what the manifest does not already hold, in one bulk upload (with the record, when
 * one is set), then fix modes that are not 0644. The manifest records a file only after it
 * landed.
 */
int daytona_manifest_sync(struct daytona_client *c, const char *tb, struct daytona_manifest *m,
                          const struct daytona_manifest_file *files, size_t n,
                          struct daytona_manifest_stats *ret, char *err, size_t errlen);

#endif
