/* Bad input gets a specific status and message, and leaves every output untouched. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

enum { B = 1, H = 2, N = 5, D = 4 };

static float q[B * H * N * D], k[B * H * N * D], v[B * H * N * D], o[B * H * N * D];
static float lse[B * H * N];

static void fill_sentinel(void) {
    for (size_t i = 0; i < sizeof o / sizeof o[0]; i++) o[i] = 12345.0f;
    for (size_t i = 0; i < sizeof lse / sizeof lse[0]; i++) lse[i] = 12345.0f;
}

static int outputs_untouched(void) {
    for (size_t i = 0; i < sizeof o / sizeof o[0]; i++)
        if (o[i] != 12345.0f) return 0;
    for (size_t i = 0; i < sizeof lse / sizeof lse[0]; i++)
        if (lse[i] != 12345.0f) return 0;
    return 1;
}

/* Runs the synchronous call on a broken problem and checks status, message and outputs. */
#define CHECK_REJECTED(ctx, prob, expected, needle)                                                \
    do {                                                                                           \
        fill_sentinel();                                                                           \
        CHECK_STATUS(flashport_attention_host(ctx, prob, q, k, v, o, lse), expected, needle);      \
        CHECK(outputs_untouched());                                                                \
    } while (0)

static void problem_errors(flashport_context *ctx) {
    flashport_problem p;
    flashport_problem_init(&p, FLASHPORT_F32, B, H, H, N, N, D, FLASHPORT_LAYOUT_BHND);

    CHECK_REJECTED(ctx, NULL, FLASHPORT_ERROR_INVALID_ARGUMENT, "problem is NULL");
    fill_sentinel();
    CHECK_STATUS(flashport_attention_host(ctx, &p, NULL, k, v, o, lse),
                 FLASHPORT_ERROR_INVALID_ARGUMENT, "args.q is NULL");
    CHECK(outputs_untouched());
    CHECK_STATUS(flashport_attention_host(NULL, &p, q, k, v, o, lse),
                 FLASHPORT_ERROR_INVALID_ARGUMENT, "context is NULL");

    flashport_problem bad = p;
    bad.seq_q = 0;
    CHECK_REJECTED(ctx, &bad, FLASHPORT_ERROR_INVALID_ARGUMENT, "seq_q must be positive");
    bad = p;
    bad.head_dim = -3;
    CHECK_REJECTED(ctx, &bad, FLASHPORT_ERROR_INVALID_ARGUMENT, "head_dim must be positive");
    bad = p;
    bad.batch = -1;
    CHECK_REJECTED(ctx, &bad, FLASHPORT_ERROR_INVALID_ARGUMENT, "batch must be positive");

    bad = p;
    bad.heads_q = 3;
    bad.heads_kv = 2;
    CHECK_REJECTED(ctx, &bad, FLASHPORT_ERROR_INVALID_ARGUMENT, "multiple of heads_kv");

    bad = p;
    bad.dtype = (flashport_dtype)7;
    CHECK_REJECTED(ctx, &bad, FLASHPORT_ERROR_INVALID_ARGUMENT, "unknown dtype");

    bad = p;
    bad.scale = NAN;
    CHECK_REJECTED(ctx, &bad, FLASHPORT_ERROR_INVALID_ARGUMENT, "scale must be finite");

    bad = p;
    bad.causal = 2;
    CHECK_REJECTED(ctx, &bad, FLASHPORT_ERROR_INVALID_ARGUMENT, "causal must be 0 or 1");

    /* Sizes whose byte count overflows 64 bits. */
    flashport_problem huge;
    flashport_problem_init(&huge, FLASHPORT_F32, INT64_C(1) << 30, 1 << 10, 1 << 10, 1 << 20,
                           1 << 20, 1 << 10, FLASHPORT_LAYOUT_BHND);
    CHECK_REJECTED(ctx, &huge, FLASHPORT_ERROR_SIZE_OVERFLOW, "overflows");
    CHECK(flashport_problem_extent(&huge, 'q') == 0);

    /* Strides that make two elements share an address. */
    bad = p;
    bad.q.seq = 2; /* rows of 4 floats 2 apart */
    CHECK_REJECTED(ctx, &bad, FLASHPORT_ERROR_INVALID_ARGUMENT, "overlap");
    bad = p;
    bad.o.head = 0;
    CHECK_REJECTED(ctx, &bad, FLASHPORT_ERROR_INVALID_ARGUMENT, "o strides");
    bad = p;
    bad.k.batch = -8;
    CHECK_REJECTED(ctx, &bad, FLASHPORT_ERROR_INVALID_ARGUMENT, "non-negative");

    /* Unknown kernel names, from the problem and from FLASHPORT_KERNEL. */
    bad = p;
    bad.kernel = "no_such_kernel";
    CHECK_REJECTED(ctx, &bad, FLASHPORT_ERROR_UNKNOWN_KERNEL, "no_such_kernel");
    setenv("FLASHPORT_KERNEL", "warp_drive", 1);
    CHECK_REJECTED(ctx, &p, FLASHPORT_ERROR_UNKNOWN_KERNEL, "warp_drive");
    unsetenv("FLASHPORT_KERNEL");
}

