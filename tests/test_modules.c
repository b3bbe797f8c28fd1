/*
 * Module loading faults: each leaves its backend unavailable with the reason, a context asked
 * for it is refused with BACKEND_UNAVAILABLE (and not written), and the next entry of a spec
 * still runs. Two modes, one per process (the registry loads modules once):
 *   broken   a module of another interface version (hip), one without the entry symbol
 *            (opencl), both built by this test's CMake file, and a truncated one (cuda: the
 *            first bytes of another module, written here);
 *   missing  no module anywhere (FLASHPORT_BACKEND_PATH is an empty folder, and the test hook
 *            FLASHPORT_TEST_MODULES_ON_PATH_ONLY keeps the build's own modules out of sight).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <unistd.h>

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
    printf("%s: %s\n", name, bi.reason);
}

/* The context for the backend is refused, with the reason, and out is left as it was. */
static void refused(const char *name, const char *needle) {
    flashport_context *untouched = (flashport_context *)&untouched, *ctx = untouched;
    char expect[64];
    snprintf(expect, sizeof expect, "%s: unavailable: ", name);
    CHECK_STATUS(flashport_context_create(name, &ctx), FLASHPORT_ERROR_BACKEND_UNAVAILABLE, NULL);
    CHECK(message_has(expect) && message_has(needle));
    CHECK(ctx == untouched);
}

/* The spec's last entry is taken, and runs: with K zero every key scores the same, so each
 * output row is the mean of V's rows. */
static void falls_back(const char *spec) {
    flashport_context *ctx = NULL;
    CHECK(flashport_context_create(spec, &ctx) == FLASHPORT_OK);
    if (!ctx) return;
    CHECK(strcmp(flashport_context_backend(ctx), "reference") == 0);
    flashport_attention_desc d;
    flashport_attention_desc_init(&d, FLASHPORT_F32, 1, 1, 1, 4, 4, 4, FLASHPORT_LAYOUT_BHND);
    float q[16], k[16] = {0}, v[16], o[16];
    for (int i = 0; i < 16; i++) q[i] = (float)i, v[i] = (float)(i % 4 + 4 * (i / 4));
    flashport_attention_host_args a = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    a.q = q, a.k = k, a.v = v, a.o = o;
    CHECK(flashport_attention_run_host(ctx, &d, &a) == FLASHPORT_OK);
    for (int i = 0; i < 16; i++) CHECK(o[i] == (float)(i % 4) + 6.0f);
    flashport_context_destroy(ctx);
}

/* dir/libflashport-cuda.so: the first 512 bytes of `from`. Returns 0 on failure. */
static int write_truncated(const char *from, const char *dir) {
    char path[1024], head[512];
    snprintf(path, sizeof path, "%s/libflashport-cuda.so", dir);
    FILE *in = fopen(from, "rb"), *out = fopen(path, "wb");
    const int ok = in && out && fread(head, 1, sizeof head, in) == sizeof head &&
                   fwrite(head, 1, sizeof head, out) == sizeof head;
    if (in) fclose(in);
    if (out && fclose(out) != 0) return 0;
    return ok;
}

int main(int argc, char **argv) {
    const int missing = argc == 3 && strcmp(argv[2], "missing") == 0;
    if (argc != 3 || (!missing && strcmp(argv[2], "broken") != 0)) {
        fprintf(stderr, "usage: test_modules FOLDER-OF-FAKE-MODULES broken|missing\n");
        return 2;
    }
    char tmp[] = "/tmp/flashport-modules-XXXXXX", path[2048], truncated[1100];
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(truncated, sizeof truncated, "%s/libflashport-cuda.so", tmp);
    if (missing) {
        setenv("FLASHPORT_BACKEND_PATH", tmp, 1);
        setenv("FLASHPORT_TEST_MODULES_ON_PATH_ONLY", "1", 1);
        for (int i = 0; i < 3; i++) {
            const char *name = (const char *[]){"cuda", "hip", "opencl"}[i];
            backend_reason(name, "not found");
            refused(name, "not found");
        }
        falls_back("opencl,cuda,reference");
    } else {
        snprintf(path, sizeof path, "%s/libflashport-hip.so", argv[1]);
        CHECK(write_truncated(path, tmp));
        snprintf(path, sizeof path, "%s:%s", argv[1], tmp);
        setenv("FLASHPORT_BACKEND_PATH", path, 1);
        backend_reason("hip", "interface version 999");
        backend_reason("opencl", "no symbol flashport_backend_entry");
        backend_reason("cuda", truncated); /* dlopen's own words follow the path */
        refused("hip", "interface version 999");
        refused("opencl", "no symbol");
        refused("cuda", truncated);
        falls_back("hip,opencl,cuda,reference");
    }
    remove(truncated);
    rmdir(tmp);
    return check_report(missing ? "test_modules missing" : "test_modules broken");
}
