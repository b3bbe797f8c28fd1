/*
 * The OpenCL backend's plumbing: device listing and selection by index and by name, the
 * planner's reasons and its tuning override, the on-disk program cache (written, reused,
 * rebuilt when damaged, optional when unwritable), device timers and peaks.
 *
 * With the argument "no-platforms" (run with an empty ICD vendor folder) or "no-devices" (PoCL
 * told to load no device) it checks instead that the backend reports itself unavailable with
 * the reason, and that a context is refused with it.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

/* A small problem whose answer is known without a reference: with K all zero every key
 * scores the same, so each output row is the mean of the V rows. */
static int run_uniform(flashport_context *ctx) {
    enum { N = 40, D = 24 };
    static float q[N * D], k[N * D], v[N * D], o[N * D];
    for (int i = 0; i < N * D; i++) {
        q[i] = (float)(i % 7) - 3.0f;
        k[i] = 0.0f;
        v[i] = (float)(i / D);
    }
    flashport_problem p;
    flashport_problem_init(&p, FLASHPORT_F32, 1, 1, 1, N, N, D, FLASHPORT_LAYOUT_BHND);
    if (flashport_attention_host(ctx, &p, q, k, v, o, NULL) != FLASHPORT_OK) {
        fprintf(stderr, "  %s\n", flashport_last_error());
        return 0;
    }
    double expected = (N - 1) / 2.0;
    for (int i = 0; i < N * D; i++)
        if (fabs(o[i] - expected) > 1e-5) return 0;
    return 1;
}

/* Paths of the cache files in dir: returns how many, the first one in first[len]. */
static int cache_files(const char *dir, char *first, size_t len) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "opencl-", 7) != 0) continue;
        if (n++ == 0) snprintf(first, len, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    return n;
}