static void buffer_errors(flashport_context *ctx) {
    flashport_problem p;
    flashport_problem_init(&p, FLASHPORT_F32, B, H, H, N, N, D, FLASHPORT_LAYOUT_BHND);
    const size_t bytes = sizeof q;
    flashport_buffer *bq, *bk, *bv, *bo, *small;
    CHECK_STATUS(flashport_buffer_alloc(ctx, 0, &bq), FLASHPORT_ERROR_INVALID_ARGUMENT, "0 bytes");
    CHECK_STATUS(flashport_buffer_alloc(NULL, bytes, &bq), FLASHPORT_ERROR_INVALID_ARGUMENT, NULL);
    CHECK_STATUS(flashport_buffer_alloc(ctx, bytes, NULL), FLASHPORT_ERROR_INVALID_ARGUMENT, NULL);
    CHECK(flashport_buffer_alloc(ctx, bytes, &bq) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, bytes, &bk) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, bytes, &bv) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, bytes, &bo) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, bytes / 2, &small) == FLASHPORT_OK);
    CHECK_STATUS(flashport_buffer_upload(bq, 8, q, bytes), FLASHPORT_ERROR_INVALID_ARGUMENT,
                 "outside");
    CHECK_STATUS(flashport_buffer_download(bq, 0, NULL, 4), FLASHPORT_ERROR_INVALID_ARGUMENT, NULL);

    /* Strides that reach outside the buffer. */
    CHECK_STATUS(flashport_attention(ctx, &p, bq, bk, small, bo, NULL), FLASHPORT_ERROR_MISMATCH,
                 "buffer v holds");
    /* Output sharing storage with an input. */
    CHECK_STATUS(flashport_attention(ctx, &p, bq, bk, bv, bq, NULL), FLASHPORT_ERROR_MISMATCH,
                 "shares storage");
    CHECK_STATUS(flashport_attention(ctx, &p, bq, bk, bv, NULL, NULL),
                 FLASHPORT_ERROR_INVALID_ARGUMENT, "args.o is NULL");
    /* A buffer of another context. */
    flashport_context *other;
    CHECK(flashport_context_create("reference", &other) == FLASHPORT_OK);
    flashport_buffer *foreign;
    CHECK(flashport_buffer_alloc(other, bytes, &foreign) == FLASHPORT_OK);
    CHECK_STATUS(flashport_attention(ctx, &p, bq, bk, bv, foreign, NULL), FLASHPORT_ERROR_MISMATCH,
                 "another context");
    flashport_buffer_free(foreign);
    flashport_context_destroy(other);

    flashport_buffer *bufs[] = {bq, bk, bv, bo, small};
    for (int i = 0; i < 5; i++) flashport_buffer_free(bufs[i]);
    flashport_buffer_free(NULL);
}

/* Allocations a host cannot meet: OUT_OF_MEMORY with the size, the handle not written, and the
 * context goes on allocating and running (scripts/sanitize.sh runs this with ASan's
 * allocator_may_return_null, so that the sizes reach the library's own checks). */
