#include "provider/daytona/daytona_toolbox.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "provider/ws_client.h"

#define API_ANSWER_MAX (4u * 1024 * 1024)
#define BODY_MAX (64u * 1024 * 1024)
#define URL_MAX 8192 /* tb + a path (an escaped file path at most) */

/* out = tb + the path fmt gives (tb must be an http(s) URL). */
static int tb_vurl(const char *tb, struct buf *out, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
static int tb_vurl(const char *tb, struct buf *out, const char *fmt, va_list ap)
{
    int r;

    if (!tb || !daytona_url_ok(tb))
        return -EINVAL;
    buf_reset(out);
    r = buf_append_str(out, tb);
    if (r < 0)
        return r;
    return buf_vprintf(out, fmt, ap);
}

static int tb_url(const char *tb, struct buf *out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int tb_url(const char *tb, struct buf *out, const char *fmt, ...)
{
    va_list ap;
    int r;

    va_start(ap, fmt);
    r = tb_vurl(tb, out, fmt, ap);
    va_end(ap);
    return r;
}

/*
 * One JSON exchange with the toolbox: rq (method, body, options; its url is ignored) sent to
 * tb + the path fmt gives; the JSON answer into *ret_doc when ret_doc is given.
 */
static int tb_call(struct daytona_client *c, const char *tb, const struct daytona_request *rq,
                   json_object **ret_doc, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int tb_call(struct daytona_client *c, const char *tb, const struct daytona_request *rq,
                   json_object **ret_doc, const char *fmt, ...)
{
    struct daytona_request call = *rq;
    struct buf url;
    va_list ap;
    int r;

    buf_init(&url, URL_MAX);
    va_start(ap, fmt);
    r = tb_vurl(tb, &url, fmt, ap);
    va_end(ap);
    if (r >= 0) {
        call.url = buf_str(&url);
        r = daytona_client_call(c, &call, ret_doc, NULL);
    }
    buf_release(&url);
    return r;
}

int daytona_toolbox_home(struct daytona_client *c, const char *tb, char *ret, size_t len)
{
    json_object *doc = NULL;
    const char *dir;
    int r;

    r = tb_call(c, tb, &(struct daytona_request){.method = "GET"}, &doc, "/user-home-dir");
    if (r < 0)
        goto out;
    dir = jsonx_str(doc, "dir");
    if (!dir || dir[0] != '/' || !daytona_text_ok(dir) || strlen(dir) >= len ||
        strstr(dir, "/..")) {
        daytona_client_set_message(c, "user-home-dir: no usable dir");
        r = DAYTONA_E_SERVER;
        goto out;
    }
    memcpy(ret, dir, strlen(dir) + 1);
out:
    json_object_put(doc);
    return r;
}

int daytona_toolbox_execute(struct daytona_client *c, const char *tb, const char *command,
                            int timeout_s, size_t max_output, int *ret_exit_code,
                            struct buf *ret_output)
{
    json_object *body = json_object_new_object(), *doc = NULL, *res;
    struct daytona_request rq = {.method = "POST", .body = body};
    int r;

    if (!body) {
        r = -ENOMEM;
        goto out;
    }
    json_object_object_add(body, "command", json_object_new_string(command));
    if (timeout_s > 0)
        json_object_object_add(body, "timeout", json_object_new_int(timeout_s));
    rq.timeout_ms = timeout_s > 0 ? (long)timeout_s * 1000 + 30000 : 0;
    rq.answer_max = max_output + 65536;
    r = tb_call(c, tb, &rq, &doc, "/process/execute");
    if (r < 0)
        goto out;
    res = jsonx_get(doc, "exitCode");
    if (!res || !json_object_is_type(res, json_type_int)) {
        daytona_client_set_message(c, "execute: no exitCode");
        r = DAYTONA_E_SERVER;
        goto out;
    }
    if (ret_output) {
        const char *text = jsonx_str(doc, "result");

        r = buf_append_str(ret_output, text ? text : "");
        if (r < 0)
            goto out;
    }
    *ret_exit_code = json_object_get_int(res);
    r = 0;
out:
    json_object_put(body);
    json_object_put(doc);
    return r;
}

int daytona_toolbox_session_create(struct daytona_client *c, const char *tb, const char *sid)
{
    json_object *body;
    int r;

    if (!daytona_id_ok(sid))
        return -EINVAL;
    body = json_object_new_object();
    if (!body)
        return -ENOMEM;
    json_object_object_add(body, "sessionId", json_object_new_string(sid));
    r = tb_call(c, tb, &(struct daytona_request){.method = "POST", .body = body}, NULL,
                "/process/session");
    json_object_put(body);
    return r;
}

int daytona_toolbox_session_delete(struct daytona_client *c, const char *tb, const char *sid)
{
    int r;

    if (!daytona_id_ok(sid))
        return -EINVAL;
    r = tb_call(c, tb, &(struct daytona_request){.method = "DELETE"}, NULL, "/process/session/%s",
                sid);
    return r == -ENOENT ? 0 : r;
}

int daytona_toolbox_exec(struct daytona_client *c, const char *tb, const char *sid,
                         const char *command, bool suppress_input_echo,
                         char ret_cmd_id[DAYTONA_ID_MAX])
{
    json_object *body, *doc = NULL;
    const char *cid;
    int r;

    if (!daytona_id_ok(sid))
        return -EINVAL;
    body = json_object_new_object();
    if (!body)
        return -ENOMEM;
    json_object_object_add(body, "command", json_object_new_string(command));
    json_object_object_add(body, "runAsync", json_object_new_boolean(1));
    if (suppress_input_echo)
        json_object_object_add(body, "suppressInputEcho", json_object_new_boolean(1));
    r = tb_call(c, tb, &(struct daytona_request){.method = "POST", .body = body}, &doc,
                "/process/session/%s/exec", sid);
    if (r < 0)
        goto out;
    cid = jsonx_str(doc, "cmdId");
    if (!daytona_id_ok(cid)) {
        daytona_client_set_message(c, "exec: no usable cmdId");
        r = DAYTONA_E_SERVER;
        goto out;
    }
    snprintf(ret_cmd_id, DAYTONA_ID_MAX, "%s", cid);
out:
    json_object_put(body);
    json_object_put(doc);
    return r;
}

int daytona_toolbox_command_status(struct daytona_client *c, const char *tb, const char *sid,
                                   const char *cid, int *ret_exit_code)
{
    json_object *doc = NULL, *code;
    int r;

    if (!daytona_id_ok(sid) || !daytona_id_ok(cid))
        return -EINVAL;
    r = tb_call(c, tb, &(struct daytona_request){.method = "GET", .skip_activity = true}, &doc,
                "/process/session/%s/command/%s", sid, cid);
    if (r < 0)
        goto out;
    code = jsonx_get(doc, "exitCode");
    if (code && json_object_is_type(code, json_type_int)) {
        *ret_exit_code = json_object_get_int(code);
        r = 1;
    } else {
        r = 0;
    }
out:
    json_object_put(doc);
    return r;
}

int daytona_toolbox_input(struct daytona_client *c, const char *tb, const char *sid,
                          const char *cid, const char *data, size_t len, bool skip_activity)
{
    json_object *body;
    int r;

    if (!daytona_id_ok(sid) || !daytona_id_ok(cid))
        return -EINVAL;
    body = json_object_new_object();
    if (!body)
        return -ENOMEM;
    json_object_object_add(body, "data", json_object_new_string_len(data, (int)len));
    r = tb_call(
        c, tb,
        &(struct daytona_request){.method = "POST", .body = body, .skip_activity = skip_activity},
        NULL, "/process/session/%s/command/%s/input", sid, cid);
    json_object_put(body);
    return r;
}

static int append_member(json_object *doc, const char *key, struct buf *out)
{
    json_object *v;

    if (!out)
        return 0;
    v = jsonx_get(doc, key);
    if (!v || !json_object_is_type(v, json_type_string))
        return 0;
    return buf_append(out, json_object_get_string(v), (size_t)json_object_get_string_len(v));
}

int daytona_toolbox_logs(struct daytona_client *c, const char *tb, const char *sid, const char *cid,
                         struct buf *ret_raw, struct buf *ret_stdout, struct buf *ret_stderr)
{
    json_object *doc = NULL;
    size_t cap = (ret_raw ? ret_raw->max : 0) + (ret_stdout ? ret_stdout->max : 0) +
                 (ret_stderr ? ret_stderr->max : 0);
    int r;

    if (!daytona_id_ok(sid) || !daytona_id_ok(cid))
        return -EINVAL;
    /* the JSON answer holds the log up to three times (escaped): size the cap for that */
    if (cap > BODY_MAX)
        cap = BODY_MAX;
    r = tb_call(c, tb,
                &(struct daytona_request){
                    .method = "GET", .skip_activity = true, .answer_max = cap * 2 + 65536},
                &doc, "/process/session/%s/command/%s/logs", sid, cid);
    if (r < 0)
        goto out;
    if (!doc || !json_object_is_type(doc, json_type_object)) {
        daytona_client_set_message(c,
                                   "logs: not a JSON object (is X-Daytona-SDK-Version honoured?)");
        r = DAYTONA_E_SERVER;
        goto out;
    }
    r = append_member(doc, "output", ret_raw);
    if (r >= 0)
        r = append_member(doc, "stdout", ret_stdout);
    if (r >= 0)
        r = append_member(doc, "stderr", ret_stderr);
out:
    json_object_put(doc);
    return r;
}

int daytona_toolbox_follow(struct daytona_client *c, const char *tb, const char *sid,
                           const char *cid, bool skip_activity, struct ws_conn **ret, char *err,
                           size_t errlen)
{
    struct ws_options o = {0};
    const char *headers[4];
    struct buf url, auth;
    int r;

    if (!daytona_id_ok(sid) || !daytona_id_ok(cid))
        return -EINVAL;
    buf_init(&url, 4096);
    buf_init(&auth, DAYTONA_KEY_MAX + 64);
    r = tb_url(tb, &url, "/process/session/%s/command/%s/logs?follow=true", sid, cid);
    if (r >= 0)
        r = buf_printf(&auth, "Authorization: Bearer %s", daytona_client_config(c)->api_key);
    if (r < 0)
        goto out;
    headers[0] = buf_str(&auth);
    headers[1] = "X-Daytona-SDK-Version: " DAYTONA_SDK_VERSION;
    headers[2] = "X-Daytona-Source: agent-runner";
    headers[3] = "X-Daytona-Skip-Last-Activity-Update: true";
    o.url = buf_str(&url);
    o.headers = headers;
    o.nheaders = skip_activity ? 4 : 3;
    o.ca_file = daytona_client_config(c)->ca_file[0] ? daytona_client_config(c)->ca_file : NULL;
    o.connect_timeout_ms = (int)daytona_client_config(c)->connect_timeout_ms;
    o.max_frame = WS_DEFAULT_MAX_FRAME;
    r = ws_connect(&o, ret, err, errlen);
out:
    if (auth.data)
        explicit_bzero(auth.data, auth.cap);
    buf_release(&auth);
    buf_release(&url);
    return r;
}

int daytona_toolbox_upload(struct daytona_client *c, const char *tb,
                           const struct daytona_toolbox_file *f, size_t n)
{
    struct daytona_request rq = {.method = "POST"};
    curl_mime *mime = NULL;
    json_object *doc = NULL, *errors;
    struct buf url, resp;
    long status = 0;
    char name[48], err[96];
    int r = 0;

    buf_init(&url, 4096);
    buf_init(&resp, API_ANSWER_MAX);
    if (n == 0)
        goto out;
    r = tb_url(tb, &url, "/files/bulk-upload");
    if (r < 0)
        goto out;
    mime = daytona_client_mime(c);
    if (!mime) {
        r = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        curl_mimepart *part;

        if (!f[i].path || !f[i].path[0] || !daytona_text_ok(f[i].path)) {
            daytona_client_set_message(c, "upload: bad path");
            r = -EINVAL;
            goto out;
        }
        /* the daemon needs the .path part before its .file part */
        part = curl_mime_addpart(mime);
        snprintf(name, sizeof(name), "files[%zu].path", i);
        if (!part || curl_mime_name(part, name) != CURLE_OK ||
            curl_mime_data(part, f[i].path, CURL_ZERO_TERMINATED) != CURLE_OK) {
            r = -ENOMEM;
            goto out;
        }
        part = curl_mime_addpart(mime);
        snprintf(name, sizeof(name), "files[%zu].file", i);
        if (!part || curl_mime_name(part, name) != CURLE_OK ||
            curl_mime_data(part, f[i].len ? f[i].data : "", f[i].len) != CURLE_OK ||
            curl_mime_filename(part, f[i].path) != CURLE_OK ||
            curl_mime_type(part, "application/octet-stream") != CURLE_OK) {
            r = -ENOMEM;
            goto out;
        }
    }
    rq.url = buf_str(&url);
    rq.mime = mime;
    r = daytona_client_fetch(c, &rq, &resp, &status);
    if (r == -EINVAL && resp.len &&
        jsonx_parse(resp.data, resp.len, 16, &doc, err, sizeof(err)) < 0)
        doc = NULL;
    errors = jsonx_get(doc, "errors");
    if (r == -EINVAL && errors && json_object_is_type(errors, json_type_array) &&
        json_object_array_length(errors) > 0) {
        json_object *e0 = json_object_array_get_idx(errors, 0);
        char msg[DAYTONA_MESSAGE_MAX];

        snprintf(msg, sizeof(msg), "upload of \"%.80s\" failed: %.120s",
                 jsonx_str(e0, "path") ? jsonx_str(e0, "path") : "?",
                 jsonx_str(e0, "error") ? jsonx_str(e0, "error") : "?");
        daytona_client_set_message(c, msg);
        r = -EIO;
    }
out:
    curl_mime_free(mime);
    json_object_put(doc);
    buf_release(&url);
    buf_release(&resp);
    return r;
}

static int files_query(struct daytona_client *c, const char *tb, const char *what, const char *path,
                       const char *mode)
{
    char *ep = NULL, *em = NULL;
    int r;

    if (!path || !path[0] || !daytona_text_ok(path) ||
        (mode && strspn(mode, "01234567") != strlen(mode)))
        return -EINVAL;
    ep = daytona_client_escape(c, path);
    em = mode ? daytona_client_escape(c, mode) : NULL;
    if (!ep || (mode && !em)) {
        r = -ENOMEM;
        goto out;
    }
    r = tb_call(c, tb, &(struct daytona_request){.method = "POST"}, NULL, "/files/%s?path=%s%s%s",
                what, ep, em ? "&mode=" : "", em ? em : "");
out:
    free(ep);
    free(em);
    return r;
}

int daytona_toolbox_folder(struct daytona_client *c, const char *tb, const char *path,
                           const char *mode)
{
    return files_query(c, tb, "folder", path, mode ? mode : "755");
}

int daytona_toolbox_chmod(struct daytona_client *c, const char *tb, const char *path,
                          const char *mode)
{
    return files_query(c, tb, "permissions", path, mode);
}

int daytona_toolbox_download(struct daytona_client *c, const char *tb, const char *path,
                             struct buf *ret)
{
    struct daytona_request rq = {.method = "GET"};
    struct buf url;
    char *ep;
    long status;
    int r;

    if (!path || !path[0] || !daytona_text_ok(path))
        return -EINVAL;
    buf_init(&url, 8192);
    ep = daytona_client_escape(c, path);
    if (!ep) {
        buf_release(&url);
        return -ENOMEM;
    }
    r = tb_url(tb, &url, "/files/download?path=%s", ep);
    if (r >= 0) {
        rq.url = buf_str(&url);
        r = daytona_client_fetch(c, &rq, ret, &status);
    }
    free(ep);
    buf_release(&url);
    return r;
}

int daytona_shell_quote(const char *s, struct buf *out)
{
    int r = buf_append_char(out, '\'');

    for (; r >= 0 && *s; s++) {
        if (*s == '\'')
            r = buf_append_str(out, "'\\''");
        else
            r = buf_append_char(out, *s);
    }
    if (r >= 0)
        r = buf_append_char(out, '\'');
    return r;
}
