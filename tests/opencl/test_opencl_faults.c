/*
 * Faults on the OpenCL backend (PoCL in CI), each through the public API: the documented status
 * and message, outputs untouched, and a context that still runs correctly afterwards.
 *   - device allocation: a size past the device's limit, and one buffer of a host call refused
 *     by the test hook FLASHPORT_TEST_FAIL_ALLOC_BYTES after the others were allocated and
 *     filled (scripts/sanitize.sh checks that they are released);
 *   - a program that does not build: the test hook FLASHPORT_TEST_OPENCL_BUILD_OPTIONS adds
 *     "-DDTYPE=(" to its options, which breaks the kernel's preprocessor checks; DEVICE with
 *     the compiler's log, and no cache file;
 *   - program cache files cut short inside the key or inside the binary, or overwritten:
 *     rebuilt and written again;
 *   - a cache folder that cannot be written: the call succeeds and nothing is written.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

enum { N = 8, D = 16, ELEMS = N * D };
static const unsigned char POISON = 0xa5;

static float q[ELEMS], k[ELEMS], v[ELEMS], o[ELEMS], lse[N];

/* Output arrays filled with a pattern no call writes. */
static void poison(void) {
    memset(o, POISON, sizeof o);
    memset(lse, POISON, sizeof lse);
}

static int untouched(void) {
    const unsigned char *bytes[2] = {(const unsigned char *)o, (const unsigned char *)lse};
    const size_t sizes[2] = {sizeof o, sizeof lse};
    for (int a = 0; a < 2; a++)
        for (size_t i = 0; i < sizes[a]; i++)
            if (bytes[a][i] != POISON) return 0;
    return 1;
}

/* One forward call of an 8 x 8 problem with K zero: every key scores the same, so O's rows are
 * the mean of V's rows and the LSE is log 8. */
static flashport_status run(flashport_context *ctx) {
    flashport_attention_desc d;
    flashport_attention_desc_init(&d, FLASHPORT_F32, 1, 1, 1, N, N, D, FLASHPORT_LAYOUT_BHND);
    flashport_attention_host_args a = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    a.q = q, a.k = k, a.v = v, a.o = o, a.lse = lse;
    poison();
    return flashport_attention_run_host(ctx, &d, &a);
}

static int correct(void) {
    for (int c = 0; c < D; c++) {
        double mean = 0.0;
        for (int j = 0; j < N; j++) mean += v[j * D + c] / N;
        for (int i = 0; i < N; i++)
            if (fabs(o[i * D + c] - mean) > 1e-5) return 0;
    }
    for (int i = 0; i < N; i++)
        if (fabs(lse[i] - log((double)N)) > 1e-5) return 0;
    return 1;
}

/* The one cache file in dir (path in out), its size; -1 when there is not exactly one. */
static long cache_file(const char *dir, char *out, size_t len) {
    DIR *dp = opendir(dir);
    int n = 0;
    if (!dp) return -1;
    for (struct dirent *e; (e = readdir(dp));)
        if (strncmp(e->d_name, "opencl-", 7) == 0 && n++ == 0)
            snprintf(out, len, "%s/%s", dir, e->d_name);
    closedir(dp);
    struct stat st;
    return n == 1 && stat(out, &st) == 0 ? (long)st.st_size : -1;
}

static void remove_cache(const char *dir) {
    char path[1200];
    while (cache_file(dir, path, sizeof path) >= 0) remove(path);
    rmdir(dir);
}

/* A fresh context on the cache as it is on disk (a context keeps its built programs). */
static void run_fresh(const char *what) {
    flashport_context *ctx = NULL;
    CHECK(flashport_context_create("opencl", &ctx) == FLASHPORT_OK);
    if (!ctx) return;
    const flashport_status st = run(ctx);
    CHECK(st == FLASHPORT_OK && correct());
    if (st) fprintf(stderr, "%s: %s\n", what, flashport_last_error());
    flashport_context_destroy(ctx);
}

static void allocation_fails(flashport_context *ctx) {
    flashport_buffer *untouched_buf = (flashport_buffer *)&untouched_buf, *buf = untouched_buf;
    CHECK_STATUS(flashport_buffer_alloc(ctx, SIZE_MAX / 2, &buf), FLASHPORT_ERROR_OUT_OF_MEMORY,
                 "opencl: clCreateBuffer: ");
    CHECK(buf == untouched_buf);
    /* The LSE's buffer is the last of the call's five and the only one of its size. */
    char bytes[32];
    snprintf(bytes, sizeof bytes, "%zu", sizeof lse);
    setenv("FLASHPORT_TEST_FAIL_ALLOC_BYTES", bytes, 1);
    CHECK_STATUS(run(ctx), FLASHPORT_ERROR_OUT_OF_MEMORY, "FLASHPORT_TEST_FAIL_ALLOC_BYTES");
    CHECK(untouched());
    unsetenv("FLASHPORT_TEST_FAIL_ALLOC_BYTES");
    CHECK(run(ctx) == FLASHPORT_OK && correct());
}

