/*
 * The .npy reader on arbitrary bytes: any input is either read (and then its element count
 * matches its shape and every element can be fetched) or refused with a status and a message;
 * never a crash, an out-of-bounds access, a leak or an allocation larger than the input
 * justifies (libFuzzer's malloc limit reports one).
 */
#define _GNU_SOURCE /* fmemopen */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* fmemopen needs at least one byte; an empty file is the same as a truncated magic. */
    if (size == 0) return 0;
    FILE *f = fmemopen((void *)data, size, "rb");
    if (!f) return 0;
    npy_array a;
    char msg[512];
    npy_status st = npy_read_stream(f, "fuzz.npy", -1, &a, msg, sizeof msg);
    fclose(f);
    if (st != NPY_OK) {
        if (!msg[0]) abort(); /* every refusal says why */
        return 0;
    }
    size_t count = 1;
    for (int i = 0; i < a.rank; i++) count *= (size_t)a.shape[i];
    if (count != a.count || a.rank < 0 || a.rank > NPY_MAX_RANK) abort();
    volatile double sink = 0.0;
    for (size_t i = 0; i < a.count; i++) sink += npy_get(&a, i);
    (void)sink;
    npy_free(&a);
    return 0;
}
