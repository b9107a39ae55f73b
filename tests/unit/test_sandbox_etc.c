/* sandbox_etc: the synthesized /etc, built against a fixture host root. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fstree.h"
#include "base/util.h"
#include "sandbox/etc.h"
#include "suites.h"

static char root[64];

static void put(const char *rel, const char *text, mode_t mode)
{
    char path[256];

    snprintf(path, sizeof(path), "%s%s", root, rel);
    CU_ASSERT_EQUAL(util_write_file(path, text, strlen(text), mode), 0);
    CU_ASSERT_EQUAL(chmod(path, mode), 0);
}

static void dir(const char *rel, mode_t mode)
{
    char path[256];

    snprintf(path, sizeof(path), "%s%s", root, rel);
    CU_ASSERT_EQUAL(util_mkdir_p(path, mode), 0);
    CU_ASSERT_EQUAL(chmod(path, mode), 0);
}

static void make_host(void)
{
    char path[256];

    snprintf(root, sizeof(root), "/tmp/ar-unit-etc-XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(root));
    dir("/etc/ssl/certs", 0755);
    dir("/etc/ssl/private", 0710);
    dir("/etc/agent-runner", 0700);
    dir("/etc/alternatives", 0755);
    put("/etc/shadow", "root:$6$secret:::::::\n", 0640);
    put("/etc/agent-runner/agent-runner.env", "AGENT_RUNNER_TOKEN=secret\n", 0600);
    put("/etc/ssl/private/key.pem", "-----BEGIN PRIVATE KEY-----\n", 0600);
    put("/etc/ssl/certs/ca-certificates.crt", "-----BEGIN CERTIFICATE-----\n", 0644);
    put("/etc/ssl/openssl.cnf", "# cnf\n", 0644);
    put("/etc/resolv.conf", "nameserver 192.0.2.53\n", 0644);
    put("/etc/ld.so.cache", "cache", 0600); /* not public: not bound */
    put("/etc/services", "http 80/tcp\n", 0644);
    put("/etc/passwd", "root:x:0:0::/root:/bin/sh\nhostuser:x:1000:1000::/home/h:/bin/sh\n", 0644);
    snprintf(path, sizeof(path), "%s/etc/localtime", root);
    CU_ASSERT_EQUAL(symlink("/usr/share/zoneinfo/Europe/Paris", path), 0);
    snprintf(path, sizeof(path), "%s/etc/alternatives/awk", root);
    CU_ASSERT_EQUAL(symlink("/usr/bin/mawk", path), 0);
}

