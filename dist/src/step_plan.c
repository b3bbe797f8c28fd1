/* Ring step shapes and the global positions of local rows. */
#include "step_plan.h"

fp_dist_step fp_dist_step_plan(flashport_dist_sharding sharding, int causal, int rank, int src,
                               int64_t n) {
    fp_dist_step s = {0, 0, n, 0, n, 0};
    if (!causal) return s;
    if (src == rank) {
        s.causal = 1;
        return s;
    }
    if (sharding == FLASHPORT_DIST_CONTIGUOUS) {
        /* an earlier block is fully visible, a later one fully masked */
        s.skip = src > rank;
        return s;
    }
    /* Zig-zag: the local rows are chunks r and 2P-1-r, the block's chunks src and 2P-1-src.
     * src < r: both local chunks come after chunk src and before chunk 2P-1-src, so every
     * query sees the block's first half. src > r: only local chunk 2P-1-r comes after both of
     * the block's chunks; chunk r comes before both. */
    if (src < rank) {
        s.kv_len = n / 2;
    } else {
        s.q_off = n / 2;
        s.q_len = n / 2;
    }
    return s;
}

int64_t flashport_dist_global_row(const flashport_dist_desc *d, int rank, int ranks, int64_t i) {
    if (!d || ranks < 1 || rank < 0 || rank >= ranks || i < 0 || i >= d->seq_local) return -1;
    int64_t n = d->seq_local;
    if (d->sharding != FLASHPORT_DIST_ZIGZAG) return (int64_t)rank * n + i;
    int64_t c = n / 2;
    if (c == 0) return -1;
    int64_t chunk = i < c ? rank : 2 * (int64_t)ranks - 1 - rank;
    return chunk * c + i % c;
}
