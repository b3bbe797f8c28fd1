/*
 * Module loading: a module with another interface version, one that lacks the entry symbol,
 * and one that is absent all leave their backend unavailable with the reason, and every other
 * backend keeps working. The fake modules are built by this test's CMake file.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "check.h"

static void backend_reason(const char *name, const char *needle) {
    int idx;
    flashport_backend_info bi;
    CHECK(flashport_backend_find(name, &idx) == FLASHPORT_OK);
    CHECK(flashport_backend_get_info(idx, &bi) == FLASHPORT_OK);
    CHECK(!bi.available);
    if (!strstr(bi.reason, needle)) {
        fprintf(stderr, "%s: reason '%s' does not mention '%s'\n", name, bi.reason, needle);
        CHECK(0);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_modules FOLDER-OF-FAKE-MODULES\n");
        return 2;
    }
    setenv("FLASHPORT_BACKEND_PATH", argv[1], 1);
    backend_reason("hip", "interface version 999");
    backend_reason("opencl", "no symbol flashport_backend_entry");
    flashport_context *ctx = NULL;
    CHECK_STATUS(flashport_context_create("hip", &ctx), FLASHPORT_ERROR_BACKEND_UNAVAILABLE,
                 "hip: unavailable: ");
    CHECK(flashport_context_create("hip,reference", &ctx) == FLASHPORT_OK);
    CHECK(ctx && strcmp(flashport_context_backend(ctx), "reference") == 0);
    flashport_context_destroy(ctx);
    return check_report("test_modules");
}
