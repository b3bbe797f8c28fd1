/* Buffers in host memory, for the backends linked into the core (fp_host_memory.h). */
#include <stdlib.h>
#include <string.h>

#include "fp_core.h"
#include "fp_host_memory.h"

flashport_status fp_host_buffer_alloc(void *dev, size_t bytes, void **handle) {
    (void)dev;
    /* aligned_alloc wants a size that is a multiple of the alignment. */
    const size_t rounded = (bytes + 63) / 64 * 64;
    void *mem = rounded >= bytes ? aligned_alloc(64, rounded ? rounded : 64) : NULL;
    if (!mem)
        return fp_error(FLASHPORT_ERROR_OUT_OF_MEMORY, "host memory",
                        "buffer_alloc: out of host memory, %zu bytes requested", bytes);
    *handle = mem;
    return FLASHPORT_OK;
}

void fp_host_buffer_free(void *dev, void *handle) {
    (void)dev;
    free(handle);
}

flashport_status fp_host_buffer_upload(void *dev, void *handle, size_t offset, const void *src,
                                       size_t bytes) {
    (void)dev;
    memcpy((char *)handle + offset, src, bytes);
    return FLASHPORT_OK;
}

flashport_status fp_host_buffer_download(void *dev, const void *handle, size_t offset, void *dst,
                                         size_t bytes) {
    (void)dev;
    memcpy(dst, (const char *)handle + offset, bytes);
    return FLASHPORT_OK;
}
