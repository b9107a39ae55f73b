/*
 * fuzz_agenta — what agent-runner parses from Agenta's API in platform mode.
 *
 * Input layout: byte 0 picks the parser, the rest is its input.
 *   0: a /sessions/records/query "records" array -> reconstruct_from_records (the current turn
 *      "t-cur" dropped) -> reconstruct_splice into a one-message request. Properties: a JSON
 *      array always folds; the fold is only user/assistant messages; the splice never fails
 *      (whatever the log holds, the rebuilt request passes the request parser) and keeps the
 *      inbound message last.
 *   1: a heartbeat answer -> agenta_beat_reply_parse (agenta_bodies). Properties: an object
 *      always parses; admitted false only when is_current_turn or admitted is false; ids are
 *      printable.
 *   2: a Content-Disposition value -> agenta_disposition_filename (agenta_disposition).
 *      Properties: a name, when there is one, is a single non-empty path component without
 *      control characters.
 */
#include <errno.h>
#include <string.h>

#include "agenta/agenta_bodies.h"
#include "agenta/agenta_disposition.h"
#include "agenta/reconstruct.h"
#include "base/jsonx.h"
#include "fuzz.h"
#include "request/request.h"

static const char REQUEST[] = "{\"sessionId\":\"s\",\"turnId\":\"t-cur\",\"messages\":"
                              "[{\"role\":\"user\",\"content\":\"now\"}]}";

static void fuzz_records(const char *data, size_t size)
{
    struct reconstruct_history h;
    struct request_limits lim;
    struct run_request req;
    json_object *records = NULL;
    char err[256];
    size_t n;
    int r;

    if (jsonx_parse(data, size, JSONX_DEFAULT_DEPTH, &records, err, sizeof(err)) < 0)
        return;
    r = reconstruct_from_records(records, "t-cur", &h);
    FUZZ_CHECK(r == 0);
    n = json_object_array_length(h.messages);
    for (size_t i = 0; i < n; i++) {
        const char *role = jsonx_str(json_object_array_get_idx(h.messages, i), "role");

        FUZZ_CHECK(role && (strcmp(role, "user") == 0 || strcmp(role, "assistant") == 0));
    }
    request_limits_default(&lim);
    FUZZ_CHECK(request_parse(REQUEST, sizeof(REQUEST) - 1, &lim, &req, err, sizeof(err)) == 0);
    r = reconstruct_splice(&h, &lim, &req, err, sizeof(err));
    if (r != 0)
        fprintf(stderr, "splice refused: %s\n", err);
    FUZZ_CHECK(r == 0);
    FUZZ_CHECK(req.nmessages == (n < lim.max_messages ? n + 1 : lim.max_messages));
    FUZZ_CHECK(req.turn_id && strcmp(req.turn_id, "t-cur") == 0);
    FUZZ_CHECK(req.messages[req.nmessages - 1].nblocks == 1 &&
               strcmp(req.messages[req.nmessages - 1].blocks[0].text, "now") == 0);
    run_request_release(&req);
    reconstruct_history_release(&h);
    json_object_put(records);
}

static bool printable(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x21 || *p == 0x7f)
            return false;
    return true;
}

static void fuzz_beat(const char *data, size_t size)
{
    struct agenta_beat_reply rep;
    json_object *o = NULL, *cur, *adm;
    char err[128];
    int r;

    r = agenta_beat_reply_parse(data, size, &rep);
    if (jsonx_parse(data, size, 64, &o, err, sizeof(err)) == 0 && o &&
        json_object_is_type(o, json_type_object)) {
        FUZZ_CHECK(r == 0);
        cur = jsonx_get(o, "is_current_turn");
        adm = jsonx_get(o, "admitted");
        if (!rep.admitted)
            FUZZ_CHECK((cur && json_object_is_type(cur, json_type_boolean) &&
                        !json_object_get_boolean(cur)) ||
                       (adm && json_object_is_type(adm, json_type_boolean) &&
                        !json_object_get_boolean(adm)));
        FUZZ_CHECK(printable(rep.stream_id) && printable(rep.replica_id));
    }
    json_object_put(o);
}

static void fuzz_disposition(const char *data)
{
    char name[256];

    if (agenta_disposition_filename(data, name, sizeof(name)) != 0)
        return;
    FUZZ_CHECK(name[0] && strcmp(name, ".") != 0 && strcmp(name, "..") != 0);
    FUZZ_CHECK(!strchr(name, '/') && !strchr(name, '\\'));
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        FUZZ_CHECK(*p >= 0x20 && *p != 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy;

    if (size < 1)
        return 0;
    copy = malloc(size);
    FUZZ_CHECK(copy != NULL);
    memcpy(copy, data + 1, size - 1);
    copy[size - 1] = '\0';
    switch (data[0] % 3) {
    case 0:
        fuzz_records(copy, size - 1);
        break;
    case 1:
        fuzz_beat(copy, size - 1);
        break;
    default:
        fuzz_disposition(copy);
        break;
    }
    free(copy);
    return 0;
}
