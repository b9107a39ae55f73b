/*
 * engine_tools — the engine's side of the run's tools (engine_tools.h).
 */
#include "engine_tools.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/jsonx.h"
#include "base/util.h"
#include "harness/harness.h"
#include "proto/tool_channel.h"
#include "tools/tool_runner.h"
#include "turn/transcript.h"

static int hook_find(void *ctx, const char *name, const struct tool_spec **ret, char *err,
                     size_t errlen)
{
    struct engine_tools *h = ctx;

    return tool_runner_find(h->t->tools, name, ret, err, errlen);
}

static int hook_exec(void *ctx, const struct tool_spec *spec, const char *call_id,
                     json_object *args, bool (*stop)(void *stop_ctx), void *stop_ctx,
                     struct tool_result *ret)
{
    struct engine_tools *h = ctx;

    return tool_runner_exec(h->t->tools, spec, call_id, args, h->t->req->session_id, stop, stop_ctx,
                            ret);
}

/* A parked call's arguments: <environment>/calls/<token>.json, outside anything the sandbox
 * sees, gone with the environment. */
static int stash_path(const struct engine_tools *h, const char *token, char *out, size_t outlen)
{
    for (const char *p = token; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return -EINVAL;
    if (snprintf(out, outlen, "%s/calls/%s.json", h->env->paths.dir, token) >= (int)outlen)
        return -ENAMETOOLONG;
    return 0;
}

static int hook_stash(void *ctx, const char *token, json_object *args)
{
    struct engine_tools *h = ctx;
    char dir[sizeof(h->env->paths.dir) + 8], path[PATH_MAX];
    size_t len;
    const char *text = jsonx_text(args, &len);
    int r = stash_path(h, token, path, sizeof(path));

    if (r < 0 || !text)
        return r < 0 ? r : -ENOMEM;
    snprintf(dir, sizeof(dir), "%s/calls", h->env->paths.dir);
    r = util_mkdir_p(dir, 0700);
    if (r == 0)
        r = util_write_file(path, text, len, 0600);
    return r;
}

static json_object *hook_unstash(void *ctx, const char *token)
{
    struct engine_tools *h = ctx;
    char path[PATH_MAX], err[128], *data = NULL;
    json_object *args = NULL;
    size_t len = 0;

    if (stash_path(h, token, path, sizeof(path)) < 0 ||
        util_read_file(path, TOOL_CHANNEL_LINE_MAX, &data, &len) < 0)
        return NULL;
    (void)unlink(path);
    if (jsonx_parse(data, len, 256, &args, err, sizeof(err)) < 0)
        args = NULL;
    free(data);
    return args;
}

static json_object *hook_client_output(void *ctx, const char *call_id, const char *tool,
                                       json_object *args, bool *ret_is_error)
{
    struct engine_tools *h = ctx;

    return transcript_client_output(h->t->req, call_id, tool, args, ret_is_error);
}

int engine_tools_usable(const struct run_request *req, bool remote, const char *provider,
                        char *err, size_t errlen)
{
    if (!remote || req->harness == HARNESS_PI || req->harness == HARNESS_SCRIPTED ||
        (req->tools.ncustom == 0 && req->tools.nservers == 0))
        return 0;
    snprintf(err, errlen,
             "customTools/mcpServers: harness %s reaches the run's tools through the "
             "agenta-tools MCP bridge, which the %s sandbox cannot run (use sandbox \"local\", "
             "or harness pi)",
             harness_kind_name(req->harness), provider);
    return AR_E_INVALID_REQUEST;
}

const struct turn_tools *engine_tools_init(struct engine_tools *h, struct engine_turn *t,
                                           const struct environment *env)
{
    if (!t->tools)
        return NULL;
    h->t = t;
    h->env = env;
    h->ops = (struct turn_tools){.find = hook_find,
                                 .exec = hook_exec,
                                 .stash = hook_stash,
                                 .unstash = hook_unstash,
                                 .client_output = hook_client_output,
                                 .ctx = h};
    return &h->ops;
}

/*
 * A cold start with tools: the MCP servers are reached and listed (SSRF guard first) and the
 * public specs become the sandbox's tool file. An error names the server at fault.
 */
int engine_tools_into_plan(struct engine_turn *t, char *err, size_t errlen)
{
    struct buf specs;
    int r;

    if (!tool_runner_any(t->tools) || t->tools_file)
        return 0;
    r = tool_runner_connect(t->tools, err, errlen);
    if (r < 0)
        return r;
    buf_init(&specs, TOOL_PUBLIC_MAX);
    r = tool_runner_public_json(t->tools, &specs);
    if (r == 0) {
        harness_add_file(&t->plan, TOOL_RUNNER_TOOLS_FILE, buf_str(&specs), 0644);
        t->tools_file = true;
    } else {
        snprintf(err, errlen, "the run's tools do not fit the sandbox's tool list (%s)",
                 ar_strerror(r));
    }
    buf_release(&specs);
    return r;
}
