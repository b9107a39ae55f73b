#include "environment/env_setup.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "base/fstree.h"
#include "base/util.h"

int env_setup_create(const char *state_dir, struct env_paths *ret, char *err, size_t errlen)
{
    struct env_paths p;
    struct sockaddr_un sa;
    char envs[256];
    int r;

    memset(&p, 0, sizeof(p));
    r = util_random_hex(p.id, ENV_ID_LEN / 2);
    if (r < 0)
        goto fail;
    snprintf(envs, sizeof(envs), "%s/envs", state_dir);
    r = util_mkdir_p(envs, 0700);
    if (r < 0)
        goto fail;
    if ((size_t)snprintf(p.dir, sizeof(p.dir), "%s/%s", envs, p.id) >= sizeof(p.dir) ||
        (size_t)snprintf(p.socket, sizeof(p.socket), "%s/keeper.sock", p.dir) >=
            sizeof(sa.sun_path)) {
        r = -ENAMETOOLONG;
        goto fail;
    }
    snprintf(p.workspace, sizeof(p.workspace), "%s/workspace", p.dir);
    if (mkdir(p.dir, 0700) == -1) {
        r = -errno;
        goto fail;
    }
    if (mkdir(p.workspace, 0755) == -1) {
        r = -errno;
        (void)fstree_remove(p.dir);
        goto fail;
    }
    *ret = p;
    return 0;
fail:
    snprintf(err, errlen, "cannot create the environment folder under '%s': %s", state_dir,
             strerror(-r));
    return r;
}

static int put(const struct env_paths *paths, const char *rel, const char *content, mode_t mode,
               const char *field, char *err, size_t errlen)
{
    int r = util_write_file_beneath(paths->workspace, rel, content, strlen(content), mode);

    if (r == -ELOOP || r == -ENOTDIR || r == -EISDIR || r == -EINVAL) {
        snprintf(err, errlen, "%s: cannot write '%s' inside the workspace", field, rel);
        return AR_E_INVALID_REQUEST;
    }
    if (r < 0)
        snprintf(err, errlen, "%s: writing '%s' failed: %s", field, rel, strerror(-r));
    return r;
}

static int put_skills(const struct env_paths *paths, const struct run_request *req, char *err,
                      size_t errlen)
{
    const char *root = req->harness == HARNESS_CLAUDE ? ".claude/skills" : ".agents/skills";
    char rel[512], field[64];
    int r;

    for (size_t i = 0; i < req->nskills; i++) {
        const struct skill *s = &req->skills[i];
        struct buf md;

        snprintf(field, sizeof(field), "skills[%zu]", i);
        buf_init(&md, 256 * 1024);
        r = buf_printf(&md, "---\nname: %s\ndescription: %s\n", s->name, s->description);
        if (r == 0 && s->disable_model_invocation)
            r = buf_append_str(&md, "disable-model-invocation: true\n");
        if (r == 0)
            r = buf_printf(&md, "---\n\n%s\n", s->body);
        if (r < 0) {
            buf_release(&md);
            snprintf(err, errlen, "%s: too large", field);
            return AR_E_INVALID_REQUEST;
        }
        snprintf(rel, sizeof(rel), "%s/%s/SKILL.md", root, s->name);
        r = put(paths, rel, md.data, 0644, field, err, errlen);
        buf_release(&md);
        if (r < 0)
            return r;
        for (size_t j = 0; j < s->nfiles; j++) {
            snprintf(field, sizeof(field), "skills[%zu].files[%zu]", i, j);
            snprintf(rel, sizeof(rel), "%s/%s/%s", root, s->name, s->files[j].path);
            r = put(paths, rel, s->files[j].content, s->files[j].executable ? 0755 : 0644, field,
                    err, errlen);
            if (r < 0)
                return r;
        }
    }
    return 0;
}

int env_setup_workspace(const struct env_paths *paths, const struct run_request *req, char *err,
                        size_t errlen)
{
    int r;

    if (req->agents_md) {
        r = put(paths, req->harness == HARNESS_CLAUDE ? "CLAUDE.md" : "AGENTS.md",
                req->agents_md, 0644, "agentsMd", err, errlen);
        if (r < 0)
            return r;
    }
    for (size_t i = 0; i < req->nharness_files; i++) {
        char field[48];

        snprintf(field, sizeof(field), "harnessFiles[%zu].path", i);
        r = put(paths, req->harness_files[i].path, req->harness_files[i].content, 0644, field,
                err, errlen);
        if (r < 0)
            return r;
    }
    return put_skills(paths, req, err, errlen);
}
