/* flashport_context_create_on_queue where there is no queue to share: the CPU backends run on
 * the host and decline with UNSUPPORTED and the reason, and a spec that does not name exactly
 * one backend is refused before any backend is asked. Nothing is opened in either case. */
#include "check.h"

static int not_a_queue;

static void declined(const char *spec, flashport_status expected, const char *needle) {
    flashport_context *ctx = NULL;
    CHECK_STATUS(flashport_context_create_on_queue(spec, &not_a_queue, &ctx), expected, needle);
    CHECK(ctx == NULL);
}

int main(void) {
    declined("reference", FLASHPORT_ERROR_UNSUPPORTED,
             "reference has no queues to share (it runs synchronously on the host)");
    declined("reference:0", FLASHPORT_ERROR_UNSUPPORTED, "reference has no queues to share");

    int index = -1;
    flashport_backend_info info;
    CHECK_STATUS(flashport_backend_find("cpu_simd", &index), FLASHPORT_OK, NULL);
    CHECK_STATUS(flashport_backend_get_info(index, &info), FLASHPORT_OK, NULL);
    if (info.available)
        declined("cpu_simd", FLASHPORT_ERROR_UNSUPPORTED, "cpu_simd has no queues to share");
    else
        declined("cpu_simd", FLASHPORT_ERROR_BACKEND_UNAVAILABLE, "cpu_simd unavailable");

    declined("auto", FLASHPORT_ERROR_INVALID_ARGUMENT, "must name exactly one backend");
    declined("reference,cpu_simd", FLASHPORT_ERROR_INVALID_ARGUMENT,
             "must name exactly one backend");
    declined("nosuch", FLASHPORT_ERROR_UNKNOWN_BACKEND, "unknown backend 'nosuch'");
    flashport_context *ctx = NULL;
    CHECK_STATUS(flashport_context_create_on_queue(NULL, NULL, &ctx),
                 FLASHPORT_ERROR_INVALID_ARGUMENT, "spec and out are required");
    CHECK(ctx == NULL);
    /* A NULL queue is CUDA's and HIP's default stream; OpenCL has none. */
    if (flashport_backend_find("opencl", &index) == FLASHPORT_OK &&
        flashport_backend_get_info(index, &info) == FLASHPORT_OK && info.available) {
        CHECK_STATUS(flashport_context_create_on_queue("opencl", NULL, &ctx),
                     FLASHPORT_ERROR_INVALID_ARGUMENT, "no default queue");
        CHECK(ctx == NULL);
    }
    return check_report("test_context_on_queue");
}