static void test_sandbox_etc_view_has_only_public_and_synthesized_files(void)
{
    struct sandbox_etc_opts opts = {.host_root = NULL};
    const struct sandbox_etc_entry *e;
    struct sandbox_etc etc;
    char want[256];

    make_host();
    opts.host_root = root;
    opts.hostname = "box";
    CU_ASSERT_EQUAL_FATAL(sandbox_etc_build(&opts, &etc), 0);

    /* nothing secret, nothing of the host's /etc that is not on the list */
    for (size_t i = 0; i < etc.n; i++) {
        e = &etc.v[i];
        CU_ASSERT(strncmp(e->path, "/etc/", 5) == 0);
        CU_ASSERT_PTR_NULL(strstr(e->path, "shadow"));
        CU_ASSERT_PTR_NULL(strstr(e->path, "private"));
        CU_ASSERT_PTR_NULL(strstr(e->path, "agent-runner"));
        if (e->kind == SANDBOX_ETC_BIND || e->kind == SANDBOX_ETC_COPY)
            CU_ASSERT(strncmp(e->src, root, strlen(root)) == 0);
        if (e->kind == SANDBOX_ETC_DATA)
            CU_ASSERT_PTR_NULL(strstr(e->data, "secret"));
    }
    CU_ASSERT_PTR_NULL(sandbox_etc_find(&etc, "/etc/ld.so.cache")); /* 0600 on the host */
    CU_ASSERT_PTR_NULL(sandbox_etc_find(&etc, "/etc/ssl"));

    e = sandbox_etc_find(&etc, "/etc/passwd");
    CU_ASSERT_FATAL(e && e->kind == SANDBOX_ETC_DATA);
    CU_ASSERT_PTR_NOT_NULL(strstr(e->data, "agent:x:1000:1000:agent:/home/agent:"));
    CU_ASSERT_PTR_NULL(strstr(e->data, "hostuser")); /* never the host's users */
    e = sandbox_etc_find(&etc, "/etc/group");
    CU_ASSERT_FATAL(e && e->kind == SANDBOX_ETC_DATA);
    CU_ASSERT_PTR_NOT_NULL(strstr(e->data, "agent:x:1000:"));
    e = sandbox_etc_find(&etc, "/etc/hosts");
    CU_ASSERT_FATAL(e && e->kind == SANDBOX_ETC_DATA);
    CU_ASSERT_PTR_NOT_NULL(strstr(e->data, "127.0.0.1\tlocalhost\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e->data, "box"));
    e = sandbox_etc_find(&etc, "/etc/nsswitch.conf");
    CU_ASSERT_FATAL(e && e->kind == SANDBOX_ETC_DATA);
    CU_ASSERT_PTR_NOT_NULL(strstr(e->data, "hosts: files dns\n"));
    CU_ASSERT_PTR_NULL(strstr(e->data, "sss"));
    e = sandbox_etc_find(&etc, "/etc/resolv.conf");
    CU_ASSERT_FATAL(e && e->kind == SANDBOX_ETC_DATA);
    CU_ASSERT_STRING_EQUAL(e->data, "nameserver 192.0.2.53\n");
    e = sandbox_etc_find(&etc, "/etc/localtime");
    CU_ASSERT_FATAL(e && e->kind == SANDBOX_ETC_SYMLINK);
    CU_ASSERT_STRING_EQUAL(e->target, "/usr/share/zoneinfo/Europe/Paris");
    e = sandbox_etc_find(&etc, "/etc/mtab");
    CU_ASSERT_FATAL(e && e->kind == SANDBOX_ETC_SYMLINK);
    e = sandbox_etc_find(&etc, "/etc/ssl/certs");
    CU_ASSERT_FATAL(e && e->kind == SANDBOX_ETC_BIND);
    snprintf(want, sizeof(want), "%s/etc/ssl/certs", root);
    CU_ASSERT_STRING_EQUAL(e->src, want);
    /* a public host file is copied (no mount of its own), a folder bound */
    e = sandbox_etc_find(&etc, "/etc/ssl/openssl.cnf");
    CU_ASSERT_FATAL(e && e->kind == SANDBOX_ETC_COPY);
    snprintf(want, sizeof(want), "%s/etc/ssl/openssl.cnf", root);
    CU_ASSERT_STRING_EQUAL(e->src, want);
    e = sandbox_etc_find(&etc, "/etc/alternatives");
    CU_ASSERT_FATAL(e && e->kind == SANDBOX_ETC_BIND);
    e = sandbox_etc_find(&etc, "/etc/services");
    CU_ASSERT_FATAL(e && e->kind == SANDBOX_ETC_COPY);
    CU_ASSERT_PTR_NULL(sandbox_etc_find(&etc, "/etc/protocols")); /* absent on this host */
    sandbox_etc_release(&etc);
    sandbox_etc_release(&etc); /* idempotent */
    fstree_remove(root);
}

static void test_sandbox_etc_without_host_files(void)
{
    struct sandbox_etc_opts opts = {.host_root = "/nonexistent-root", .hostname = NULL};
    const struct sandbox_etc_entry *e;
    struct sandbox_etc etc;

    CU_ASSERT_EQUAL_FATAL(sandbox_etc_build(&opts, &etc), 0);
    e = sandbox_etc_find(&etc, "/etc/resolv.conf");
    CU_ASSERT_FATAL(e != NULL);
    CU_ASSERT_EQUAL(e->len, 0);
    e = sandbox_etc_find(&etc, "/etc/hostname");
    CU_ASSERT_FATAL(e != NULL);
    CU_ASSERT_STRING_EQUAL(e->data, "sandbox\n");
    for (size_t i = 0; i < etc.n; i++)
        CU_ASSERT(etc.v[i].kind != SANDBOX_ETC_BIND && etc.v[i].kind != SANDBOX_ETC_COPY);
    sandbox_etc_release(&etc);
}

/* The keeper's name server and the run's named hosts replace the host's resolver view. */
static void test_sandbox_etc_with_the_keepers_resolver(void)
{
    struct sandbox_etc_opts opts = {.host_root = "/",
                                    .hostname = "box",
                                    .hosts_extra = "203.0.113.9 model.example\n",
                                    .resolv_conf = "nameserver 127.0.0.1\n"};
    const struct sandbox_etc_entry *e;
    struct sandbox_etc etc;

    CU_ASSERT_EQUAL_FATAL(sandbox_etc_build(&opts, &etc), 0);
    e = sandbox_etc_find(&etc, "/etc/resolv.conf");
    CU_ASSERT_FATAL(e && e->kind == SANDBOX_ETC_DATA);
    CU_ASSERT_STRING_EQUAL(e->data, "nameserver 127.0.0.1\n");
    e = sandbox_etc_find(&etc, "/etc/hosts");
    CU_ASSERT_FATAL(e && e->kind == SANDBOX_ETC_DATA);
    CU_ASSERT_PTR_NOT_NULL(strstr(e->data, "127.0.0.1\tlocalhost\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e->data, "\n203.0.113.9 model.example\n"));
    sandbox_etc_release(&etc);
}

/* A public file in a folder nobody else may search is not public: not in the view. */
static void test_sandbox_etc_skips_files_behind_a_closed_folder(void)
{
    struct sandbox_etc_opts opts = {.hostname = "box"};
    struct sandbox_etc etc;

    make_host();
    dir("/etc/ssl", 0700);
    opts.host_root = root;
    CU_ASSERT_EQUAL_FATAL(sandbox_etc_build(&opts, &etc), 0);
    CU_ASSERT_PTR_NULL(sandbox_etc_find(&etc, "/etc/ssl/openssl.cnf"));
    CU_ASSERT_PTR_NULL(sandbox_etc_find(&etc, "/etc/ssl/certs"));
    CU_ASSERT_PTR_NOT_NULL(sandbox_etc_find(&etc, "/etc/services")); /* /etc itself is open */
    sandbox_etc_release(&etc);
    fstree_remove(root);
}

CU_TestInfo sandbox_etc_tests[] = {
    {"test_sandbox_etc_skips_files_behind_a_closed_folder",
     test_sandbox_etc_skips_files_behind_a_closed_folder},
    {"test_sandbox_etc_with_the_keepers_resolver", test_sandbox_etc_with_the_keepers_resolver},
    {"test_sandbox_etc_view_has_only_public_and_synthesized_files",
     test_sandbox_etc_view_has_only_public_and_synthesized_files},
    {"test_sandbox_etc_without_host_files", test_sandbox_etc_without_host_files},
    CU_TEST_INFO_NULL,
};
