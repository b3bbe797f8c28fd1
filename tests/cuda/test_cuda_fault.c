/*
 * A kernel that faults on the device must surface as a status with the runtime's message, not
 * pass silently: the test wraps an address that is not device memory, runs a variant on it and
 * expects FLASHPORT_ERROR_DEVICE naming the CUDA call. Without a GPU the fault cannot be
 * provoked; the test then checks the other half of the contract: asking for cuda fails with
 * BACKEND_UNAVAILABLE and the runtime's reason, and nothing is opened.
 */
#include <stdint.h>

#include "check.h"

int main(void) {
    int idx;
    flashport_backend_info bi = {0};
    if (flashport_backend_find("cuda", &idx) != FLASHPORT_OK ||
        flashport_backend_get_info(idx, &bi) != FLASHPORT_OK || !bi.available) {
        flashport_context *none = NULL;
        CHECK_STATUS(flashport_context_create("cuda", &none), FLASHPORT_ERROR_BACKEND_UNAVAILABLE,
                     "cuda unavailable: ");
        CHECK(none == NULL);
        printf("no GPU here (%s): checked that cuda reports itself unavailable\n", bi.reason);
        return check_report("test_cuda_fault");
    }
    flashport_context *ctx = NULL;
    CHECK(flashport_context_create("cuda", &ctx) == FLASHPORT_OK);
    if (!ctx) return check_report("test_cuda_fault");

    flashport_problem p;
    flashport_problem_init(&p, FLASHPORT_F32, 1, 1, 1, 64, 64, 64, FLASHPORT_LAYOUT_BHND);
    p.kernel = "naive_tiled";
    const size_t bytes = 64 * 64 * sizeof(float);
    flashport_buffer *q = NULL, *k = NULL, *v = NULL, *o = NULL;
    CHECK(flashport_buffer_alloc(ctx, bytes, &q) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, bytes, &v) == FLASHPORT_OK);
    CHECK(flashport_buffer_alloc(ctx, bytes, &o) == FLASHPORT_OK);
    /* An address in no allocation: the kernel's reads of K fault. */
    CHECK(flashport_buffer_wrap(ctx, (void *)(uintptr_t)0x10000, bytes, &k) == FLASHPORT_OK);
    flashport_status st = flashport_attention(ctx, &p, q, k, v, o, NULL);
    if (st == FLASHPORT_OK) st = flashport_synchronize(ctx);
    CHECK(st == FLASHPORT_ERROR_DEVICE);
    CHECK(message_has("cuda: cuda"));
    printf("reported: %s\n", flashport_last_error());
    /* The context is unusable after a fault; the process ends here without tearing it down. */
    return check_report("test_cuda_fault");
}
