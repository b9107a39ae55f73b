#include "auth.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"

/* Longer tokens are refused the same way in either header. */
#define AUTH_TOKEN_MAX 4096

static bool token_equal(const char *expected, const char *given)
{
    return util_ct_equal(expected, strlen(expected), given, strlen(given));
}

bool auth_ok(const char *expected, const char *header_token, const char *authorization)
{
    if (!expected || !expected[0])
        return false;
    if (header_token && header_token[0])
        return strlen(header_token) < AUTH_TOKEN_MAX && token_equal(expected, header_token);
    if (authorization && strncasecmp(authorization, "Bearer", 6) == 0 &&
        isspace((unsigned char)authorization[6])) {
        const char *t = authorization + 6;
        size_t n;
        char tok[AUTH_TOKEN_MAX];

        while (isspace((unsigned char)*t))
            t++;
        n = strlen(t);
        while (n > 0 && isspace((unsigned char)t[n - 1]))
            n--;
        if (n == 0 || n >= sizeof(tok))
            return false;
        memcpy(tok, t, n);
        tok[n] = '\0';
        return token_equal(expected, tok);
    }
    return false;
}
