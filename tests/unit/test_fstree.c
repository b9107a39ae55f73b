/* fstree: iterative removal and chown of hostile trees (deep, symlinks out, mounts inside). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fstree.h"
#include "base/util.h"
#include "suites.h"

static void tmpdir(char *buf, size_t len, const char *tag)
{
    snprintf(buf, len, "/tmp/ar-unit-fstree-%s-XXXXXX", tag);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(buf));
}

static bool exists(const char *path)
{
    struct stat st;

    return lstat(path, &st) == 0;
}

static int put(const char *path, const char *text)
{
    return util_write_file(path, text, strlen(text), 0644);
}

/* Build root/d/d/d/... `depth` levels deep without recursion and with two fds at a time. */
static int make_chain(const char *root, int depth)
{
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd == -1)
        return -errno;
    for (int i = 0; i < depth; i++) {
        int next;

        if (mkdirat(fd, "d", 0755) == -1)
            break;
        if (i % 1000 == 0) { /* some files on the way, too */
            int f = openat(fd, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            if (f >= 0)
                close(f);
        }
        next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        close(fd);
        fd = next;
        if (fd == -1)
            return -errno;
    }
    close(fd);
    return 0;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;

    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

struct deep_arg {
    const char *root;
    int r;
};

static void *remove_thread(void *p)
{
    struct deep_arg *a = p;

    a->r = fstree_remove(a->root);
    return NULL;
}

/*
 * A 30,000-deep tree a sandbox made (the old recursive rm_rf overflowed its stack at 15,000):
 * removed in a child with only 40 file descriptors allowed, on a thread with a 64 KiB stack.
 */
static void test_fstree_removes_a_30000_deep_tree_with_few_fds_and_a_small_stack(void)
{
    char root[64];
    int status, before;
    pid_t pid;

    tmpdir(root, sizeof(root), "deep");
    CU_ASSERT_EQUAL_FATAL(make_chain(root, 30000), 0);
    before = count_fds();
    pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        struct rlimit nofile = {40, 40};
        struct deep_arg a = {.root = root, .r = -1};
        pthread_attr_t attr;
        pthread_t t;

        if (setrlimit(RLIMIT_NOFILE, &nofile) == -1)
            _exit(2);
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 64 * 1024);
        if (pthread_create(&t, &attr, remove_thread, &a) != 0)
            _exit(3);
        pthread_join(t, NULL);
        _exit(a.r == 0 ? 0 : 1);
    }
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CU_ASSERT_FALSE(exists(root));
    CU_ASSERT_EQUAL(count_fds(), before);
    if (exists(root))
        fstree_remove(root);
}

