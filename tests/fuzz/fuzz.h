/*
 * fuzz — what every tests/fuzz/fuzz_<parser>.c target shares.
 *
 * A target defines LLVMFuzzerTestOneInput(), the libFuzzer entry point. The same file links
 * either with libFuzzer (make fuzz: clang, sanitizers, build-fuzz/) or with replay.c (make
 * fuzz-replay: gcc, part of make test), which feeds it every file of a committed corpus.
 *
 * FUZZ_CHECK states a property the code under test must keep; a broken one prints the
 * condition and aborts, which both drivers report as a crash with the input that caused it.
 */
#ifndef AR_FUZZ_H
#define AR_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fuzz_fail(__FILE__, __LINE__, #cond);                                                  \
    } while (0)

__attribute__((noreturn)) static inline void fuzz_fail(const char *file, int line, const char *cond)
{
    fprintf(stderr, "%s:%d: property broken: %s\n", file, line, cond);
    abort();
}

#endif
