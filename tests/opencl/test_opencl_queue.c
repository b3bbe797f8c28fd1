/*
 * A context on the caller's own OpenCL queue (flashport_context_create_on_queue), used the way a
 * framework would: the test creates the context, queue and cl_mem buffers itself, fills them
 * with non-blocking writes, wraps them without copies, queues attention, reads O back with a
 * non-blocking read and waits with clFinish: only queue order puts the three in sequence. The
 * result is checked against the reference backend. After flashport_context_destroy the queue
 * must still work and hold no reference of flashport's.
 *
 * Also: a queue without profiling (host-clock timers, peaks declined by name), a queue with
 * profiling (device timers), an out-of-order queue (declined), and, where the platform has two
 * devices (ctest sets POCL_DEVICES for PoCL), a context of both devices with the queue on the
 * second: the spec's device must match the queue's, and programs are built in that context and
 * cached on disk for that device.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp, nanosleep */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "cl_loader.h"

enum { B = 2, HQ = 4, HKV = 2, NQ = 37, NKV = 53, D = 32 };
enum { Q_N = B * HQ * NQ * D, KV_N = B * HKV * NKV * D, LSE_N = B * HQ * NQ };

static float q[Q_N], k[KV_N], v[KV_N], o_ref[Q_N], lse_ref[LSE_N];

static const fp_cl_api *cl;

static void fill(float *x, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

static void problem(flashport_problem *p) {
    flashport_problem_init(p, FLASHPORT_F32, B, HQ, HKV, NQ, NKV, D, FLASHPORT_LAYOUT_BHND);
    p->causal = 1;
}

static int close_to(const float *got, const float *want, int n) {
    for (int i = 0; i < n; i++)
        if (!(fabsf(got[i] - want[i]) <= 1e-4f + 1e-4f * fabsf(want[i]))) {
            fprintf(stderr, "  element %d: %g, expected %g\n", i, got[i], want[i]);
            return 0;
        }
    return 1;
}

/* The program cache files in dir; removed as they are counted when remove_them is set. */
static int cache_files(const char *dir, int remove_them) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "opencl-", 7) != 0) continue;
        n++;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (remove_them) remove(path);
    }
    closedir(d);
    return n;
}

static cl_uint queue_references(cl_command_queue queue) {
    cl_uint n = 0;
    CHECK(cl->clGetCommandQueueInfo(queue, CL_QUEUE_REFERENCE_COUNT, sizeof n, &n, NULL) ==
          CL_SUCCESS);
    return n;
}

/* The queue's count once it is back to `expected`, or after two seconds: a driver may drop a
 * finished command's hold on its queue on a thread of its own, after clFinish has returned
 * (PoCL does, about once in twenty runs under ASan). A reference the library kept stays. */
static cl_uint settled_references(cl_command_queue queue, cl_uint expected) {
    cl_uint n = queue_references(queue);
    for (int waited = 0; n != expected && waited < 2000; waited++) {
        nanosleep(&(struct timespec){0, 1000000}, NULL);
        n = queue_references(queue);
    }
    return n;
}

