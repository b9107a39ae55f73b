#include "base/mountinfo.h"

#include <stddef.h>
#include <string.h>

bool mountinfo_split(char *line, struct mountinfo_line *ret)
{
    char *f[6], *sep = strstr(line, " - "), *save = NULL, *fstype, *source, *options;
    size_t n = 0;

    if (!sep)
        return false;
    *sep = '\0';
    for (char *t = strtok_r(line, " ", &save); t && n < 6; t = strtok_r(NULL, " ", &save))
        f[n++] = t;
    if (n < 5)
        return false;
    save = NULL;
    fstype = strtok_r(sep + 3, " ", &save);
    source = fstype ? strtok_r(NULL, " ", &save) : NULL;
    options = source ? strtok_r(NULL, " ", &save) : NULL;
    if (!fstype)
        return false;
    *ret = (struct mountinfo_line){
        .root = f[3], .point = f[4], .fstype = fstype, .source = source, .options = options};
    return true;
}

void mountinfo_unescape(char *s)
{
    char *w = s;

    for (char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}
