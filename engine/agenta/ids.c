/*
 * ids — the identifiers platform mode writes (ids.h).
 */
#include "agenta/ids.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "base/buf.h"
#include "base/util.h"

/* ---- uuid5 ------------------------------------------------------------------------------ */

int ids_uuid5(const uint8_t ns[16], const char *name, size_t len, char out[37])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    char hex[33];
    int ok;

    if (!ctx)
        return -ENOMEM;
    ok = EVP_DigestInit_ex(ctx, EVP_sha1(), NULL) && EVP_DigestUpdate(ctx, ns, 16) &&
         EVP_DigestUpdate(ctx, name, len) && EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    if (!ok || mdlen < 16)
        return -EIO;
    md[6] = (unsigned char)((md[6] & 0x0f) | 0x50);
    md[8] = (unsigned char)((md[8] & 0x3f) | 0x80);
    util_hex_encode(md, 16, hex);
    snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16, hex + 20);
    return 0;
}

int ids_uuid_parse(const char *text, uint8_t out[16])
{
    uint8_t u[16];
    size_t n = 0;

    for (const char *p = text; *p; p++) {
        int hi, lo;

        if (*p == '-' && (p - text == 8 || p - text == 13 || p - text == 18 || p - text == 23))
            continue;
        hi = util_hex_digit(p[0]);
        lo = p[1] ? util_hex_digit(p[1]) : -1;
        if (hi < 0 || lo < 0 || n >= 16)
            return -EINVAL;
        u[n++] = (uint8_t)(hi * 16 + lo);
        p++;
    }
    if (n != 16 || strlen(text) != 36)
        return -EINVAL;
    memcpy(out, u, 16);
    return 0;
}

/* uuid5("records", uuid5("agenta", NAMESPACE_DNS)), computed once. */
static uint8_t record_ns[16];

static int record_ns_status = -EAGAIN;

static pthread_once_t record_ns_once = PTHREAD_ONCE_INIT;

static void record_ns_make(void)
{
    uint8_t dns[16], agenta[16];
    char text[37];
    int r;

    r = ids_uuid_parse("6ba7b810-9dad-11d1-80b4-00c04fd430c8", dns);
    if (r == 0)
        r = ids_uuid5(dns, "agenta", 6, text);
    if (r == 0)
        r = ids_uuid_parse(text, agenta);
    if (r == 0)
        r = ids_uuid5(agenta, "records", 7, text);
    if (r == 0)
        r = ids_uuid_parse(text, record_ns);
    record_ns_status = r;
}

int ids_record_id(const char *session_id, const char *tool_call_id, const char *record_type,
                  const char *turn_id, char out[37])
{
    struct buf name;
    int r;

    pthread_once(&record_ns_once, record_ns_make);
    if (record_ns_status < 0)
        return record_ns_status;
    buf_init(&name, 64u * 1024);
    r = buf_printf(&name, "%s:%s:%s:%s", session_id ? session_id : "",
                   tool_call_id ? tool_call_id : "", record_type ? record_type : "",
                   turn_id ? turn_id : "");
    if (r == 0)
        r = ids_uuid5(record_ns, buf_str(&name), name.len, out);
    buf_release(&name);
    return r;
}

static bool lower_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

bool ids_canonical_uuid(const char *s)
{
    if (!s || strlen(s) != 36)
        return false;
    for (size_t i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return false;
        } else if (!lower_hex(s[i])) {
            return false;
        }
    }
    return s[14] >= '1' && s[14] <= '8' && strchr("89ab", s[19]) != NULL;
}

int ids_trace_uuid(const char *trace_id, char out[37])
{
    if (!trace_id || strlen(trace_id) != 32)
        return -EINVAL;
    for (size_t i = 0; i < 32; i++)
        if (!lower_hex(trace_id[i]))
            return -EINVAL;
    snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", trace_id, trace_id + 8, trace_id + 12,
             trace_id + 16, trace_id + 20);
    return 0;
}

bool ids_span_id_ok(const char *s)
{
    if (!s || strlen(s) != 16)
        return false;
    for (size_t i = 0; i < 16; i++)
        if (!lower_hex(s[i]) && !(s[i] >= 'A' && s[i] <= 'F'))
            return false;
    return true;
}