static cl_mem new_buffer(cl_context context, size_t bytes) {
    cl_int err = CL_SUCCESS;
    cl_mem m = cl->clCreateBuffer(context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    CHECK(m && err == CL_SUCCESS);
    return m;
}

static void device_name(cl_device_id id, char *name, size_t len) {
    name[0] = '\0';
    cl->clGetDeviceInfo(id, CL_DEVICE_NAME, len, name, NULL);
    name[len - 1] = '\0';
}

/* flashport's index of the nth device called name (flashport lists a platform's devices in the
 * platform's order, so two devices of one name keep theirs). */
static int flashport_index(const char *name, int nth) {
    flashport_device_info info;
    for (int i = 0; flashport_device_get_info("opencl", i, &info) == FLASHPORT_OK; i++)
        if (strcmp(info.name, name) == 0 && nth-- == 0) return i;
    return -1;
}

/* Attention on the caller's queue through wrapped buffers, O read back by the caller. */
static void run_on_queue(cl_context context, cl_command_queue queue, const char *spec,
                         int expected_device) {
    flashport_context *ctx = NULL;
    CHECK_STATUS(flashport_context_create_on_queue(spec, queue, &ctx), FLASHPORT_OK, NULL);
    if (!ctx) return;
    CHECK(strcmp(flashport_context_backend(ctx), "opencl") == 0);
    CHECK(flashport_context_device(ctx) == expected_device);
    printf("%s: %s\n", spec, flashport_context_selection(ctx));

    cl_mem mq = new_buffer(context, sizeof q), mk = new_buffer(context, sizeof k),
           mv = new_buffer(context, sizeof v), mo = new_buffer(context, sizeof q),
           ml = new_buffer(context, sizeof lse_ref);
    CHECK(cl->clEnqueueWriteBuffer(queue, mq, CL_FALSE, 0, sizeof q, q, 0, NULL, NULL) ==
          CL_SUCCESS);
    CHECK(cl->clEnqueueWriteBuffer(queue, mk, CL_FALSE, 0, sizeof k, k, 0, NULL, NULL) ==
          CL_SUCCESS);
    CHECK(cl->clEnqueueWriteBuffer(queue, mv, CL_FALSE, 0, sizeof v, v, 0, NULL, NULL) ==
          CL_SUCCESS);

    flashport_buffer *bq = NULL, *bk = NULL, *bv = NULL, *bo = NULL, *bl = NULL;
    CHECK_STATUS(flashport_buffer_wrap(ctx, mq, sizeof q, &bq), FLASHPORT_OK, NULL);
    CHECK_STATUS(flashport_buffer_wrap(ctx, mk, sizeof k, &bk), FLASHPORT_OK, NULL);
    CHECK_STATUS(flashport_buffer_wrap(ctx, mv, sizeof v, &bv), FLASHPORT_OK, NULL);
    CHECK_STATUS(flashport_buffer_wrap(ctx, mo, sizeof q, &bo), FLASHPORT_OK, NULL);
    CHECK_STATUS(flashport_buffer_wrap(ctx, ml, sizeof lse_ref, &bl), FLASHPORT_OK, NULL);
    flashport_problem p;
    problem(&p);
    CHECK_STATUS(flashport_attention(ctx, &p, bq, bk, bv, bo, bl), FLASHPORT_OK, NULL);

    static float o[Q_N], lse[LSE_N];
    CHECK(cl->clEnqueueReadBuffer(queue, mo, CL_FALSE, 0, sizeof o, o, 0, NULL, NULL) ==
          CL_SUCCESS);
    CHECK(cl->clEnqueueReadBuffer(queue, ml, CL_FALSE, 0, sizeof lse, lse, 0, NULL, NULL) ==
          CL_SUCCESS);
    CHECK(cl->clFinish(queue) == CL_SUCCESS);
    CHECK(close_to(o, o_ref, Q_N));
    CHECK(close_to(lse, lse_ref, LSE_N));

    flashport_buffer_free(bq);
    flashport_buffer_free(bk);
    flashport_buffer_free(bv);
    flashport_buffer_free(bo);
    flashport_buffer_free(bl);
    flashport_context_destroy(ctx);

    /* The queue is the caller's again: a copy and a read on it complete. */
    static float copy[Q_N];
    cl_mem again = new_buffer(context, sizeof q);
    CHECK(cl->clEnqueueCopyBuffer(queue, mo, again, 0, 0, sizeof q, 0, NULL, NULL) == CL_SUCCESS);
    CHECK(cl->clEnqueueReadBuffer(queue, again, CL_TRUE, 0, sizeof copy, copy, 0, NULL, NULL) ==
          CL_SUCCESS);
    CHECK(memcmp(copy, o, sizeof copy) == 0);
    cl_mem mems[] = {mq, mk, mv, mo, ml, again};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++) cl->clReleaseMemObject(mems[i]);
}

/* Timers: from the host's clock on a queue without profiling, from the kernels' profiling
 * stamps on one with it. Peaks need profiling and are declined by name without it. */
static void timers(cl_command_queue queue, int profiled) {
    flashport_context *ctx = NULL;
    CHECK_STATUS(flashport_context_create_on_queue("opencl", queue, &ctx), FLASHPORT_OK, NULL);
    if (!ctx) return;
    flashport_problem p;
    problem(&p);
    static float o[Q_N];
    flashport_timer *t = NULL;
    double ms = -1.0;
    CHECK_STATUS(flashport_timer_start(ctx, &t), FLASHPORT_OK, NULL);
    CHECK_STATUS(flashport_attention_host(ctx, &p, q, k, v, o, NULL), FLASHPORT_OK, NULL);
    if (t) CHECK_STATUS(flashport_timer_stop(t, &ms), FLASHPORT_OK, NULL);
    CHECK(ms > 0.0);
    CHECK(close_to(o, o_ref, Q_N));
    printf("%s queue: attention timed at %.3f ms\n", profiled ? "profiled" : "unprofiled", ms);
    if (!profiled) {
        flashport_peaks peaks;
        CHECK_STATUS(flashport_measure_peaks(ctx, &peaks), FLASHPORT_ERROR_UNSUPPORTED,
                     "CL_QUEUE_PROFILING_ENABLE");
    }
    flashport_context_destroy(ctx);
}

