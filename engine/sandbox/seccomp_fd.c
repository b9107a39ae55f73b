/* sandbox_seccomp, the keeper's half: a programme's hex into a sealed memfd (seccomp.h). */
#include "sandbox/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/util.h"

static int nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* hex into out (len/2 bytes); -EINVAL on anything but lower-case hex digits */
static int unhex(const char *hex, size_t len, uint8_t *out)
{
    for (size_t i = 0; i < len; i += 2) {
        int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);

        if (hi < 0 || lo < 0)
            return -EINVAL;
        out[i / 2] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

int sandbox_seccomp_memfd_of(const char *hex, int *ret_fd, char *err, size_t errlen)
{
    size_t len = hex ? strlen(hex) : 0;
    uint8_t *bpf = NULL;
    int fd = -1, r;

    if (len == 0 || len % 16 != 0 || len / 2 > SANDBOX_SECCOMP_BYTES_MAX ||
        !(bpf = malloc(len / 2)) || unhex(hex, len, bpf) < 0) {
        free(bpf);
        snprintf(err, errlen, "seccomp: the programme is not whole BPF instructions in hex");
        return -EINVAL;
    }
    fd = memfd_create("agent-runner-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd == -1) {
        r = -errno;
        free(bpf);
        snprintf(err, errlen, "seccomp: memfd_create: %s", strerror(-r));
        return r;
    }
    r = util_write_all(fd, bpf, len / 2);
    free(bpf);
    if (r == 0 &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) == -1)
        r = -errno;
    if (r == 0 && lseek(fd, 0, SEEK_SET) == -1)
        r = -errno;
    if (r < 0) {
        snprintf(err, errlen, "seccomp: writing the filter: %s", strerror(-r));
        close(fd);
        return r;
    }
    *ret_fd = fd;
    return 0;
}
