/*
 * fuzz_keeper_proto — the worker <-> keeper protocol (engine/proto/keeper_proto.c): both sides
 * decode lines the other side (a keeper whose harness is hostile, a worker) wrote.
 *
 * Input layout: byte 0 even: the rest is split at '\n' into lines, each decoded as a socket or
 * start-pipe line. Byte 0 odd: the rest is a keeper spec. Properties:
 *   - a decoded line holds no NUL and re-encodes to exactly itself plus '\n' (one spelling
 *     per message; an ACP or tool payload is carried byte for byte);
 *   - a decoded message's numbers are within their documented ranges and its payload points
 *     into the line;
 *   - an encoded message never contains '\n' before its end, so it can never pose as two;
 *   - a decoded spec re-encodes and decodes to the same fields.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "proto/keeper_proto.h"

static void check_line(const char *line, size_t len)
{
    struct keeper_msg m, back;
    struct buf out;
    int r = keeper_proto_decode(line, len, &m);

    if (r < 0) {
        FUZZ_CHECK(r == -EBADMSG);
        return;
    }
    FUZZ_CHECK(m.kind < KEEPER_MSG_KIND_COUNT);
    if (m.kind == KEEPER_MSG_PARK || m.kind == KEEPER_MSG_AWAIT)
        FUZZ_CHECK(m.ms >= 1 && m.ms <= KEEPER_PROTO_WINDOW_MAX_MS);
    if (m.kind == KEEPER_MSG_EXIT)
        FUZZ_CHECK(m.status >= 0 && (unsigned)m.status <= KEEPER_PROTO_EXIT_MAX);
    if (m.kind == KEEPER_MSG_HELLO || m.kind == KEEPER_MSG_READY)
        FUZZ_CHECK(m.keeper_pid >= 1 && m.sandbox_pid >= 0);
    if (m.payload)
        FUZZ_CHECK(m.payload >= line && m.payload + m.payload_len <= line + len &&
                   m.payload_len > 0);
    FUZZ_CHECK(memchr(line, '\0', len) == NULL); /* a NUL never decodes */
    buf_init(&out, 2 * len + 64);
    r = keeper_proto_encode(&m, &out);
    FUZZ_CHECK(r == 0);
    FUZZ_CHECK(out.len == len + 1 && out.data[len] == '\n');
    FUZZ_CHECK(memchr(out.data, '\n', len) == NULL);
    FUZZ_CHECK(memcmp(out.data, line, len) == 0);
    FUZZ_CHECK(keeper_proto_decode(out.data, len, &back) == 0);
    FUZZ_CHECK(back.kind == m.kind && back.ms == m.ms && back.status == m.status &&
               back.keeper_pid == m.keeper_pid && back.sandbox_pid == m.sandbox_pid &&
               back.payload_len == m.payload_len);
    buf_release(&out);
}

static void check_spec(const char *text, size_t len)
{
    struct keeper_spec s, back;
    struct buf out;
    char err[256];

    if (keeper_spec_decode(text, len, &s, err, sizeof(err)) < 0) {
        FUZZ_CHECK(err[0] != '\0');
        return;
    }
    FUZZ_CHECK(s.env_dir && s.env_dir[0] == '/' && s.socket && s.socket[0] == '/');
    FUZZ_CHECK(s.idle_ms >= 1 && s.idle_ms <= KEEPER_PROTO_WINDOW_MAX_MS);
    FUZZ_CHECK(s.sandbox && s.provider);
    buf_init(&out, KEEPER_SPEC_MAX);
    FUZZ_CHECK(keeper_spec_encode(&s, &out) == 0);
    FUZZ_CHECK(keeper_spec_decode(out.data, out.len, &back, err, sizeof(err)) == 0);
    FUZZ_CHECK(strcmp(back.env_dir, s.env_dir) == 0 && strcmp(back.socket, s.socket) == 0);
    FUZZ_CHECK(back.idle_ms == s.idle_ms && back.attach_timeout_ms == s.attach_timeout_ms);
    FUZZ_CHECK(back.per_turn == s.per_turn && back.has_slot == (s.has_slot && s.shm));
    FUZZ_CHECK(strcmp(back.provider, s.provider) == 0);
    if (back.has_slot)
        FUZZ_CHECK(back.slot == s.slot && back.generation == s.generation);
    keeper_spec_release(&back);
    keeper_spec_release(&s);
    buf_release(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p, *end, *nl;

    if (size < 1)
        return 0;
    p = (const char *)data + 1;
    end = (const char *)data + size;
    if (data[0] & 1) {
        check_spec(p, (size_t)(end - p));
        return 0;
    }
    for (; p < end; p = nl + 1) {
        nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            nl = end;
        check_line(p, (size_t)(nl - p));
    }
    return 0;
}
