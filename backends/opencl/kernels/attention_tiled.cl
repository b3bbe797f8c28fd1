/*
 * Exact attention, O = softmax(scale * Q K^T [causal]) V, with the online softmax (OpenCL C 1.2).
 *
 * One work-group owns BR query rows of one (batch, query head, slice of DV output columns).
 * Key/value blocks of BC keys stream through local memory: Q and K in KC-column steps for the
 * scores, V (stored transposed) in VC-key steps for the product. Work-item (tr, tc) holds a
 * TM x TN register tile of the scores (rows tr*TM.., keys tc + j*CT) and a TM x OC tile of the
 * output (columns tc + c*CT). Inner loops read local memory as float4 along the reduced index
 * (head dim for the scores, keys for the product): one load feeds 4 multiply-adds per register
 * tile entry. Rows are padded by 4 floats, which keeps the float4 reads of the 8 work-items
 * served together on distinct banks. Row maxima and sums are combined across the CT
 * work-items of a row through local memory.
 *
 * Scores stay unscaled (Q times the sign of the scale, which is exact) through the maximum;
 * the scale is applied to the difference from the maximum, p = exp2((s - m) * |scale|*log2(e)).
 * Scaling the small difference rather than each large score keeps large logits accurate.
 *
 * Build options (all required): BR BC TM TN KC VC DV, and DTYPE 0 (float), 1 (IEEE half through
 * vload_half/vstore_half, no cl_khr_fp16 needed) or 2 (bfloat16 through bit shifts).
 * Accumulation is float32 throughout.
 */

#define CT (BC / TN)         /* work-items across the keys of a block */
#define RT (BR / TM)         /* work-items across the rows of the tile */
#define NT (RT * CT)         /* work-group size */
#define OC (DV / CT)         /* output columns per work-item */
#define KC_PAD (KC + 4)
#define BC_PAD (BC + 4)
#define VC_PAD (VC + 4)
#define CT_PAD (CT + 1)
#define QK_FLOATS ((BR + BC) * KC_PAD)
#define V_FLOATS (DV * VC_PAD)
#define STAGE_FLOATS (QK_FLOATS > V_FLOATS ? QK_FLOATS : V_FLOATS)

#if DTYPE == 0
typedef float storage_t;
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, x) ((p)[i] = (x))
#elif DTYPE == 1
typedef half storage_t;
#define LOAD(p, i) vload_half((size_t)(i), (p))
#define STORE(p, i, x) vstore_half_rte((x), (size_t)(i), (p))
#elif DTYPE == 2
typedef ushort storage_t;
#define LOAD(p, i) as_float((uint)(p)[i] << 16)
#define STORE(p, i, x) ((p)[i] = float_to_bf16(x))

/* Round to nearest even; NaN stays a (quiet) NaN. */
ushort float_to_bf16(float x) {
    uint u = as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}
#else
#error "DTYPE must be 0 (float), 1 (half) or 2 (bfloat16)"
#endif

#if BR % TM || BC % TN || DV % CT || BC % VC || KC % 4 || VC % 4
#error "tile shape: TM must divide BR, TN BC, BC/TN DV, VC BC; KC and VC multiples of 4"
#endif

/* The float4 at float offset i (a multiple of 4) of a local array. */
#define LOCAL4(base, i) (*(__local float4 *)((base) + (i)))

__kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void attention_tiled(__global const storage_t *q, __global const storage_t *k,
                     __global const storage_t *v, __global storage_t *o, __global float *lse,
                     int has_lse, int nq, int nkv, int d, int heads_q, int group, int n_slices,
                     int causal, float q_sign, float scale_abs, float scale_log2,
                     long q_sb, long q_sh, long q_sn, long k_sb, long k_sh, long k_sn,
                     long v_sb, long v_sh, long v_sn, long o_sb, long o_sh, long o_sn) {
    __local float4 stage4[STAGE_FLOATS / 4];
    __local float4 ps4[BR * BC_PAD / 4];
    __local float *stage = (__local float *)stage4;
    __local float *ps = (__local float *)ps4;
    __local float red_max[BR * CT_PAD];
    __local float red_sum[BR * CT_PAD];
    __local float *qs = stage;               /* [BR][KC_PAD] */
    __local float *ks = stage + BR * KC_PAD; /* [BC][KC_PAD] */
    __local float *vt = stage;               /* [DV][VC_PAD]: V transposed */

    const int tid = (int)get_local_id(0);
    const int tr = tid / CT;
    const int tc = tid % CT;
    /* The heaviest causal tiles (the last rows) start first. */
    const int tile = (int)(get_num_groups(0) - 1 - get_group_id(0));
    const int h = (int)get_group_id(1);
    const int b = (int)get_group_id(2) / n_slices;
    const int slice = (int)get_group_id(2) % n_slices;
    const int r0 = tile * BR;
    const int dv0 = slice * DV;
    const long offset = (long)nkv - nq; /* bottom-right causal alignment */
    const long q_base = b * q_sb + h * q_sh;
    const long k_base = b * k_sb + (h / group) * k_sh;
    const long v_base = b * v_sb + (h / group) * v_sh;
    const long o_base = b * o_sb + h * o_sh;

    /* Keys past kv_end are hidden from every row of the tile: their blocks are skipped. */
    long kv_end = nkv;
    if (causal) kv_end = min((long)nkv, (long)r0 + BR + offset);

    float m[TM], l[TM], acc[TM][OC];
    for (int i = 0; i < TM; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        for (int c = 0; c < OC; c++) acc[i][c] = 0.0f;
    }

    for (int kb = 0; kb < kv_end; kb += BC) {
        float s[TM][TN];
        for (int i = 0; i < TM; i++)
            for (int j = 0; j < TN; j++) s[i][j] = 0.0f;

        for (int c0 = 0; c0 < d; c0 += KC) {
            barrier(CLK_LOCAL_MEM_FENCE); /* the previous step's readers are done */
            for (int e = tid; e < BR * KC; e += NT) {
                const int r = e / KC, c = e % KC;
                const int row = r0 + r, col = c0 + c;
                qs[r * KC_PAD + c] =
                    (row < nq && col < d) ? LOAD(q, q_base + row * q_sn + col) * q_sign : 0.0f;
            }
            for (int e = tid; e < BC * KC; e += NT) {
                const int r = e / KC, c = e % KC;
                const int key = kb + r, col = c0 + c;
                ks[r * KC_PAD + c] =
                    (key < nkv && col < d) ? LOAD(k, k_base + key * k_sn + col) : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int c = 0; c < KC; c += 4) {
                float4 qv[TM], kv[TN];
                for (int i = 0; i < TM; i++) qv[i] = LOCAL4(qs, (tr * TM + i) * KC_PAD + c);
                for (int j = 0; j < TN; j++) kv[j] = LOCAL4(ks, (tc + j * CT) * KC_PAD + c);
                for (int i = 0; i < TM; i++)
                    for (int j = 0; j < TN; j++) {
                        s[i][j] += qv[i].x * kv[j].x;
                        s[i][j] += qv[i].y * kv[j].y;
                        s[i][j] += qv[i].z * kv[j].z;
                        s[i][j] += qv[i].w * kv[j].w;
                    }
            }
        }

        /* Only blocks crossing the end of the keys or the causal diagonal need a mask. */
        const int masked = kb + BC > nkv || (causal && kb + BC - 1 > r0 + offset);
        if (masked) {
            for (int i = 0; i < TM; i++) {
                const long row = r0 + tr * TM + i;
                for (int j = 0; j < TN; j++) {
                    const int key = kb + tc + j * CT;
                    if (key >= nkv || (causal && key > row + offset)) s[i][j] = -INFINITY;
                }
            }
        }

        /* fmax ignores NaN, so a NaN score reaches the row's sum (and output) through p,
         * while the running maximum stays usable for the other scores. */
        for (int i = 0; i < TM; i++) {
            float mx = s[i][0];
            for (int j = 1; j < TN; j++) mx = fmax(mx, s[i][j]);
            red_max[(tr * TM + i) * CT_PAD + tc] = mx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        float alpha[TM];
        for (int i = 0; i < TM; i++) {
            float mx = m[i];
            for (int t = 0; t < CT; t++) mx = fmax(mx, red_max[(tr * TM + i) * CT_PAD + t]);
            /* A row that has seen no visible key yet keeps m = -inf; subtracting 0 instead
             * gives p = 0 for its masked scores rather than NaN from -inf - -inf. */
            const float base = mx == -INFINITY ? 0.0f : mx;
            alpha[i] = exp2((m[i] - base) * scale_log2);
            m[i] = mx;
            float sum = 0.0f;
            for (int j = 0; j < TN; j++) {
                const float p = exp2((s[i][j] - base) * scale_log2);
                ps[(tr * TM + i) * BC_PAD + tc + j * CT] = p;
                sum += p;
            }
            red_sum[(tr * TM + i) * CT_PAD + tc] = sum;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int i = 0; i < TM; i++) {
            float sum = 0.0f;
            for (int t = 0; t < CT; t++) sum += red_sum[(tr * TM + i) * CT_PAD + t];
            l[i] = l[i] * alpha[i] + sum;
            for (int c = 0; c < OC; c++) acc[i][c] *= alpha[i];
        }

        /* In blocks the causal diagonal crosses, hidden keys are skipped rather than multiplied
         * by p = 0, so that a NaN in a hidden V row does not reach rows that cannot see it. */
        const int guarded = masked && causal;
        for (int v0 = 0; v0 < BC && kb + v0 < kv_end; v0 += VC) {
            if (v0 > 0) barrier(CLK_LOCAL_MEM_FENCE);
            for (int e = tid; e < VC * DV; e += NT) {
                const int r = e / DV, c = e % DV;
                const int key = kb + v0 + r, col = dv0 + c;
                vt[c * VC_PAD + r] =
                    (key < nkv && col < d) ? LOAD(v, v_base + key * v_sn + col) : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int kk = 0; kk < VC; kk += 4) {
                float4 vv[OC];
                for (int c = 0; c < OC; c++) vv[c] = LOCAL4(vt, (tc + c * CT) * VC_PAD + kk);
                for (int i = 0; i < TM; i++) {
                    const float4 p = LOCAL4(ps, (tr * TM + i) * BC_PAD + v0 + kk);
                    if (guarded) {
                        /* keys kb+v0+kk+u with u <= last are visible to this row */
                        const long last = r0 + tr * TM + i + offset - (kb + v0 + kk);
                        for (int c = 0; c < OC; c++) {
                            float a = acc[i][c];
                            a = last >= 0 ? a + p.x * vv[c].x : a;
                            a = last >= 1 ? a + p.y * vv[c].y : a;
                            a = last >= 2 ? a + p.z * vv[c].z : a;
                            a = last >= 3 ? a + p.w * vv[c].w : a;
                            acc[i][c] = a;
                        }
                    } else {
                        for (int c = 0; c < OC; c++) {
                            acc[i][c] += p.x * vv[c].x;
                            acc[i][c] += p.y * vv[c].y;
                            acc[i][c] += p.z * vv[c].z;
                            acc[i][c] += p.w * vv[c].w;
                        }
                    }
                }
            }
        }
    }

    for (int i = 0; i < TM; i++) {
        const int row = r0 + tr * TM + i;
        if (row >= nq) continue;
        /* l = 0: no visible key, O = 0 and LSE = -inf. A NaN l keeps the row NaN. */
        const float inv_l = l[i] == 0.0f ? 0.0f : 1.0f / l[i];
        for (int c = 0; c < OC; c++) {
            const int col = dv0 + tc + c * CT;
            if (col < d) STORE(o, o_base + row * o_sn + col, acc[i][c] * inv_l);
        }
        if (has_lse && slice == 0 && tc == 0)
            lse[((long)b * heads_q + h) * nq + row] =
                l[i] == 0.0f ? -INFINITY : m[i] * scale_abs + log(l[i]);
    }
}