static void allocation_faults(const char *backend) {
    flashport_context *ctx = NULL;
    if (flashport_context_create(backend, &ctx) != FLASHPORT_OK) {
        CHECK(strcmp(backend, "reference") != 0); /* only cpu_simd can be left out of a build */
        printf("allocation faults on %s not run: %s\n", backend, flashport_last_error());
        return;
    }
    flashport_buffer *untouched = (flashport_buffer *)&untouched, *b = untouched;
    const size_t absurd[2] = {SIZE_MAX / 2, SIZE_MAX - 10}; /* the second overflows rounding */
    for (int i = 0; i < 2; i++) {
        CHECK_STATUS(flashport_buffer_alloc(ctx, absurd[i], &b), FLASHPORT_ERROR_OUT_OF_MEMORY,
                     "out of host memory");
        CHECK(b == untouched);
    }
    /* The allocation hook, as a device backend's test uses it (tests/README.md). */
    setenv("FLASHPORT_TEST_FAIL_ALLOC_BYTES", "4096", 1);
    CHECK_STATUS(flashport_buffer_alloc(ctx, 4096, &b), FLASHPORT_ERROR_OUT_OF_MEMORY,
                 "4096 bytes refused");
    CHECK(b == untouched);
    unsetenv("FLASHPORT_TEST_FAIL_ALLOC_BYTES");
    flashport_problem p;
    flashport_problem_init(&p, FLASHPORT_F32, B, H, H, N, N, D, FLASHPORT_LAYOUT_BHND);
    fill_sentinel();
    CHECK(flashport_attention_host(ctx, &p, q, k, v, o, lse) == FLASHPORT_OK);
    CHECK(!outputs_untouched() && isfinite(o[0]) && isfinite(lse[0]));
    flashport_context_destroy(ctx);
}

static void selection_errors(void) {
    flashport_context *ctx = NULL;
    CHECK_STATUS(flashport_context_create("warp_drive", &ctx), FLASHPORT_ERROR_UNKNOWN_BACKEND,
                 "unknown backend 'warp_drive'");
    CHECK(ctx == NULL);
    CHECK_STATUS(flashport_context_create("reference,bogus_name:1", &ctx),
                 FLASHPORT_ERROR_UNKNOWN_BACKEND, "bogus_name");
    CHECK_STATUS(flashport_context_create("reference:", &ctx), FLASHPORT_ERROR_INVALID_ARGUMENT,
                 "empty or overlong device");
    CHECK_STATUS(flashport_context_create("reference,,cpu_simd", &ctx),
                 FLASHPORT_ERROR_INVALID_ARGUMENT, "empty entry");
    CHECK_STATUS(flashport_context_create("Reference!", &ctx), FLASHPORT_ERROR_INVALID_ARGUMENT,
                 "not a backend name");
    CHECK_STATUS(flashport_context_create("auto:1", &ctx), FLASHPORT_ERROR_INVALID_ARGUMENT,
                 "'auto' takes no device");
    CHECK_STATUS(flashport_context_create("reference:3", &ctx), FLASHPORT_ERROR_NO_DEVICE,
                 "device 3 requested");
    CHECK_STATUS(flashport_context_create("reference:gpu", &ctx), FLASHPORT_ERROR_NO_DEVICE,
                 "not an index");
    CHECK_STATUS(flashport_context_create("reference", NULL), FLASHPORT_ERROR_INVALID_ARGUMENT,
                 "out is NULL");

    /* Malformed and unknown FLASHPORT_BACKEND values, with the NULL spec that reads it. */
    setenv("FLASHPORT_BACKEND", "reference;cuda", 1);
    CHECK_STATUS(flashport_context_create(NULL, &ctx), FLASHPORT_ERROR_INVALID_ARGUMENT,
                 "FLASHPORT_BACKEND");
    setenv("FLASHPORT_BACKEND", "nosuchbackend", 1);
    CHECK_STATUS(flashport_context_create(NULL, &ctx), FLASHPORT_ERROR_UNKNOWN_BACKEND,
                 "nosuchbackend");
    /* An explicit list whose entries cannot be met names each entry and its reason. */
    setenv("FLASHPORT_BACKEND", "hip:5,reference:9", 1);
    CHECK_STATUS(flashport_context_create(NULL, &ctx), FLASHPORT_ERROR_BACKEND_UNAVAILABLE,
                 "reference:9: device 9 requested");
    CHECK(strstr(flashport_last_error(), "hip:5: ") != NULL);
    /* A list is an ordered preference: the first entry that can be met is taken. */
    setenv("FLASHPORT_BACKEND", "reference:9,reference", 1);
    CHECK(flashport_context_create(NULL, &ctx) == FLASHPORT_OK);
    CHECK(ctx && strcmp(flashport_context_backend(ctx), "reference") == 0);
    CHECK(ctx && strstr(flashport_context_selection(ctx), "reference chosen") != NULL);
    flashport_context_destroy(ctx);
    unsetenv("FLASHPORT_BACKEND");
}

