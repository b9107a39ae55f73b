#include "session/identity.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "core/policy.h"
#include "harness/harness.h"

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int canon(json_object *o, struct buf *out, int depth)
{
    int r = 0;

    if (depth > 128)
        return -ELOOP;
    switch (json_object_get_type(o)) {
    case json_type_null:
        return buf_append_str(out, "null");
    case json_type_object: {
        size_t n = (size_t)json_object_object_length(o), k = 0;
        const char **keys;
        bool first = true;

        keys = calloc(n ? n : 1, sizeof(*keys));
        if (!keys)
            return -ENOMEM;
        json_object_object_foreach(o, key, val)
        {
            if (val)
                keys[k++] = key;
        }
        qsort(keys, k, sizeof(*keys), cmp_keys);
        r = buf_append_char(out, '{');
        for (size_t i = 0; r == 0 && i < k; i++) {
            json_object *v = jsonx_get(o, keys[i]);
            json_object *ks = json_object_new_string(keys[i]);

            if (!first)
                r = buf_append_char(out, ',');
            first = false;
            if (r == 0)
                r = buf_append_str(out, jsonx_text(ks, NULL));
            json_object_put(ks);
            if (r == 0)
                r = buf_append_char(out, ':');
            if (r == 0)
                r = canon(v, out, depth + 1);
        }
        free(keys);
        return r ? r : buf_append_char(out, '}');
    }
    case json_type_array:
        r = buf_append_char(out, '[');
        for (size_t i = 0; r == 0 && i < json_object_array_length(o); i++) {
            if (i)
                r = buf_append_char(out, ',');
            if (r == 0)
                r = canon(json_object_array_get_idx(o, i), out, depth + 1);
        }
        return r ? r : buf_append_char(out, ']');
    default:
        return buf_append_str(out, jsonx_text(o, NULL));
    }
}

int identity_canonical(json_object *o, struct buf *out)
{
    return canon(o, out, 0);
}

static int sha256(const void *data, size_t len, uint8_t ret[IDENTITY_DIGEST_LEN])
{
    unsigned int n = 0;

    if (EVP_Digest(data, len, ret, &n, EVP_sha256(), NULL) != 1 || n != IDENTITY_DIGEST_LEN)
        return -EIO;
    return 0;
}

static int digest_of(json_object *doc, uint8_t ret[IDENTITY_DIGEST_LEN])
{
    struct buf b;
    int r;

    buf_init(&b, CANONICAL_MAX);
    r = identity_canonical(doc, &b);
    if (r == 0)
        r = sha256(buf_str(&b), b.len, ret);
    buf_release(&b);
    return r;
}

