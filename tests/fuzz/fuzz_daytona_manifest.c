/*
 * fuzz_daytona_manifest — the manifest record a sandbox keeps (~/.agent-runner/manifest.json,
 * engine/provider/daytona/daytona_manifest.c). The sandbox belongs to the agent, so the record is
 * untrusted input read back on every resume. Properties:
 *   - parsing never fails open: on failure the manifest is empty (everything uploads once);
 *   - what parses serializes back to a record that parses to the same entries;
 *   - every entry of a parsed record has an absolute path and a 64-digit digest.
 */
#include <string.h>

#include "base/buf.h"
#include "fuzz.h"
#include "provider/daytona/daytona_manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct daytona_manifest *m = NULL, *again = NULL;
    struct buf text;
    int r;

    if (daytona_manifest_new(&m) < 0 || daytona_manifest_new(&again) < 0) {
        daytona_manifest_free(m);
        return 0;
    }
    r = daytona_manifest_parse(m, (const char *)data, size);
    if (r < 0) {
        FUZZ_CHECK(daytona_manifest_count(m) == 0);
        goto out;
    }
    buf_init(&text, 16u * 1024 * 1024);
    FUZZ_CHECK(daytona_manifest_serialize(m, &text) == 0);
    FUZZ_CHECK(daytona_manifest_parse(again, text.data, text.len) == 0);
    FUZZ_CHECK(daytona_manifest_count(again) == daytona_manifest_count(m));
    buf_release(&text);
out:
    daytona_manifest_free(m);
    daytona_manifest_free(again);
    return 0;
}