int main(void) {
    int index = -1;
    flashport_backend_info info;
    CHECK_STATUS(flashport_backend_find("opencl", &index), FLASHPORT_OK, NULL);
    CHECK_STATUS(flashport_backend_get_info(index, &info), FLASHPORT_OK, NULL);
    char reason[512] = "";
    cl = fp_cl_load(reason, sizeof reason);
    if (!info.available || !cl) {
        printf("opencl unavailable (%s): nothing to share a queue with\n", info.reason);
        return check_report("test_opencl_queue");
    }

    fill(q, Q_N, 1);
    fill(k, KV_N, 2);
    fill(v, KV_N, 3);
    flashport_context *ref = NULL;
    CHECK_STATUS(flashport_context_create("reference", &ref), FLASHPORT_OK, NULL);
    flashport_problem p;
    problem(&p);
    CHECK_STATUS(flashport_attention_host(ref, &p, q, k, v, o_ref, lse_ref), FLASHPORT_OK, NULL);
    flashport_context_destroy(ref);

    /* The first two devices of the platform of flashport's first device (a GPU where there is
     * one). */
    flashport_device_info first;
    CHECK_STATUS(flashport_device_get_info("opencl", 0, &first), FLASHPORT_OK, NULL);
    cl_platform_id platforms[16];
    cl_uint n_platforms = 0;
    CHECK(cl->clGetPlatformIDs(16, platforms, &n_platforms) == CL_SUCCESS);
    cl_device_id ids[2];
    cl_uint n_ids = 0;
    char name0[256], name1[256];
    for (cl_uint i = 0; i < n_platforms && i < 16 && n_ids == 0; i++) {
        cl_device_id all[64];
        cl_uint n = 0;
        if (cl->clGetDeviceIDs(platforms[i], CL_DEVICE_TYPE_ALL, 64, all, &n) != CL_SUCCESS)
            continue;
        for (cl_uint j = 0; j < n && j < 64; j++) {
            device_name(all[j], name0, sizeof name0);
            if (strcmp(name0, first.name) == 0) n_ids = n < 2 ? n : 2;
        }
        memcpy(ids, all, n_ids * sizeof ids[0]);
    }
    CHECK(n_ids > 0);
    if (n_ids == 0) return check_report("test_opencl_queue");
    device_name(ids[0], name0, sizeof name0);

    /* One device: the caller's context and a queue with default properties. */
    cl_int err = CL_SUCCESS;
    cl_context context = cl->clCreateContext(NULL, 1, &ids[0], NULL, NULL, &err);
    CHECK(context && err == CL_SUCCESS);
    cl_command_queue queue = cl->clCreateCommandQueue(context, ids[0], 0, &err);
    CHECK(queue && err == CL_SUCCESS);
    const int device0 = flashport_index(name0, 0);
    CHECK(device0 >= 0);
    const cl_uint references = queue_references(queue);
    run_on_queue(context, queue, "opencl", device0);
    char spec[32];
    snprintf(spec, sizeof spec, "opencl:%d", device0);
    run_on_queue(context, queue, spec, device0);
    CHECK(settled_references(queue, references) == references);
    timers(queue, 0);

    cl_command_queue profiled =
        cl->clCreateCommandQueue(context, ids[0], CL_QUEUE_PROFILING_ENABLE, &err);
    CHECK(profiled && err == CL_SUCCESS);
    if (profiled) {
        timers(profiled, 1);
        cl->clReleaseCommandQueue(profiled);
    }

    cl_command_queue unordered =
        cl->clCreateCommandQueue(context, ids[0], CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    if (unordered) {
        flashport_context *ctx = NULL;
        CHECK_STATUS(flashport_context_create_on_queue("opencl", unordered, &ctx),
                     FLASHPORT_ERROR_UNSUPPORTED, "out of order");
        CHECK(ctx == NULL);
        cl->clReleaseCommandQueue(unordered);
    } else {
        printf("the device has no out-of-order queues (%s): not checked\n", fp_cl_error_name(err));
    }
    cl->clReleaseCommandQueue(queue);
    cl->clReleaseContext(context);

    /* Two devices in one context, the queue on the second. */
    if (n_ids < 2) {
        printf("one device on the platform: the spec/queue mismatch is not exercised\n");
        return check_report("test_opencl_queue");
    }
    context = cl->clCreateContext(NULL, 2, ids, NULL, NULL, &err);
    CHECK(context && err == CL_SUCCESS);
    queue = cl->clCreateCommandQueue(context, ids[1], 0, &err);
    CHECK(queue && err == CL_SUCCESS);
    device_name(ids[1], name1, sizeof name1);
    const int device1 = flashport_index(name1, strcmp(name0, name1) == 0);
    CHECK(device1 >= 0 && device1 != device0);
    /* An empty program cache, so that the programs are built in this context and stored. */
    char dir[] = "/tmp/flashport-opencl-queue-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    setenv("FLASHPORT_CACHE_DIR", dir, 1);
    flashport_context *ctx = NULL;
    snprintf(spec, sizeof spec, "opencl:%d", device0);
    CHECK_STATUS(flashport_context_create_on_queue(spec, queue, &ctx), FLASHPORT_ERROR_MISMATCH,
                 "the queue is on device");
    CHECK(ctx == NULL);
    snprintf(spec, sizeof spec, "opencl:%d", device1);
    run_on_queue(context, queue, spec, device1);
    const int cached = cache_files(dir, 0);
    CHECK(cached > 0);
    run_on_queue(context, queue, "opencl", device1); /* from the cache this time */
    CHECK(cache_files(dir, 1) == cached);
    rmdir(dir);
    cl->clReleaseCommandQueue(queue);
    cl->clReleaseContext(context);
    return check_report("test_opencl_queue");
}
