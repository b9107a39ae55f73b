/*
 * mountinfo — one line of /proc/self/mountinfo (proc(5)) split into the fields the sandbox
 * reads: the root and the mount point of the mount (fields 4 and 5), and after the " - "
 * separator the file system type, the source and the super options. Paths stay escaped as the
 * kernel writes them (\040 for a space, \134 for a backslash) until mountinfo_unescape().
 */
#ifndef AR_MOUNTINFO_H
#define AR_MOUNTINFO_H

#include <stdbool.h>

struct mountinfo_line {
    char *root;    /* field 4 */
    char *point;   /* field 5 */
    char *fstype;  /* the first field after " - " */
    char *source;  /* the second, or NULL when the line ends before it */
    char *options; /* the third, or NULL when the line ends before it */
};

/*
 * Split line in place (its fields become NUL-terminated strings inside it; ret points into
 * it). false when it has no " - " separator, fewer than five fields before it or no file
 * system type after it.
 */
bool mountinfo_split(char *line, struct mountinfo_line *ret);
/* Undo the kernel's octal escapes (a backslash and three octal digits) in place. */
void mountinfo_unescape(char *s);

#endif
