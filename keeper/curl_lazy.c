/*
 * curl_lazy — libcurl for the local sandbox's keeper, loaded at its first use.
 *
 * The keeper's only libcurl user is the model gateway's upstream client (base/httpc), and a
 * keeper whose harness never calls a model (the scripted agent, a turn that ends before its
 * first call) never needs it. Linked at start, libcurl brings 30 more libraries (TLS, Kerberos,
 * LDAP, IDN, ...) whose loading and constructors were most of the keeper's start (issue 27's
 * cold-start budget). So the keeper binary defines the libcurl functions httpc uses itself
 * (this file, linked ahead of the engine library; the binary is built without -lcurl), and the
 * first call of any of them dlopen()s libcurl.so.4 and forwards from then on. A keeper that
 * cannot load it gets CURLE_FAILED_INIT from every call: the gateway answers 502, as for an
 * unreachable upstream. agent-runner-keeper-remote and the workers link libcurl as usual.
 */
#define CURL_DISABLE_TYPECHECK /* the real functions, not curl.h's type-checking macros */
#include <curl/curl.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>

#include "base/log.h"

#define CURL_LIB "libcurl.so.4"

static struct {
    CURLcode (*global_init)(long);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_perform)(CURL *);
    void (*easy_cleanup)(CURL *);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    void (*easy_reset)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    time_t (*getdate)(const char *, const time_t *);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
} lib;
static bool loaded;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

#define BIND(field, name)                                                                      \
    do {                                                                                       \
        void *sym = dlsym(h, name);                                                            \
        if (!sym)                                                                              \
            goto fail;                                                                         \
        *(void **)&lib.field = sym;                                                            \
    } while (0)

static void load(void)
{
    void *h = dlopen(CURL_LIB, RTLD_NOW | RTLD_LOCAL);

    if (!h) {
        log_warn("cannot load %s: %s", CURL_LIB, dlerror());
        return;
    }
    BIND(global_init, "curl_global_init");
    BIND(easy_init, "curl_easy_init");
    BIND(easy_setopt, "curl_easy_setopt");
    BIND(easy_perform, "curl_easy_perform");
    BIND(easy_cleanup, "curl_easy_cleanup");
    BIND(easy_getinfo, "curl_easy_getinfo");
    BIND(easy_reset, "curl_easy_reset");
    BIND(easy_strerror, "curl_easy_strerror");
    BIND(getdate, "curl_getdate");
    BIND(slist_append, "curl_slist_append");
    BIND(slist_free_all, "curl_slist_free_all");
    loaded = true;
    return;
fail:
    log_warn("%s lacks a function the keeper needs: %s", CURL_LIB, dlerror());
    dlclose(h);
}

static bool ready(void)
{
    pthread_once(&load_once, load);
    return loaded;
}

CURLcode curl_global_init(long flags)
{
    return ready() ? lib.global_init(flags) : CURLE_FAILED_INIT;
}

CURL *curl_easy_init(void)
{
    return ready() ? lib.easy_init() : NULL;
}

/* The argument's type follows from the option's number range (curl.h's CURLOPTTYPE_*). */
CURLcode curl_easy_setopt(CURL *curl, CURLoption option, ...)
{
    CURLcode r;
    va_list ap;

    if (!ready())
        return CURLE_FAILED_INIT;
    va_start(ap, option);
    if (option < CURLOPTTYPE_OBJECTPOINT) {
        long v = va_arg(ap, long);
        r = lib.easy_setopt(curl, option, v);
    } else if (option >= CURLOPTTYPE_OFF_T && option < CURLOPTTYPE_BLOB) {
        curl_off_t v = va_arg(ap, curl_off_t);
        r = lib.easy_setopt(curl, option, v);
    } else {
        /* object, string, function and blob pointers: one pointer-sized argument */
        void *v = va_arg(ap, void *);
        r = lib.easy_setopt(curl, option, v);
    }
    va_end(ap);
    return r;
}

CURLcode curl_easy_perform(CURL *curl)
{
    return ready() ? lib.easy_perform(curl) : CURLE_FAILED_INIT;
}

void curl_easy_cleanup(CURL *curl)
{
    if (curl && ready())
        lib.easy_cleanup(curl);
}

/* Every CURLINFO takes a pointer to where the answer goes. */
CURLcode curl_easy_getinfo(CURL *curl, CURLINFO info, ...)
{
    CURLcode r;
    va_list ap;
    void *out;

    if (!ready())
        return CURLE_FAILED_INIT;
    va_start(ap, info);
    out = va_arg(ap, void *);
    r = lib.easy_getinfo(curl, info, out);
    va_end(ap);
    return r;
}

void curl_easy_reset(CURL *curl)
{
    if (ready())
        lib.easy_reset(curl);
}

const char *curl_easy_strerror(CURLcode code)
{
    return ready() ? lib.easy_strerror(code) : "libcurl could not be loaded";
}

time_t curl_getdate(const char *text, const time_t *unused)
{
    return ready() ? lib.getdate(text, unused) : (time_t)-1;
}

struct curl_slist *curl_slist_append(struct curl_slist *list, const char *text)
{
    return ready() ? lib.slist_append(list, text) : NULL;
}

void curl_slist_free_all(struct curl_slist *list)
{
    if (list && ready())
        lib.slist_free_all(list);
}
