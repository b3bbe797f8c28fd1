/* A module that reports another interface version: the core must refuse it. */
#include "fp_backend.h"

static const fp_backend wrong = {.abi = 999, .name = "hip"};

FLASHPORT_API const fp_backend *flashport_backend_entry(const fp_host *host) {
    (void)host;
    return &wrong;
}