static void introspection_errors(void) {
    flashport_backend_info bi;
    flashport_kernel_info ki;
    flashport_device_info di;
    int idx;
    CHECK_STATUS(flashport_backend_get_info(-1, &bi), FLASHPORT_ERROR_INVALID_ARGUMENT, "outside");
    CHECK_STATUS(flashport_backend_get_info(0, NULL), FLASHPORT_ERROR_INVALID_ARGUMENT, NULL);
    CHECK_STATUS(flashport_backend_find("nope", &idx), FLASHPORT_ERROR_UNKNOWN_BACKEND, "nope");
    CHECK(flashport_kernel_count("nope") == -1);
    CHECK_STATUS(flashport_kernel_get_info("reference", 99, &ki), FLASHPORT_ERROR_INVALID_ARGUMENT,
                 "index 99");
    CHECK_STATUS(flashport_device_get_info("reference", 4, &di), FLASHPORT_ERROR_NO_DEVICE,
                 "4 requested");
    CHECK(strcmp(flashport_status_string(FLASHPORT_ERROR_UNKNOWN_KERNEL), "unknown kernel") == 0);
    CHECK(strcmp(flashport_status_string((flashport_status)99), "unknown status") == 0);
}

/* The read-bandwidth micro-benchmark: NULL arguments and a zero-sized method buffer are
 * refused, a backend without one declines it by name, and neither touches the outputs. */
static void read_bandwidth_errors(flashport_context *ctx) {
    double gbps = -1.0;
    char method[16] = "untouched";
    CHECK_STATUS(flashport_measure_read_bandwidth(NULL, &gbps, method, sizeof method),
                 FLASHPORT_ERROR_INVALID_ARGUMENT, "NULL");
    CHECK_STATUS(flashport_measure_read_bandwidth(ctx, NULL, method, sizeof method),
                 FLASHPORT_ERROR_INVALID_ARGUMENT, "NULL");
    CHECK_STATUS(flashport_measure_read_bandwidth(ctx, &gbps, method, 0),
                 FLASHPORT_ERROR_INVALID_ARGUMENT, "method_size");
    CHECK_STATUS(flashport_measure_read_bandwidth(ctx, &gbps, method, sizeof method),
                 FLASHPORT_ERROR_UNSUPPORTED, "reference has no read-bandwidth");
    CHECK(gbps == -1.0 && strcmp(method, "untouched") == 0);
}

int main(void) {
    unsetenv("FLASHPORT_BACKEND");
    unsetenv("FLASHPORT_KERNEL");
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) q[i] = k[i] = v[i] = (float)(i % 7) * 0.1f;
    flashport_context *ctx;
    if (flashport_context_create("reference", &ctx) != FLASHPORT_OK) {
        fprintf(stderr, "cannot open the reference backend: %s\n", flashport_last_error());
        return 1;
    }
    problem_errors(ctx);
    buffer_errors(ctx);
    allocation_faults("reference");
    allocation_faults("cpu_simd");
    selection_errors();
    introspection_errors();
    read_bandwidth_errors(ctx);
    flashport_context_destroy(ctx);
    return check_report("test_api_errors");
}
