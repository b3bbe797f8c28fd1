/* Host accumulators: LSE merge, gradient sums, conversions. */
#include "host_accum.h"

#include <math.h>

#include "fp_half.h"

static float load(const void *p, flashport_dtype dt, int64_t i) {
    switch (dt) {
    case FLASHPORT_F16: return fp_f16_to_f32(((const uint16_t *)p)[i]);
    case FLASHPORT_BF16: return fp_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

void fp_dist_store_all(flashport_dtype dtype, const float *src, void *dst, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        switch (dtype) {
        case FLASHPORT_F16: ((uint16_t *)dst)[i] = fp_f32_to_f16(src[i]); break;
        case FLASHPORT_BF16: ((uint16_t *)dst)[i] = fp_f32_to_bf16(src[i]); break;
        default: ((float *)dst)[i] = src[i]; break;
        }
    }
}

/* One row's merge of a partial (o2 read by load from part at off, or zeros when part is NULL)
 * with LSE l2 into acc_o at off and *l1. */
static void merge_row(const flashport_dist_desc *d, const void *part, int64_t off, float l2,
                      float *acc_o, float *l1) {
    if (l2 == -INFINITY) return; /* the partial saw no key of this row */
    float m = *l1 > l2 ? *l1 : l2;
    /* e^(-inf - m) = 0 drops an empty accumulator; a NaN carries through */
    float w1 = *l1 == -INFINITY ? 0.0f : expf(*l1 - m);
    float w2 = expf(l2 - m);
    float inv = 1.0f / (w1 + w2);
    for (int64_t c = 0; c < d->head_dim; c++) {
        float o2 = part ? load(part, d->dtype, off + c) : 0.0f;
        acc_o[off + c] = (w1 * acc_o[off + c] + w2 * o2) * inv;
    }
    *l1 = m + logf(w1 + w2);
}

void fp_dist_merge_rows(const flashport_dist_desc *d, const fp_dist_rect *r, const void *o_part,
                        const float *lse_part, float *acc_o, float *acc_lse) {
    int64_t H = d->heads_q, n = d->seq_local;
    for (int64_t b = 0; b < d->batch; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = r->q_off; i < r->q_off + r->q_len; i++)
                merge_row(d, o_part, fp_dist_row_offset(d, H, b, h, i),
                          lse_part[(b * H + h) * r->q_len + (i - r->q_off)], acc_o,
                          &acc_lse[(b * H + h) * n + i]);
}

void fp_dist_merge_sinks(const flashport_dist_desc *d, const float *sinks, float *acc_o,
                         float *acc_lse) {
    int64_t H = d->heads_q, n = d->seq_local;
    for (int64_t b = 0; b < d->batch; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < n; i++)
                merge_row(d, NULL, fp_dist_row_offset(d, H, b, h, i), sinks[h], acc_o,
                          &acc_lse[(b * H + h) * n + i]);
}

void fp_dist_add_rows(const flashport_dist_desc *d, flashport_dtype part_dtype, int64_t heads,
                      int64_t off, int64_t len, const void *part, float *acc) {
    for (int64_t b = 0; b < d->batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = off; i < off + len; i++) {
                int64_t e = fp_dist_row_offset(d, heads, b, h, i);
                for (int64_t c = 0; c < d->head_dim; c++)
                    acc[e + c] += load(part, part_dtype, e + c);
            }
}

void fp_dist_lse_rows(const flashport_dist_desc *d, const fp_dist_rect *r, const float *lse,
                      float *out) {
    int64_t rows = d->batch * d->heads_q;
    for (int64_t b = 0; b < rows; b++)
        for (int64_t i = 0; i < r->q_len; i++)
            out[b * r->q_len + i] = lse[b * d->seq_local + r->q_off + i];
}