/* On an empty cache folder: the failed build leaves no file in it. */
static void build_fails(flashport_context *ctx, const char *dir) {
    char path[1200];
    setenv("FLASHPORT_TEST_OPENCL_BUILD_OPTIONS", "-DDTYPE=(", 1);
    CHECK_STATUS(run(ctx), FLASHPORT_ERROR_DEVICE, "opencl: clBuildProgram: ");
    CHECK(message_has("compiler log"));
    CHECK(untouched());
    CHECK(cache_file(dir, path, sizeof path) < 0);
    unsetenv("FLASHPORT_TEST_OPENCL_BUILD_OPTIONS");
    CHECK(run(ctx) == FLASHPORT_OK && correct());
}

/* Cuts the file to `size` bytes, or overwrites it whole with a byte pattern (size < 0). */
static void damage(const char *path, long size) {
    struct stat st;
    CHECK(stat(path, &st) == 0);
    if (size >= 0) {
        CHECK(truncate(path, size) == 0);
        return;
    }
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f) return;
    for (long i = 0; i < (long)st.st_size; i++) fputc(0x5a, f);
    fclose(f);
}

/* A whole entry: longer than `cut` and starting with the key's first line. (Its size may
 * differ from the first one's: a driver's binary can hold what it compiled since.) */
static int rewritten(const char *dir, long cut) {
    static const char head[] = "flashport-opencl program";
    char path[1200], start[sizeof head] = "";
    const long size = cache_file(dir, path, sizeof path);
    FILE *f = size > cut ? fopen(path, "rb") : NULL;
    if (!f) return 0;
    const int ok = fread(start, 1, sizeof head - 1, f) == sizeof head - 1;
    fclose(f);
    return ok && strcmp(start, head) == 0;
}

static void damaged_cache(const char *dir) {
    char path[1200];
    run_fresh("first build");
    static const char *what[3] = {"cut in the key", "cut in the binary", "overwritten"};
    for (int i = 0; i < 3; i++) {
        const long size = cache_file(dir, path, sizeof path);
        CHECK(size > 0);
        if (size <= 0) return;
        const long cut = i == 0 ? 10 : i == 1 ? size / 2 + size / 4 : -1;
        damage(path, cut);
        run_fresh(what[i]);
        CHECK(rewritten(dir, cut));
    }
}

/* A folder the process cannot write to: one without write permission, or, where that does not
 * stop this user (root), /proc/self, which exists and takes no new files. */
static void unwritable_cache(void) {
    char dir[] = "/tmp/flashport-readonly-XXXXXX", probe[64], path[1200];
    CHECK(mkdtemp(dir) != NULL);
    CHECK(chmod(dir, 0555) == 0);
    snprintf(probe, sizeof probe, "%s/probe", dir);
    FILE *f = fopen(probe, "wb");
    const char *use = f ? "/proc/self" : dir;
    if (f) {
        fclose(f);
        remove(probe);
    }
    setenv("FLASHPORT_CACHE_DIR", use, 1);
    run_fresh("unwritable cache folder");
    CHECK(cache_file(use, path, sizeof path) < 0);
    printf("unwritable cache folder %s: the call ran, nothing written\n", use);
    chmod(dir, 0755);
    rmdir(dir);
}

int main(void) {
    for (int i = 0; i < ELEMS; i++) q[i] = (float)(i % 7) - 3.0f, v[i] = (float)((i * 5) % 11);
    char dir[] = "/tmp/flashport-faults-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    setenv("FLASHPORT_CACHE_DIR", dir, 1);
    flashport_context *ctx = NULL;
    if (flashport_context_create("opencl", &ctx) != FLASHPORT_OK) {
        fprintf(stderr, "no OpenCL device: %s\n", flashport_last_error());
        return 1;
    }
    build_fails(ctx, dir);
    allocation_fails(ctx);
    flashport_context_destroy(ctx);
    damaged_cache(dir);
    remove_cache(dir);
    unwritable_cache();
    return check_report("test_opencl_faults");
}
