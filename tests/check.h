/* Minimal assertion helpers for the unit tests: each failed check prints where and why, and the
 * test exits non-zero at the end if any failed. */
#ifndef FP_TEST_CHECK_H
#define FP_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

#include "flashport.h"

static int check_failures, check_count;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        check_count++;                                                                             \
        if (!(cond)) {                                                                             \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

static inline int message_has(const char *needle) {
    return !needle || strstr(flashport_last_error(), needle) != NULL;
}

/* The call returns the expected status and the last error mentions `needle` (NULL: any). */
#define CHECK_STATUS(call, expected, needle)                                                       \
    do {                                                                                           \
        flashport_status st_ = (call);                                                             \
        check_count++;                                                                             \
        if (st_ != (expected) || !message_has(needle)) {                                           \
            check_failures++;                                                                      \
            fprintf(stderr,                                                                        \
                    "%s:%d: %s -> %s (expected %s), message '%s' (expected to contain "            \
                    "'%s')\n",                                                                     \
                    __FILE__, __LINE__, #call, flashport_status_string(st_),                       \
                    flashport_status_string(expected), flashport_last_error(),                     \
                    (needle) ? (needle) : "");                                                     \
        }                                                                                          \
    } while (0)

static inline int check_report(const char *name) {
    printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
    return check_failures ? 1 : 0;
}

#endif
