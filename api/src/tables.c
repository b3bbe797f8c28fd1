/*
 * Content checks of the int32 tables (cu_seqlens, seqlens_kv, block_table). Run on every call
 * whose tables the host can read; device-resident tables are downloaded and checked only with
 * FLASHPORT_CHECK=1, and the kernels must stay inside their buffers for any content.
 */
#include <inttypes.h>

#include "fp_core.h"

static flashport_status bad(const char *where, const char *fmt, long long a, long long b,
                            long long c) {
    return fp_error(FLASHPORT_ERROR_BAD_TABLE, where, fmt, a, b, c);
}

/* cu[0] >= 0, non-decreasing, cu[batch] <= total, and no sequence longer than longest. */
static flashport_status check_cu(const char *name, const int32_t *cu, int64_t batch, int64_t total,
                                 int64_t longest, const char *where) {
    if (cu[0] < 0)
        return fp_error(FLASHPORT_ERROR_BAD_TABLE, where, "%s[0] is %d; offsets are non-negative",
                        name, (int)cu[0]);
    for (int64_t b = 0; b < batch; b++) {
        const int64_t len = (int64_t)cu[b + 1] - cu[b];
        if (len < 0)
            return fp_error(FLASHPORT_ERROR_BAD_TABLE, where,
                            "%s is not monotonic: entry %lld is %d, entry %lld is %d", name,
                            (long long)b, (int)cu[b], (long long)(b + 1), (int)cu[b + 1]);
        if (len > longest)
            return fp_error(FLASHPORT_ERROR_BAD_TABLE, where,
                            "%s: sequence %lld has %lld rows, more than the descriptor's maximum "
                            "%lld",
                            name, (long long)b, (long long)len, (long long)longest);
    }
    if (cu[batch] > total)
        return fp_error(FLASHPORT_ERROR_BAD_TABLE, where,
                        "%s[%lld] = %d overruns the packed tensor's %lld rows", name,
                        (long long)batch, (int)cu[batch], (long long)total);
    return FLASHPORT_OK;
}

flashport_status fp_check_tables(const fp_problem *p, const int32_t *const tables[FP_SLOT_COUNT],
                                 const char *where) {
    flashport_status st;
    if (tables[FP_SLOT_CU_SEQLENS_Q] && (st = check_cu("cu_seqlens_q", tables[FP_SLOT_CU_SEQLENS_Q],
                                                       p->batch, p->total_q, p->seq_q, where)))
        return st;
    if (tables[FP_SLOT_CU_SEQLENS_KV] &&
        (st = check_cu("cu_seqlens_kv", tables[FP_SLOT_CU_SEQLENS_KV], p->batch, p->total_kv,
                       p->seq_kv, where)))
        return st;
    const int32_t *lens = tables[FP_SLOT_SEQLENS_KV], *table = tables[FP_SLOT_BLOCK_TABLE];
    if (!lens) return FLASHPORT_OK;
    for (int64_t b = 0; b < p->batch; b++) {
        if (lens[b] < 0 || lens[b] > p->seq_kv)
            return bad(where, "seqlens_kv[%lld] is %lld; it must lie in [0, seq_kv = %lld]",
                       (long long)b, (long long)lens[b], (long long)p->seq_kv);
        const int64_t pages = (lens[b] + p->page_size - 1) / p->page_size;
        for (int64_t j = 0; j < pages; j++) {
            const int32_t page = table[b * p->max_pages_per_seq + j];
            if (page < 0 || page >= p->num_pages)
                return fp_error(FLASHPORT_ERROR_BAD_TABLE, where,
                                "block_table[%lld][%lld] is %d, outside [0, num_pages = %lld)",
                                (long long)b, (long long)j, (int)page, (long long)p->num_pages);
        }
    }
    return FLASHPORT_OK;
}