static void test_fstree_never_follows_symlinks_out_of_the_tree(void)
{
    char root[64], outside[64], path[256];

    tmpdir(root, sizeof(root), "links");
    tmpdir(outside, sizeof(outside), "outside");
    snprintf(path, sizeof(path), "%s/keep", outside);
    CU_ASSERT_EQUAL_FATAL(put(path, "precious"), 0);
    snprintf(path, sizeof(path), "%s/sub", outside);
    CU_ASSERT_EQUAL_FATAL(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/sub/deeper", outside);
    CU_ASSERT_EQUAL_FATAL(put(path, "precious too"), 0);

    snprintf(path, sizeof(path), "%s/to-dir", root);
    CU_ASSERT_EQUAL(symlink(outside, path), 0);
    snprintf(path, sizeof(path), "%s/to-file", root);
    CU_ASSERT_EQUAL(symlink("../../../../../../../../../../..//tmp", path), 0);
    snprintf(path, sizeof(path), "%s/a", root);
    CU_ASSERT_EQUAL(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/a/up", root);
    CU_ASSERT_EQUAL(symlink("..", path), 0);
    snprintf(path, sizeof(path), "%s/a/out", root);
    CU_ASSERT_EQUAL(symlink(outside, path), 0);

    CU_ASSERT_EQUAL(fstree_remove(root), 0);
    CU_ASSERT_FALSE(exists(root));
    snprintf(path, sizeof(path), "%s/keep", outside);
    CU_ASSERT(exists(path));
    snprintf(path, sizeof(path), "%s/sub/deeper", outside);
    CU_ASSERT(exists(path));

    /* a symlink named as the tree itself is removed, its target kept */
    {
        char target[128];

        snprintf(path, sizeof(path), "%s/link", outside);
        snprintf(target, sizeof(target), "%s/sub", outside);
        CU_ASSERT_EQUAL(symlink(target, path), 0);
    }
    CU_ASSERT_EQUAL(fstree_remove(path), 0);
    CU_ASSERT_FALSE(exists(path));
    snprintf(path, sizeof(path), "%s/sub/deeper", outside);
    CU_ASSERT(exists(path));
    CU_ASSERT_EQUAL(fstree_remove(outside), 0);
}

static void test_fstree_missing_and_plain_files(void)
{
    char root[64], path[128];

    CU_ASSERT_EQUAL(fstree_remove("/tmp/ar-unit-fstree-does-not-exist"), 0);
    CU_ASSERT_EQUAL(fstree_remove(""), -EINVAL);
    tmpdir(root, sizeof(root), "file");
    snprintf(path, sizeof(path), "%s/plain", root);
    CU_ASSERT_EQUAL_FATAL(put(path, "x"), 0);
    CU_ASSERT_EQUAL(fstree_remove(path), 0);
    CU_ASSERT_FALSE(exists(path));
    CU_ASSERT_EQUAL(fstree_remove(root), 0);
}

/*
 * A tree that is wide and deep at once: every level has files, a side folder and the chain
 * down. Going back up past FSTREE_OPEN_MAX levels reopens folders through ".." and rereads
 * them; everything must still go.
 */
static void test_fstree_wide_and_deep_tree_past_the_fd_window(void)
{
    char root[64];
    int fd, n = 0;

    tmpdir(root, sizeof(root), "wide");
    fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CU_ASSERT_FATAL(fd >= 0);
    for (int level = 0; level < 5 * FSTREE_OPEN_MAX; level++) {
        int next;

        for (int i = 0; i < 20; i++) {
            char name[32];
            int f;

            snprintf(name, sizeof(name), "f%02d", i);
            f = openat(fd, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            if (f >= 0) {
                close(f);
                n++;
            }
            snprintf(name, sizeof(name), "side%02d", i);
            if (i % 7 == 0 && mkdirat(fd, name, 0755) == 0) {
                int s = openat(fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (s >= 0) {
                    symlinkat("/etc/passwd", s, "l");
                    close(s);
                }
            }
        }
        mkdirat(fd, "z-chain", 0755);
        next = openat(fd, "z-chain", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        close(fd);
        fd = next;
        CU_ASSERT_FATAL(fd >= 0);
    }
    close(fd);
    CU_ASSERT(n > 1000);
    CU_ASSERT_EQUAL(fstree_remove(root), 0);
    CU_ASSERT_FALSE(exists(root));
    CU_ASSERT(exists("/etc/passwd"));
}

/* A mount inside the tree is never crossed; the named folder itself may not be a mount. */
static void test_fstree_refuses_to_cross_mount_points(void)
{
    char root[64], mnt[128], path[192];

    if (geteuid() != 0) {
        printf("\n    skipped: mounting a tmpfs needs root\n");
        return;
    }
    tmpdir(root, sizeof(root), "mnt");
    snprintf(mnt, sizeof(mnt), "%s/a/b", root);
    CU_ASSERT_EQUAL_FATAL(util_mkdir_p(mnt, 0755), 0);
    snprintf(path, sizeof(path), "%s/a/sibling", root);
    CU_ASSERT_EQUAL(put(path, "x"), 0);
    CU_ASSERT_EQUAL_FATAL(mount("ar-unit", mnt, "tmpfs", 0, "size=1m"), 0);
    snprintf(path, sizeof(path), "%s/inside", mnt);
    CU_ASSERT_EQUAL(put(path, "on the other file system"), 0);

    CU_ASSERT_EQUAL(fstree_remove(root), -EBUSY);
    CU_ASSERT(exists(path)); /* the mount's content is untouched */
    snprintf(path, sizeof(path), "%s/a/sibling", root);
    CU_ASSERT_FALSE(exists(path));               /* the rest is removed */
    CU_ASSERT_EQUAL(fstree_remove(mnt), -EBUSY); /* the mount point itself: refused */
    snprintf(path, sizeof(path), "%s/inside", mnt);
    CU_ASSERT(exists(path));

    CU_ASSERT_EQUAL(umount2(mnt, 0), 0);
    CU_ASSERT_EQUAL(fstree_remove(root), 0);
    CU_ASSERT_FALSE(exists(root));
}

static void test_fstree_chown_gives_the_tree_away_but_not_link_targets(void)
{
    char root[64], outside[64], path[256];
    struct stat st;
    int fd;

    if (geteuid() != 0) {
        printf("\n    skipped: chown to another user needs root\n");
        return;
    }
    tmpdir(root, sizeof(root), "chown");
    tmpdir(outside, sizeof(outside), "chown-out");
    snprintf(path, sizeof(path), "%s/target", outside);
    CU_ASSERT_EQUAL_FATAL(put(path, "not yours"), 0);
    snprintf(path, sizeof(path), "%s/link", root);
    CU_ASSERT_EQUAL(symlink(outside, path), 0);
    snprintf(path, sizeof(path), "%s/flink", root);
    {
        char t[128];
        snprintf(t, sizeof(t), "%s/target", outside);
        CU_ASSERT_EQUAL(symlink(t, path), 0);
    }
    /* deeper than the fd window, several entries per level: the seek-back path */
    fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CU_ASSERT_FATAL(fd >= 0);
    for (int level = 0; level < 3 * FSTREE_OPEN_MAX; level++) {
        int next;
        for (int i = 0; i < 5; i++) {
            char name[16];
            int f;
            snprintf(name, sizeof(name), "f%d", i);
            f = openat(fd, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
            if (f >= 0)
                close(f);
        }
        mkdirat(fd, "m-dir", 0700);
        next = openat(fd, "m-dir", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        close(fd);
        fd = next;
        CU_ASSERT_FATAL(fd >= 0);
    }
    CU_ASSERT_EQUAL(fstatat(fd, "..", &st, 0), 0);
    close(fd);

    CU_ASSERT_EQUAL(fstree_chown_at(AT_FDCWD, root, 2000000123, 2000000124), 0);
    CU_ASSERT_EQUAL(stat(root, &st), 0);
    CU_ASSERT_EQUAL(st.st_uid, 2000000123);
    CU_ASSERT_EQUAL(st.st_gid, 2000000124);
    snprintf(path, sizeof(path), "%s/link", root);
    CU_ASSERT_EQUAL(lstat(path, &st), 0);
    CU_ASSERT_EQUAL(st.st_uid, 2000000123);
    CU_ASSERT_EQUAL(stat(outside, &st), 0);
    CU_ASSERT_EQUAL(st.st_uid, 0);
    snprintf(path, sizeof(path), "%s/target", outside);
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    CU_ASSERT_EQUAL(st.st_uid, 0);
    /* every file of every level changed owner */
    {
        char *p = malloc(8192);
        size_t len = (size_t)snprintf(p, 8192, "%s", root);
        int wrong = 0;

        for (int level = 0; level < 3 * FSTREE_OPEN_MAX; level++) {
            for (int i = 0; i < 5; i++) {
                snprintf(p + len, 8192 - len, "/f%d", i);
                if (lstat(p, &st) != 0 || st.st_uid != 2000000123)
                    wrong++;
            }
            len += (size_t)snprintf(p + len, 8192 - len, "/m-dir");
            if (lstat(p, &st) != 0 || st.st_uid != 2000000123)
                wrong++;
        }
        CU_ASSERT_EQUAL(wrong, 0);
        free(p);
    }
    CU_ASSERT_EQUAL(fstree_remove(root), 0);
    CU_ASSERT_EQUAL(fstree_remove(outside), 0);
}

CU_TestInfo fstree_tests[] = {
    {"test_fstree_removes_a_30000_deep_tree_with_few_fds_and_a_small_stack",
     test_fstree_removes_a_30000_deep_tree_with_few_fds_and_a_small_stack},
    {"test_fstree_never_follows_symlinks_out_of_the_tree",
     test_fstree_never_follows_symlinks_out_of_the_tree},
    {"test_fstree_missing_and_plain_files", test_fstree_missing_and_plain_files},
    {"test_fstree_wide_and_deep_tree_past_the_fd_window",
     test_fstree_wide_and_deep_tree_past_the_fd_window},
    {"test_fstree_refuses_to_cross_mount_points", test_fstree_refuses_to_cross_mount_points},
    {"test_fstree_chown_gives_the_tree_away_but_not_link_targets",
     test_fstree_chown_gives_the_tree_away_but_not_link_targets},
    CU_TEST_INFO_NULL,
};
