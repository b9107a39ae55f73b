#include "provider/ws_frame.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

void ws_frame_parser_init(struct ws_frame_parser *p, uint64_t max_frame)
{
    memset(p, 0, sizeof(*p));
    p->max_frame = max_frame ? max_frame : WS_DEFAULT_MAX_FRAME;
}

static bool is_control(uint8_t op)
{
    return op >= 0x8;
}

static bool close_code_valid(uint16_t code)
{
    if (code >= 3000 && code <= 4999)
        return true;
    return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1011);
}

/*
 * Header length once the first two bytes are known: 2 + extended length (+ 4 for a mask,
 * which is then a protocol error anyway but still has to be measured).
 */
static size_t header_len(const uint8_t *h)
{
    size_t n = 2;
    uint8_t len7 = h[1] & 0x7f;

    if (len7 == 126)
        n += 2;
    else if (len7 == 127)
        n += 8;
    if (h[1] & 0x80)
        n += 4;
    return n;
}

/* The header in p->hdr is complete: validate it and start the frame. */
static int start_frame(struct ws_frame_parser *p)
{
    const uint8_t *h = p->hdr;
    uint8_t op = h[0] & 0x0f, len7 = h[1] & 0x7f;
    uint64_t len = len7;

    if (h[0] & 0x70)
        return -EPROTO; /* reserved bits: no extension was negotiated */
    if (h[1] & 0x80)
        return -EPROTO; /* a server must not mask its frames */
    if (len7 == 126) {
        len = (uint64_t)h[2] << 8 | h[3];
        if (len < 126)
            return -EPROTO; /* not the minimal encoding */
    } else if (len7 == 127) {
        len = 0;
        for (int i = 0; i < 8; i++)
            len = len << 8 | h[2 + i];
        if (len >> 63)
            return -EPROTO;
        if (len < 65536)
            return -EPROTO;
    }
    switch (op) {
    case WS_OP_CONT:
        if (!p->in_message)
            return -EPROTO;
        break;
    case WS_OP_TEXT:
    case WS_OP_BINARY:
        if (p->in_message)
            return -EPROTO;
        break;
    case WS_OP_CLOSE:
    case WS_OP_PING:
    case WS_OP_PONG:
        if (!(h[0] & 0x80) || len > WS_CONTROL_MAX)
            return -EPROTO;
        break;
    default:
        return -EPROTO;
    }
    if (len > p->max_frame)
        return -EMSGSIZE;
    p->opcode = op;
    p->fin = (h[0] & 0x80) != 0;
    p->remaining = len;
    p->in_frame = true;
    p->nctl = 0;
    if (op == WS_OP_TEXT || op == WS_OP_BINARY) {
        p->in_message = true;
        p->msg_opcode = op;
    }
    return 0;
}

/* A control frame's payload is complete in p->ctl: make its event. */
static int control_event(struct ws_frame_parser *p, struct ws_event *ev)
{
    memset(ev, 0, sizeof(*ev));
    ev->data = p->ctl;
    ev->len = p->nctl;
    switch (p->opcode) {
    case WS_OP_PING:
        ev->type = WS_EV_PING;
        return 1;
    case WS_OP_PONG:
        ev->type = WS_EV_PONG;
        return 1;
    default:
        break;
    }
    ev->type = WS_EV_CLOSE;
    ev->close_code = WS_CLOSE_NO_STATUS;
    if (p->nctl == 1)
        return -EPROTO;
    if (p->nctl >= 2) {
        uint16_t code = (uint16_t)(p->ctl[0] << 8 | p->ctl[1]);

        if (!close_code_valid(code))
            return -EPROTO;
        ev->close_code = code;
        ev->data = p->ctl + 2;
        ev->len = p->nctl - 2;
    }
    p->closed = true;
    return 1;
}

int ws_frame_feed(struct ws_frame_parser *p, const uint8_t *data, size_t len, size_t *ret_used,
                  struct ws_event *ret_ev)
{
    size_t used = 0;
    int r;

    *ret_used = 0;
    while (used < len || (p->in_frame && p->remaining == 0)) {
        if (p->closed)
            return -EPROTO; /* nothing may follow a close frame */
        if (!p->in_frame) {
            size_t need;

            while (p->nhdr < 2 && used < len)
                p->hdr[p->nhdr++] = data[used++];
            if (p->nhdr < 2)
                break;
            need = header_len(p->hdr);
            while (p->nhdr < need && used < len)
                p->hdr[p->nhdr++] = data[used++];
            if (p->nhdr < need)
                break;
            p->nhdr = 0;
            r = start_frame(p);
            if (r < 0) {
                *ret_used = used;
                return r;
            }
            continue;
        }
        if (is_control(p->opcode)) {
            size_t take = len - used;

            if (take > p->remaining)
                take = (size_t)p->remaining;
            memcpy(p->ctl + p->nctl, data + used, take);
            p->nctl += take;
            used += take;
            p->remaining -= take;
            if (p->remaining > 0)
                break;
            p->in_frame = false;
            *ret_used = used;
            return control_event(p, ret_ev);
        } else {
            size_t take = len - used;

            if (take > p->remaining)
                take = (size_t)p->remaining;
            memset(ret_ev, 0, sizeof(*ret_ev));
            ret_ev->type = WS_EV_DATA;
            ret_ev->opcode = p->msg_opcode;
            ret_ev->data = data + used;
            ret_ev->len = take;
            used += take;
            p->remaining -= take;
            if (p->remaining == 0) {
                p->in_frame = false;
                if (p->fin) {
                    p->in_message = false;
                    ret_ev->fin = true;
                }
            }
            *ret_used = used;
            return 1;
        }
    }
    *ret_used = used;
    return 0;
}

int ws_frame_encode(uint8_t opcode, const void *payload, size_t len, const uint8_t mask[4],
                    struct buf *out)
{
    uint8_t h[14];
    size_t n = 0, start;
    int r;

    if (is_control(opcode) && len > WS_CONTROL_MAX)
        return -EINVAL;
    if (opcode > 0xf)
        return -EINVAL;
    h[n++] = (uint8_t)(0x80 | opcode);
    if (len < 126) {
        h[n++] = (uint8_t)(0x80 | len);
    } else if (len < 65536) {
        h[n++] = 0x80 | 126;
        h[n++] = (uint8_t)(len >> 8);
        h[n++] = (uint8_t)len;
    } else {
        h[n++] = 0x80 | 127;
        for (int i = 7; i >= 0; i--)
            h[n++] = (uint8_t)((uint64_t)len >> (8 * i));
    }
    memcpy(h + n, mask, 4);
    n += 4;
    start = out->len;
    r = buf_append(out, h, n);
    if (r < 0)
        return r;
    r = buf_append(out, payload, len);
    if (r < 0) {
        out->len = start;
        out->data[start] = '\0';
        return r;
    }
    for (size_t i = 0; i < len; i++)
        out->data[start + n + i] = (char)((uint8_t)out->data[start + n + i] ^ mask[i & 3]);
    return 0;
}

int ws_frame_accept_key(const char *key, char out[29])
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    char joined[128];
    int n;

    n = snprintf(joined, sizeof(joined), "%s%s", key, WS_GUID);
    if (n < 0 || (size_t)n >= sizeof(joined))
        return -EINVAL;
    if (EVP_Digest(joined, (size_t)n, digest, &dlen, EVP_sha1(), NULL) != 1 || dlen != 20)
        return -EIO;
    if (EVP_EncodeBlock((unsigned char *)out, digest, 20) != 28)
        return -EIO;
    return 0;
}