static void check_unavailable(const char *reason) {
    int index = -1;
    flashport_backend_info info;
    CHECK_STATUS(flashport_backend_find("opencl", &index), FLASHPORT_OK, NULL);
    CHECK_STATUS(flashport_backend_get_info(index, &info), FLASHPORT_OK, NULL);
    CHECK(!info.available);
    CHECK(strstr(info.reason, reason) != NULL);
    printf("reason: %s\n", info.reason);
    flashport_context *ctx = NULL;
    CHECK_STATUS(flashport_context_create("opencl", &ctx), FLASHPORT_ERROR_BACKEND_UNAVAILABLE,
                 reason);
    CHECK(ctx == NULL);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "no-platforms") == 0) {
        check_unavailable("no OpenCL platforms");
        return check_report("test_opencl_backend no-platforms");
    }
    if (argc > 1 && strcmp(argv[1], "no-devices") == 0) {
        check_unavailable("1 OpenCL platform(s) but no devices");
        return check_report("test_opencl_backend no-devices");
    }
    char dir[] = "/tmp/flashport-opencl-test-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    setenv("FLASHPORT_CACHE_DIR", dir, 1);
    unsetenv("FLASHPORT_OPENCL_TILE");
    unsetenv("FLASHPORT_OPENCL_KERNEL");

    /* Listing: available, with the properties the planner uses. */
    int index = -1;
    flashport_backend_info info;
    CHECK_STATUS(flashport_backend_find("opencl", &index), FLASHPORT_OK, NULL);
    CHECK_STATUS(flashport_backend_get_info(index, &info), FLASHPORT_OK, NULL);
    CHECK(info.available && info.device_count >= 1 && info.is_module);
    flashport_device_info dev;
    CHECK_STATUS(flashport_device_get_info("opencl", 0, &dev), FLASHPORT_OK, NULL);
    CHECK(dev.name[0] != '\0' && dev.memory_bytes > 0 && dev.compute_units > 0);
    CHECK(strstr(dev.details, "platform=") && strstr(dev.details, "local_mem=") &&
          strstr(dev.details, "max_work_group=") && strstr(dev.details, "preferred_vector_float="));
    CHECK_STATUS(flashport_device_get_info("opencl", info.device_count, &dev),
                 FLASHPORT_ERROR_NO_DEVICE, NULL);

    /* Selection by part of the device name (its first six characters), and a name that
     * matches nothing. */
    flashport_device_get_info("opencl", 0, &dev);
    char spec[64];
    snprintf(spec, sizeof spec, "opencl:%.6s", dev.name);
    flashport_context *ctx = NULL;
    CHECK_STATUS(flashport_context_create(spec, &ctx), FLASHPORT_OK, NULL);
    if (ctx) {
        CHECK(flashport_context_device(ctx) == 0);
        flashport_context_destroy(ctx);
        ctx = NULL;
    }
    CHECK(flashport_context_create("opencl:no-such-device-anywhere", &ctx) != FLASHPORT_OK);
    CHECK(message_has("no-such-device-anywhere"));
    CHECK_STATUS(flashport_context_create("opencl:0", &ctx), FLASHPORT_OK, NULL);
    if (!ctx) return check_report("test_opencl_backend");

    /* The kernel choice: nv_tf32x3 (NVIDIA tensor cores) where it can run, else tiled, and
     * FLASHPORT_OPENCL_KERNEL to ask for either; a value that is neither is an error. */
    flashport_problem p;
    flashport_problem_init(&p, FLASHPORT_F32, 1, 2, 1, 100, 120, 64, FLASHPORT_LAYOUT_BHND);
    flashport_plan_info plan;
    const int nv_capable = strstr(dev.details, "nv_tf32x3 eligible") != NULL;
    CHECK_STATUS(flashport_plan(ctx, &p, &plan), FLASHPORT_OK, NULL);
    CHECK(strcmp(plan.kernel, nv_capable ? "nv_tf32x3" : "tiled") == 0);
    printf("plan without FLASHPORT_OPENCL_KERNEL: %s: %s\n", plan.kernel, plan.reason);
    setenv("FLASHPORT_OPENCL_KERNEL", "nv_tf32x3", 1);
    if (nv_capable) {
        CHECK_STATUS(flashport_plan(ctx, &p, &plan), FLASHPORT_OK, NULL);
        CHECK(strcmp(plan.kernel, "nv_tf32x3") == 0 && strstr(plan.reason, "D=64"));
    } else {
        CHECK_STATUS(flashport_plan(ctx, &p, &plan), FLASHPORT_ERROR_UNSUPPORTED, "NVIDIA");
    }
    flashport_problem p16 = p;
    p16.dtype = FLASHPORT_F16;
    CHECK_STATUS(flashport_plan(ctx, &p16, &plan), FLASHPORT_ERROR_UNSUPPORTED,
                 nv_capable ? "f32" : "NVIDIA");
    setenv("FLASHPORT_OPENCL_KERNEL", "fastest", 1);
    CHECK_STATUS(flashport_plan(ctx, &p, &plan), FLASHPORT_ERROR_INVALID_ARGUMENT,
                 "FLASHPORT_OPENCL_KERNEL");

    /* Plans of the portable kernel say what tile they chose; the override is applied, checked
     * and explained. */
    setenv("FLASHPORT_OPENCL_KERNEL", "tiled", 1);
    CHECK_STATUS(flashport_plan(ctx, &p, &plan), FLASHPORT_OK, NULL);
    CHECK(strcmp(plan.kernel, "tiled") == 0 && strstr(plan.reason, "br=") &&
          plan.workspace_bytes == 0);
    printf("plan: %s\n", plan.reason);
    setenv("FLASHPORT_OPENCL_TILE", "br=32,tm=2", 1);
    CHECK_STATUS(flashport_plan(ctx, &p, &plan), FLASHPORT_OK, NULL);
    CHECK(strstr(plan.reason, "br=32 ") && strstr(plan.reason, "tm=2 ") &&
          strstr(plan.reason, "FLASHPORT_OPENCL_TILE"));
    setenv("FLASHPORT_OPENCL_TILE", "br=32,rows=4", 1);
    CHECK_STATUS(flashport_plan(ctx, &p, &plan), FLASHPORT_ERROR_INVALID_ARGUMENT, "rows=4");
    setenv("FLASHPORT_OPENCL_TILE", "br=30,tm=4", 1);
    CHECK_STATUS(flashport_plan(ctx, &p, &plan), FLASHPORT_ERROR_UNSUPPORTED, "tm | br");
    setenv("FLASHPORT_OPENCL_TILE", "br=1024,bc=1024,tm=1,tn=1,dv=1024", 1);
    CHECK_STATUS(flashport_plan(ctx, &p, &plan), FLASHPORT_ERROR_UNSUPPORTED, "work-items");
    /* Zero and huge keys are out of range before any of them divides or multiplies (kc=0 and
     * tm=0 divided by zero, found by fuzz_tile_env). */
    static const char *const out_of_range[] = {"kc=0",  "tm=0", "tn=0", "br=9223372036854775807",
                                               "dv=-4", "om=0"};
    for (size_t i = 0; i < sizeof out_of_range / sizeof out_of_range[0]; i++) {
        setenv("FLASHPORT_OPENCL_TILE", out_of_range[i], 1);
        CHECK_STATUS(flashport_plan(ctx, &p, &plan), FLASHPORT_ERROR_UNSUPPORTED, "is outside");
    }
    unsetenv("FLASHPORT_OPENCL_TILE");
    unsetenv("FLASHPORT_OPENCL_KERNEL");

    /* The program cache: the first run writes an entry; a new context reuses it. A damaged
     * entry is rebuilt and rewritten; an unwritable folder only costs the caching. */
    char entry[1200] = "";
    CHECK(run_uniform(ctx));
    CHECK(cache_files(dir, entry, sizeof entry) == 1);
    flashport_context_destroy(ctx);
    ctx = NULL;
    CHECK_STATUS(flashport_context_create("opencl:0", &ctx), FLASHPORT_OK, NULL);
    if (!ctx) return check_report("test_opencl_backend");
    CHECK(run_uniform(ctx));
    flashport_context_destroy(ctx);
    FILE *f = fopen(entry, "r+b");
    CHECK(f != NULL);
    if (f) {
        /* Keep the key, break the binary at its end. */
        fseek(f, -64, SEEK_END);
        for (int i = 0; i < 64; i++) fputc(0x5a, f);
        fclose(f);
    }
    CHECK_STATUS(flashport_context_create("opencl:0", &ctx), FLASHPORT_OK, NULL);
    if (!ctx) return check_report("test_opencl_backend");
    CHECK(run_uniform(ctx));
    flashport_context_destroy(ctx);
    setenv("FLASHPORT_CACHE_DIR", "/proc/flashport-cannot-write-here", 1);
    CHECK_STATUS(flashport_context_create("opencl:0", &ctx), FLASHPORT_OK, NULL);
    if (!ctx) return check_report("test_opencl_backend");
    CHECK(run_uniform(ctx));
    setenv("FLASHPORT_CACHE_DIR", dir, 1);

    /* Device timers and peaks. */
    flashport_timer *timer = NULL;
    double ms = -1.0;
    CHECK_STATUS(flashport_timer_start(ctx, &timer), FLASHPORT_OK, NULL);
    CHECK(run_uniform(ctx));
    CHECK_STATUS(flashport_timer_stop(timer, &ms), FLASHPORT_OK, NULL);
    CHECK(ms > 0.0);
    flashport_peaks peaks;
    CHECK_STATUS(flashport_measure_peaks(ctx, &peaks), FLASHPORT_OK, NULL);
    CHECK(peaks.f32_fma_tflops > 0.0 && peaks.copy_gbps > 0.0 && peaks.method[0] != '\0');
    printf("peaks: %.4f TFLOP/s f32 fma, %.1f GB/s copy (%s)\n", peaks.f32_fma_tflops,
           peaks.copy_gbps, peaks.method);
    flashport_context_destroy(ctx);

    /* Leave no files behind. */
    for (char path[1200]; cache_files(dir, path, sizeof path) > 0;) remove(path);
    rmdir(dir);
    return check_report("test_opencl_backend");
}
