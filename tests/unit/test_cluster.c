/*
 * cluster — several hosts' pure parts (the Redis URL, the settings, member records, owner
 * values) and the Redis client's transport against a loopback server that answers canned RESP
 * bytes (split across writes, errors, garbage, silence).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "base/util.h"
#include "cluster/redis.h"
#include "suites.h"

/* ---- the URL ----------------------------------------------------------------------------- */

static void test_cluster_redis_url_forms(void)
{
    struct redis_url u;
    char err[256], text[512];

    CU_ASSERT_EQUAL(redis_url_parse("redis://10.0.0.5", &u, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(u.host, "10.0.0.5");
    CU_ASSERT_EQUAL(u.port, 6379);
    CU_ASSERT_EQUAL(u.db, 0);
    CU_ASSERT_FALSE(u.tls);
    CU_ASSERT_EQUAL(
        redis_url_parse("rediss://user:p%40ss%3Aw@redis.local:6380/3", &u, err, sizeof(err)), 0);
    CU_ASSERT_TRUE(u.tls);
    CU_ASSERT_STRING_EQUAL(u.user, "user");
    CU_ASSERT_STRING_EQUAL(u.password, "p@ss:w");
    CU_ASSERT_STRING_EQUAL(u.host, "redis.local");
    CU_ASSERT_EQUAL(u.port, 6380);
    CU_ASSERT_EQUAL(u.db, 3);
    redis_url_text(&u, text, sizeof(text));
    CU_ASSERT_STRING_EQUAL(text, "rediss://user:***@redis.local:6380/3");
    CU_ASSERT_PTR_NULL(strstr(text, "p@ss"));
    CU_ASSERT_EQUAL(redis_url_parse("redis://:secret@[::1]:7000/", &u, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(u.host, "::1");
    CU_ASSERT_STRING_EQUAL(u.password, "secret");
    CU_ASSERT_EQUAL(u.port, 7000);
    redis_url_text(&u, text, sizeof(text));
    CU_ASSERT_STRING_EQUAL(text, "redis://:***@[::1]:7000/0");
    redis_url_wipe(&u);
    CU_ASSERT_STRING_EQUAL(u.password, "");
}

static void test_cluster_redis_url_refusals_name_the_part(void)
{
    static const char *const bad[][2] = {
        {"http://h:1", "expected redis://"},   {"redis://", "no host"},
        {"redis://h:0", "bad port"},           {"redis://h:99999", "bad port"},
        {"redis://h:x", "bad port"},           {"redis://h/db", "db is a number"},
        {"redis://pw@h", "password@"},         {"redis://:p%4@h", "percent-encode"},
        {"redis://:p%00@h", "percent-encode"}, {"redis://[::1", "IPv6"},
        {"redis://h h:1", "bad host"},
    };
    struct redis_url u;
    char err[256];

    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        err[0] = '\0';
        CU_ASSERT_EQUAL(redis_url_parse(bad[i][0], &u, err, sizeof(err)), -EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENT_RUNNER_REDIS_URL"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err, bad[i][1]));
    }
}

/* ---- settings ------------------------------------------------------------------------------ */

struct envv {
    const char *const *kv; /* name, value, ..., NULL */
};

static const char *env_get(const char *name, void *ctx)
{
    const struct envv *e = ctx;

    for (size_t i = 0; e->kv[i]; i += 2)
        if (strcmp(e->kv[i], name) == 0)
            return e->kv[i + 1];
    return NULL;
}

static void test_cluster_config_defaults_and_refusals(void)
{
    static const char *const off[] = {"AGENT_RUNNER_INSTANCE", "x", NULL};
    static const char *const on[] = {"AGENT_RUNNER_REDIS_URL",
                                     "redis://127.0.0.1:6390/2",
                                     "AGENT_RUNNER_ADVERTISE_URL",
                                     "https://10.0.0.2:443/",
                                     "AGENT_RUNNER_CLUSTER_MEMBER",
                                     "host-a",
                                     NULL};
    static const char *const no_adv[] = {"AGENT_RUNNER_REDIS_URL", "redis://h", NULL};
    static const char *const bad_adv[] = {"AGENT_RUNNER_REDIS_URL", "redis://h",
                                          "AGENT_RUNNER_ADVERTISE_URL", "http://10.0.0.2", NULL};
    static const char *const bad_refresh[] = {"AGENT_RUNNER_REDIS_URL",
                                              "redis://h",
                                              "AGENT_RUNNER_ADVERTISE_URL",
                                              "https://h",
                                              "AGENT_RUNNER_CLUSTER_TTL_MS",
                                              "2000",
                                              "AGENT_RUNNER_CLUSTER_REFRESH_MS",
                                              "1500",
                                              NULL};
    static const char *const bad_member[] = {"AGENT_RUNNER_REDIS_URL",
                                             "redis://h",
                                             "AGENT_RUNNER_ADVERTISE_URL",
                                             "https://h",
                                             "AGENT_RUNNER_CLUSTER_MEMBER",
                                             "a b",
                                             NULL};
    struct envv e;
    struct cluster_config c;
    char err[512], text[1024];

    e.kv = off;
    CU_ASSERT_EQUAL(cluster_config_load(env_get, &e, "x", 8, &c, err, sizeof(err)), 1);
    e.kv = on;
    CU_ASSERT_EQUAL(cluster_config_load(env_get, &e, "inst", 8, &c, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(c.group, "inst");
    CU_ASSERT_STRING_EQUAL(c.member, "host-a");
    CU_ASSERT_STRING_EQUAL(c.prefix, "agent-runner:inst:");
    CU_ASSERT_STRING_EQUAL(c.advertise, "https://10.0.0.2:443");
    CU_ASSERT_EQUAL(c.ttl_ms, 6000);
    CU_ASSERT_EQUAL(c.refresh_ms, 2000);
    CU_ASSERT_EQUAL(c.capacity, 8);
    CU_ASSERT_EQUAL(c.url.db, 2);
    cluster_config_text(&c, text, sizeof(text));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "member 'host-a' at https://10.0.0.2:443"));
    e.kv = no_adv;
    CU_ASSERT_EQUAL(cluster_config_load(env_get, &e, "i", 8, &c, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENT_RUNNER_ADVERTISE_URL: required"));
    e.kv = bad_adv;
    CU_ASSERT_EQUAL(cluster_config_load(env_get, &e, "i", 8, &c, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "https://"));
    e.kv = bad_refresh;
    CU_ASSERT_EQUAL(cluster_config_load(env_get, &e, "i", 8, &c, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENT_RUNNER_CLUSTER_REFRESH_MS"));
    e.kv = bad_member;
    CU_ASSERT_EQUAL(cluster_config_load(env_get, &e, "i", 8, &c, err, sizeof(err)), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AGENT_RUNNER_CLUSTER_MEMBER"));
}

/* ---- member records and owner values ------------------------------------------------------ */

static void test_cluster_member_record_round_trip_and_refusals(void)
{
    struct cluster_member m = {.name = "host-a@x",
                               .url = "https://10.0.0.1:443",
                               .capacity = 8,
                               .load = 3,
                               .runs = 2,
                               .runs_max = 12,
                               .pid = 42};
    static const char *const bad[] = {
        "",
        "[]",
        "{\"name\":\"a b\",\"url\":\"https://h\",\"capacity\":1,\"load\":0,\"runs\":0,"
        "\"runsMax\":1}",
        "{\"name\":\"a\",\"url\":\"ftp://h\",\"capacity\":1,\"load\":0,\"runs\":0,\"runsMax\":1}",
        "{\"name\":\"a\",\"url\":\"http://10.0.0.1\",\"capacity\":1,\"load\":0,\"runs\":0,"
        "\"runsMax\":1}",
        "{\"name\":\"a\",\"url\":\"https://h\",\"capacity\":-1,\"load\":0,\"runs\":0,"
        "\"runsMax\":1}",
        "{\"name\":\"a\",\"url\":\"https://h\",\"capacity\":\"1\",\"load\":0,\"runs\":0,"
        "\"runsMax\":1}",
        "{\"name\":\"a\",\"url\":\"https://h\",\"load\":0,\"runs\":0,\"runsMax\":1}",
        "{\"name\":\"a\",\"url\":\"https://h x\",\"capacity\":1,\"load\":0,\"runs\":0,"
        "\"runsMax\":1}",
    };
    struct cluster_member back;
    char text[CLUSTER_RECORD_MAX];

    CU_ASSERT_EQUAL(cluster_member_format(&m, text, sizeof(text)), 0);
    CU_ASSERT_EQUAL(cluster_member_parse(text, strlen(text), &back), 0);
    CU_ASSERT_STRING_EQUAL(back.name, m.name);
    CU_ASSERT_STRING_EQUAL(back.url, m.url);
    CU_ASSERT_EQUAL(back.capacity, 8);
    CU_ASSERT_EQUAL(back.load, 3);
    CU_ASSERT_EQUAL(back.runs, 2);
    CU_ASSERT_EQUAL(back.runs_max, 12);
    CU_ASSERT_EQUAL(back.pid, 42);
    CU_ASSERT_TRUE(cluster_member_has_room(&back));
    back.load = 8;
    CU_ASSERT_FALSE(cluster_member_has_room(&back));
    back.load = 0;
    back.runs = 12;
    CU_ASSERT_FALSE(cluster_member_has_room(&back));
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
        CU_ASSERT_EQUAL(cluster_member_parse(bad[i], strlen(bad[i]), &back), -EINVAL);
    CU_ASSERT_EQUAL(cluster_member_format(&m, text, 20), -ENOSPC);
}

static void test_cluster_owner_values_name_their_member(void)
{
    struct cluster_config c = {.member = "m-1"};
    char v[CLUSTER_VALUE_MAX], v2[CLUSTER_VALUE_MAX], name[CLUSTER_NAME_MAX];

    CU_ASSERT_EQUAL(cluster_owner_value(&c, v, sizeof(v)), 0);
    CU_ASSERT_EQUAL(cluster_owner_value(&c, v2, sizeof(v2)), 0);
    CU_ASSERT_STRING_NOT_EQUAL(v, v2); /* a fresh nonce per claim */
    CU_ASSERT_EQUAL(strlen(v), strlen("m-1 ") + 16);
    CU_ASSERT_EQUAL(cluster_owner_name(v, strlen(v), name, sizeof(name)), 0);
    CU_ASSERT_STRING_EQUAL(name, "m-1");
    CU_ASSERT_EQUAL(cluster_owner_name(" x", 2, name, sizeof(name)), -EINVAL);
    CU_ASSERT_EQUAL(cluster_owner_name("a\"b x", 5, name, sizeof(name)), -EINVAL);
    CU_ASSERT_TRUE(cluster_name_ok("inst@host.example/a:b-c_d"));
    CU_ASSERT_FALSE(cluster_name_ok("a b"));
    CU_ASSERT_FALSE(cluster_name_ok(""));
}

/* ---- the transport, against canned RESP --------------------------------------------------- */

struct resp_server {
    int fd;
    int port;
    pthread_t thread;
    const char *parts[4]; /* written one after the other, 20 ms apart */
    bool silent;          /* read, never answer */
    char got[4096];       /* what the client sent */
    size_t ngot;
};

static void *resp_serve(void *arg)
{
    struct resp_server *s = arg;
    struct pollfd p;
    int c = accept(s->fd, NULL, NULL);
    ssize_t n;

    if (c < 0)
        return NULL;
    p = (struct pollfd){.fd = c, .events = POLLIN};
    while (poll(&p, 1, 300) == 1 && s->ngot < sizeof(s->got) - 1) {
        n = read(c, s->got + s->ngot, sizeof(s->got) - 1 - s->ngot);
        if (n <= 0)
            break;
        s->ngot += (size_t)n;
        if (s->silent)
            continue;
        for (size_t i = 0; i < 4 && s->parts[i]; i++) {
            (void)write(c, s->parts[i], strlen(s->parts[i]));
            usleep(20000);
        }
        break;
    }
    if (s->silent)
        usleep(600000);
    close(c);
    return NULL;
}

static void resp_start(struct resp_server *s)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);

    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    CU_ASSERT_FATAL(s->fd >= 0);
    CU_ASSERT_FATAL(bind(s->fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    CU_ASSERT_FATAL(listen(s->fd, 1) == 0);
    getsockname(s->fd, (struct sockaddr *)&a, &len);
    s->port = ntohs(a.sin_port);
    pthread_create(&s->thread, NULL, resp_serve, s);
}

static void resp_stop(struct resp_server *s)
{
    pthread_join(s->thread, NULL);
    close(s->fd);
}

static struct redis *client_for(const struct resp_server *s, struct redis_url *u,
                                const char *password)
{
    struct redis_opts o = {.url = u, .connect_ms = 500, .io_ms = 400};

    memset(u, 0, sizeof(*u));
    snprintf(u->host, sizeof(u->host), "127.0.0.1");
    u->port = (uint16_t)s->port;
    if (password)
        snprintf(u->password, sizeof(u->password), "%s", password);
    return redis_new(&o);
}

static void test_cluster_redis_pipeline_reads_replies_split_across_writes(void)
{
    struct resp_server s = {.parts = {"+OK\r\n$5\r\nhel", "lo\r\n*2\r\n:7\r\n$-1", "\r\n"}};
    struct redis_cmd cmds[3] = {{0}};
    redisReply *rep[3];
    struct redis_url u;
    struct redis *r;
    char err[256];

    resp_start(&s);
    r = client_for(&s, &u, NULL);
    redis_cmd_arg(&cmds[0], "SET");
    redis_cmd_arg(&cmds[0], "k");
    redis_cmd_arg(&cmds[0], "v");
    redis_cmd_arg(&cmds[1], "GET");
    redis_cmd_arg(&cmds[1], "k");
    redis_cmd_arg(&cmds[2], "EVAL");
    CU_ASSERT_EQUAL(redis_pipeline(r, cmds, 3, rep, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(rep[0]->type, REDIS_REPLY_STATUS);
    CU_ASSERT_STRING_EQUAL(cluster_reply_str(rep[1], NULL), "hello");
    CU_ASSERT_EQUAL(rep[2]->type, REDIS_REPLY_ARRAY);
    CU_ASSERT_EQUAL(rep[2]->element[0]->integer, 7);
    CU_ASSERT_EQUAL(rep[2]->element[1]->type, REDIS_REPLY_NIL);
    for (int i = 0; i < 3; i++)
        freeReplyObject(rep[i]);
    CU_ASSERT_TRUE(redis_connected(r));
    redis_free(r);
    resp_stop(&s);
    /* the three commands went out in one pipeline, as RESP arrays */
    CU_ASSERT_PTR_NOT_NULL(
        strstr(s.got, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$3\r\nGET"));
}

static void test_cluster_redis_auth_refused_never_names_the_password(void)
{
    struct resp_server s = {.parts = {"-WRONGPASS invalid username-password pair\r\n"}};
    struct redis_cmd cmd = {0};
    redisReply *rep = NULL;
    struct redis_url u;
    struct redis *r;
    char err[256];

    resp_start(&s);
    r = client_for(&s, &u, "hunter2-secret");
    redis_cmd_arg(&cmd, "PING");
    CU_ASSERT_EQUAL(redis_command(r, &cmd, &rep, err, sizeof(err)), -EACCES);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "AUTH refused"));
    CU_ASSERT_PTR_NULL(strstr(err, "hunter2"));
    CU_ASSERT_FALSE(redis_connected(r));
    redis_free(r);
    resp_stop(&s);
    CU_ASSERT_PTR_NOT_NULL(strstr(s.got, "AUTH\r\n$14\r\nhunter2-secret"));
}

static void test_cluster_redis_garbage_silence_and_refusal_fail_cleanly(void)
{
    struct resp_server junk = {.parts = {"?what\r\n"}}, quiet = {.silent = true};
    struct redis_cmd cmd = {0};
    redisReply *rep = NULL;
    struct redis_url u;
    struct redis *r;
    char err[256];
    int port;

    redis_cmd_arg(&cmd, "PING");
    resp_start(&junk);
    r = client_for(&junk, &u, NULL);
    CU_ASSERT_EQUAL(redis_command(r, &cmd, &rep, err, sizeof(err)), -EPROTO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not RESP"));
    redis_free(r);
    resp_stop(&junk);

    resp_start(&quiet);
    r = client_for(&quiet, &u, NULL);
    CU_ASSERT_EQUAL(redis_command(r, &cmd, &rep, err, sizeof(err)), -ETIMEDOUT);
    redis_free(r);
    resp_stop(&quiet);

    port = quiet.port; /* closed now: nobody listens */
    r = client_for(&quiet, &u, NULL);
    u.port = (uint16_t)port;
    CU_ASSERT_EQUAL(redis_command(r, &cmd, &rep, err, sizeof(err)), -ECONNREFUSED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "connect"));
    redis_free(r);
}

CU_TestInfo cluster_tests[] = {
    {"redis url forms", test_cluster_redis_url_forms},
    {"redis url refusals name the part", test_cluster_redis_url_refusals_name_the_part},
    {"config defaults and refusals", test_cluster_config_defaults_and_refusals},
    {"member record round trip and refusals", test_cluster_member_record_round_trip_and_refusals},
    {"owner values name their member", test_cluster_owner_values_name_their_member},
    {"pipeline reads replies split across writes",
     test_cluster_redis_pipeline_reads_replies_split_across_writes},
    {"auth refused never names the password",
     test_cluster_redis_auth_refused_never_names_the_password},
    {"garbage, silence and refusal fail cleanly",
     test_cluster_redis_garbage_silence_and_refusal_fail_cleanly},
    CU_TEST_INFO_NULL,
};