int identity_session_key(const char *project_id, const char *session_id, char *ret,
                         size_t size)
{
    int n = snprintf(ret, size, "%s:%s", project_id, session_id);

    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int identity_pool_key(const struct run_request *req, char *ret, size_t size)
{
    if (!req->session_id || !req->project_id)
        return -ENOENT;
    return identity_session_key(req->project_id, req->session_id, ret, size);
}

static void copy_member(json_object *dst, json_object *src, const char *key)
{
    json_object *v = jsonx_get(src, key);

    if (v)
        json_object_object_add(dst, key, json_object_get(v));
}

/* modelConnection without credential values */
static json_object *connection_shape(json_object *mc)
{
    json_object *o = json_object_new_object(), *creds = jsonx_get(mc, "credentials");

    copy_member(o, mc, "provider");
    copy_member(o, mc, "deployment");
    copy_member(o, mc, "endpoint");
    copy_member(o, mc, "credentialMode");
    copy_member(o, mc, "environment");
    if (creds && json_object_is_type(creds, json_type_array)) {
        json_object *list = json_object_new_array();
        for (size_t i = 0; i < json_object_array_length(creds); i++) {
            json_object *c = json_object_array_get_idx(creds, i), *s = json_object_new_object();
            copy_member(s, c, "binding");
            copy_member(s, c, "usage");
            json_object_array_add(list, s);
        }
        json_object_object_add(o, "credentials", list);
    }
    return o;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The names of a server's headers, sorted as sent, then lower-cased (at most 128 bytes). */
static json_object *header_names(const struct mcp_server *sv)
{
    json_object *names = json_object_new_array();
    const char *list[MCP_SERVER_HEADERS_MAX];
    char lower[129];
    size_t n = 0;

    for (size_t i = 0; i < sv->nheaders && n < MCP_SERVER_HEADERS_MAX; i++)
        list[n++] = sv->headers[i].name;
    qsort(list, n, sizeof(list[0]), cmp_str);
    for (size_t i = 0; names && i < n; i++) {
        size_t len = strlen(list[i]);

        if (len >= sizeof(lower))
            len = sizeof(lower) - 1;
        for (size_t k = 0; k < len; k++)
            lower[k] = (char)tolower((unsigned char)list[i][k]);
        lower[len] = '\0';
        json_object_array_add(names, json_object_new_string(lower));
    }
    return names;
}

/*
 * The tool set's own digest, hex: SHA-256 of the canonical
 * {"v":1, "callbackEndpoint"?, "customTools"? (as sent), "mcpServers":[{name, url, permission,
 * include ("all" or the names), headers (their names)}]}.
 */
static int tools_fp(const struct run_request *req, char hex[2 * IDENTITY_DIGEST_LEN + 1])
{
    const struct run_tools *t = &req->tools;
    json_object *doc = json_object_new_object(), *servers = json_object_new_array();
    uint8_t d[IDENTITY_DIGEST_LEN];
    int r;

    if (!doc || !servers) {
        json_object_put(doc);
        json_object_put(servers);
        return -ENOMEM;
    }
    json_object_object_add(doc, "v", json_object_new_int(1));
    if (t->callback_endpoint)
        json_object_object_add(doc, "callbackEndpoint",
                               json_object_new_string(t->callback_endpoint));
    if (req->custom_tools)
        json_object_object_add(doc, "customTools", json_object_get(req->custom_tools));
    for (size_t i = 0; i < t->nservers; i++) {
        const struct mcp_server *sv = &t->servers[i];
        json_object *o = json_object_new_object();

        json_object_object_add(o, "name", json_object_new_string(sv->name));
        json_object_object_add(o, "url", json_object_new_string(sv->url));
        json_object_object_add(o, "permission",
                               json_object_new_string(policy_permission_name(sv->permission)));
        json_object_object_add(o, "include",
                               sv->include_all ? json_object_new_string("all")
                               : sv->include   ? json_object_get(sv->include)
                                               : json_object_new_array());
        json_object_object_add(o, "headers", header_names(sv));
        json_object_array_add(servers, o);
    }
    json_object_object_add(doc, "mcpServers", servers);
    r = digest_of(doc, d);
    json_object_put(doc);
    if (r == 0)
        util_hex_encode(d, sizeof(d), hex);
    return r;
}

int identity_config_fp(const struct run_request *req, uint8_t ret[IDENTITY_DIGEST_LEN])
{
    static const char *const plain[] = {"model",        "connection",   "modelCapabilities",
                                        "agentsMd",     "systemPrompt", "appendSystemPrompt",
                                        "skills",       "permissions",  "sandboxPermission",
                                        "harnessFiles", "modelGateway"};
    json_object *root = req->root, *doc = json_object_new_object(), *v;
    int r;

    json_object_object_add(doc, "harness", json_object_new_string(harness_kind_name(req->harness)));
    /* the provider as resolved: an absent sandbox is "local", the same environment */
    if (req->sandbox)
        json_object_object_add(doc, "sandbox", json_object_new_string(req->sandbox));
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
        copy_member(doc, root, plain[i]);
    if (req->harness == HARNESS_CODEX)
        json_object_object_add(doc, "harnessMode",
                               json_object_new_string(req->harness_mode ? req->harness_mode
                                                                        : "agent-full-access"));
    v = jsonx_get(root, "modelConnection");
    if (v)
        json_object_object_add(doc, "modelConnection", connection_shape(v));
    /* the run's tool set as configured: tools, callback endpoint, MCP servers without any
     * credential value (a rotated credential keeps the session: it never enters the sandbox) */
    if (req->custom_tools || req->tools.callback_endpoint || req->mcp_servers) {
        char hex[2 * IDENTITY_DIGEST_LEN + 1];

        r = tools_fp(req, hex);
        if (r < 0) {
            json_object_put(doc);
            return r;
        }
        json_object_object_add(doc, "toolSet", json_object_new_string(hex));
    }
    v = jsonx_path(req->run_context, "workflow.artifact.id");
    if (v)
        json_object_object_add(doc, "workflowArtifactId", json_object_get(v));
    r = digest_of(doc, ret);
    json_object_put(doc);
    return r;
}

static bool is_media(const struct content_block *b)
{
    return b->type == BLOCK_IMAGE || (b->type == BLOCK_OTHER && b->data);
}

/* The history fingerprint; with_tools false leaves the tool-call ids out (identity_user_fp). */
static int history_fp(const struct chat_message *messages, size_t n,
                      const char *const *extra_tool_ids, size_t n_extra, bool with_tools,
                      uint8_t ret[IDENTITY_DIGEST_LEN])
{
    json_object *doc = json_object_new_object(), *texts = json_object_new_array();
    json_object *attachments = json_object_new_array(), *media = json_object_new_array();
    json_object *tool_ids = json_object_new_array(), *seen = json_object_new_object();
    int prompts = 0, r;

    for (size_t i = 0; i < n; i++) {
        const struct chat_message *m = &messages[i];
        bool user = m->role && strcmp(m->role, "user") == 0;
        json_object *m_att = json_object_new_array(), *m_media = json_object_new_array();
        struct buf text;

        buf_init(&text, CANONICAL_MAX);
        for (size_t j = 0; j < m->nblocks; j++) {
            const struct content_block *b = &m->blocks[j];

            if ((b->type == BLOCK_TOOL_CALL || b->type == BLOCK_TOOL_RESULT) &&
                b->tool_call_id && !jsonx_get(seen, b->tool_call_id)) {
                json_object_object_add(seen, b->tool_call_id, json_object_new_boolean(1));
                json_object_array_add(tool_ids, json_object_new_string(b->tool_call_id));
            }
            if (!user)
                continue;
            if (b->type == BLOCK_TEXT && b->text) {
                if (text.len)
                    buf_append_char(&text, '\n');
                buf_append_str(&text, b->text);
            } else if (b->type == BLOCK_ATTACHMENT && (b->attachment_id || b->uri)) {
                json_object_array_add(m_att, json_object_new_string(b->attachment_id
                                                                        ? b->attachment_id
                                                                        : b->uri));
            } else if (is_media(b) && b->data) {
                uint8_t d[IDENTITY_DIGEST_LEN];
                char hex[2 * IDENTITY_DIGEST_LEN + 1];
                struct buf mb;

                buf_init(&mb, CANONICAL_MAX);
                buf_printf(&mb, "%s\n", b->mime_type ? b->mime_type : "");
                buf_append_str(&mb, b->data);
                if (sha256(buf_str(&mb), mb.len, d) == 0) {
                    for (size_t k = 0; k < IDENTITY_DIGEST_LEN; k++)
                        snprintf(hex + 2 * k, 3, "%02x", d[k]);
                    json_object_array_add(m_media, json_object_new_string(hex));
                }
                buf_release(&mb);
            }
        }
        if (user) {
            json_object_array_add(texts, json_object_new_string(buf_str(&text)));
            json_object_array_add(attachments, m_att);
            json_object_array_add(media, m_media);
            prompts++;
        } else {
            json_object_put(m_att);
            json_object_put(m_media);
        }
        buf_release(&text);
    }
    for (size_t i = 0; i < n_extra; i++) {
        if (!extra_tool_ids[i] || jsonx_get(seen, extra_tool_ids[i]))
            continue;
        json_object_object_add(seen, extra_tool_ids[i], json_object_new_boolean(1));
        json_object_array_add(tool_ids, json_object_new_string(extra_tool_ids[i]));
    }
    json_object_object_add(doc, "userTexts", texts);
    json_object_object_add(doc, "userAttachmentIds", attachments);
    json_object_object_add(doc, "userInlineMedia", media);
    if (with_tools)
        json_object_object_add(doc, "toolCallIds", tool_ids);
    else
        json_object_put(tool_ids);
    json_object_object_add(doc, "promptCount", json_object_new_int(prompts));
    r = digest_of(doc, ret);
    json_object_put(doc);
    json_object_put(seen);
    return r;
}

int identity_history_fp(const struct chat_message *messages, size_t n,
                        const char *const *extra_tool_ids, size_t n_extra,
                        uint8_t ret[IDENTITY_DIGEST_LEN])
{
    return history_fp(messages, n, extra_tool_ids, n_extra, true, ret);
}

int identity_user_fp(const struct chat_message *messages, size_t n,
                     uint8_t ret[IDENTITY_DIGEST_LEN])
{
    return history_fp(messages, n, NULL, 0, false, ret);
}

int identity_credential_epoch(const struct run_request *req, const uint8_t key[IDENTITY_KEY_LEN],
                              uint8_t ret[IDENTITY_DIGEST_LEN])
{
    json_object *doc = json_object_new_object(), *env = json_object_new_object();
    json_object *creds = json_object_new_array();
    unsigned int n = 0;
    struct buf b;
    int r;

    for (size_t i = 0; i < req->mc.nenvironment; i++)
        json_object_object_add(env, req->mc.environment[i].name,
                               json_object_new_string(req->mc.environment[i].value));
    for (size_t i = 0; i < req->mc.ncredentials; i++) {
        json_object *c = json_object_new_object();
        json_object_object_add(c, "binding", json_object_new_string(req->mc.credentials[i].name));
        json_object_object_add(c, "value", json_object_new_string(req->mc.credentials[i].value));
        json_object_object_add(c, "usage", json_object_new_int((int)req->mc.credentials[i].usage));
        json_object_array_add(creds, c);
    }
    json_object_object_add(doc, "modelEnvironment", env);
    json_object_object_add(doc, "modelCredentials", creds);
    buf_init(&b, CANONICAL_MAX);
    r = identity_canonical(doc, &b);
    json_object_put(doc);
    if (r == 0 && (!HMAC(EVP_sha256(), key, IDENTITY_KEY_LEN, (const unsigned char *)buf_str(&b),
                         b.len, ret, &n) ||
                   n != IDENTITY_DIGEST_LEN))
        r = -EIO;
    /* the canonical text held credentials: wipe it before it goes back to the heap */
    if (b.data)
        OPENSSL_cleanse(b.data, b.cap);
    buf_release(&b);
    return r;
}

static bool fresh_user(const struct chat_message *m)
{
    bool content = false;

    if (!m->role || strcmp(m->role, "user") != 0)
        return false;
    for (size_t i = 0; i < m->nblocks; i++) {
        const struct content_block *b = &m->blocks[i];
        if (b->type == BLOCK_TOOL_CALL || b->type == BLOCK_TOOL_RESULT)
            return false;
        if ((b->type == BLOCK_TEXT && b->text && b->text[0]) || b->type == BLOCK_IMAGE ||
            b->type == BLOCK_ATTACHMENT)
            content = true;
    }
    return content;
}

bool identity_tail_is_fresh_user(const struct run_request *req)
{
    return req->nmessages > 0 && fresh_user(&req->messages[req->nmessages - 1]);
}

bool identity_minimal_history(const struct run_request *req)
{
    return req->nmessages == 1 && fresh_user(&req->messages[0]);
}
