/*
 * Exact attention, O = softmax(scale * Q K^T [causal]) V, with the online softmax (OpenCL C 1.2).
 *
 * One work-group of NT work-items owns BR query rows of one (batch, query head, slice of DV
 * output columns) and streams the keys in blocks of BC, in three barrier-separated phases:
 *
 *   scores   S = Q K^T. Work-item (tr, tc) holds a TM x TN register tile of S (rows tr + i*RT,
 *            keys tc + j*CT). K goes through local memory KC head-dim columns at a time; Q
 *            either stays resident in local memory for the whole walk (QR=1, when it fits) or
 *            is staged beside K chunk by chunk (QR=0). Reads are float4 along the head dim.
 *   softmax  the row maxima of the block are combined across the CT work-items of a row
 *            through local memory; P = exp2(S*c - m*c) goes to local memory, the rescale
 *            factor of each row too, and each work-item keeps its share of the row sums in
 *            registers (combined once, at the end).
 *   values   O = alpha O + P V. The output tile is mapped independently of the score tile:
 *            work-item (org, ocg) holds OM rows (org + i*NOR) x OCN columns (float4 groups
 *            ocg + g*NCG), so that the accumulators stay few per work-item while the reads
 *            stay float4: P along the keys, V (staged VC rows at a time, row-major) along d.
 *
 * When PF=1 the next K chunk (and Q chunk when QR=0) is loaded from global memory into private
 * registers before the current one is multiplied, so the loads overlap the arithmetic
 * (OpenCL 1.2 has no asynchronous copy the GPU accelerates).
 *
 * Scores stay unscaled (Q times the sign of the scale, which is exact). The exponent is one
 * fused multiply-add, s*c - mc with c = |scale|*log2(e) and mc the row maximum times c,
 * rounded once: every probability of a row shares that rounded mc, and the rescale factors
 * use the same rounded values, so its rounding cancels from O and from the LSE.
 *
 * Build options (all required): BR BC TM TN KC VC DV OM QR DQ PF UR WIDE VEC, and DTYPE 0 (float),
 * 1 (IEEE half through vload_half/vstore_half, no cl_khr_fp16 needed) or 2 (bfloat16 through
 * bit shifts). DQ is the head dim rounded up to KC (the resident Q width when QR=1); WIDE=1
 * computes offsets inside a tile in 64 bits; VEC=1 (float only) loads four elements at a time.
 * Accumulation is float32 throughout.
 */

#define CT     (BC / TN)  /* work-items across the keys of a block */
#define RT     (BR / TM)  /* work-items across the rows of the score tile */
#define NT     (RT * CT)  /* work-group size */
#define NOR    (BR / OM)  /* work-items across the rows of the output tile */
#define NCG    (NT / NOR) /* work-items across the output columns */
#define OCN    (DV / NCG) /* output columns per work-item */
#define OG     (OCN / 4)  /* float4 column groups per work-item */
#define KC_PAD (KC + 4)
#define PS     (BC + 8) /* row stride of P: rows 8 banks apart */
#define CT_PAD (CT + 1)
#define QS     (DQ + 4) /* row stride of the resident Q */
#if QR
#define QK_FLOATS (BC * KC_PAD)
#else
#define QK_FLOATS ((BR + BC) * KC_PAD)
#endif
#define V_FLOATS     (VC * DV)
#define STAGE_FLOATS (QK_FLOATS > V_FLOATS ? QK_FLOATS : V_FLOATS)
/* Chunk elements each work-item loads: Q (when staged per chunk) and K. */
#define K_PER_ITEM ((BC * KC + NT - 1) / NT)
#define Q_PER_ITEM ((BR * KC + NT - 1) / NT)

#if DTYPE == 0
typedef float storage_t;
#define LOAD(p, i)     ((p)[i])
#define STORE(p, i, x) ((p)[i] = (x))
#elif DTYPE == 1
typedef half storage_t;
#define LOAD(p, i)     vload_half((size_t)(i), (p))
#define STORE(p, i, x) vstore_half_rte((x), (size_t)(i), (p))
#elif DTYPE == 2
typedef ushort storage_t;
#define LOAD(p, i)     as_float((uint)(p)[i] << 16)
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

#if BR % TM || BC % TN || BR % OM || NT % NOR || DV % (4 * NCG) || BC % VC || KC % 4 || VC % 4 ||  \
    DQ % KC
#error "tile shape: TM|BR, TN|BC, OM|BR, (BR/OM)|NT, 4*NT/(BR/OM) | DV, VC|BC, KC|DQ, KC, VC % 4"
#endif

/* Offsets inside one tile of rows: int when every tile's extent fits (WIDE=0, the planner's
 * choice from the strides), which keeps the address arithmetic in 32-bit registers. */
#if WIDE
typedef long index_t;
#else
typedef int index_t;
#endif

/* UR=1 asks for full unrolling of the loops over register tiles, which keeps the tiles in
 * registers where a compiler would not unroll them by itself; CPU compilers (PoCL) build far
 * faster without it. */
#if UR
#define UNROLLED _Pragma("unroll")
#else
#define UNROLLED
#endif

/* The float4 at float offset i (a multiple of 4) of a local array. */
#define LOCAL4(base, i) (*(__local float4 *)((base) + (i)))

/* Element e of the KC-column chunk at column c0 of the rows that start at x (row stride
 * `stride`, the first `rows` of them present); 0 outside. */
__attribute__((always_inline)) float chunk_element(__global const storage_t *x, index_t stride,
                                                   int rows, int c0, int d, int e, float sign) {
    const int r = e / KC, c = c0 + e % KC;
    return (r < rows && c < d) ? LOAD(x, r * stride + c) * sign : 0.0f;
}

#if VEC
/* Four consecutive elements at offset i (a multiple of 4) of a 16-byte aligned float tensor. */
#define LOAD4(p, i) (((__global const float4 *)(p))[(i) / 4])
#endif

/* Stages n_rows x n_cols elements, columns c0.. of the rows that start at x (row stride
 * `stride`, the first `rows` of them present, columns below d present), into dst (row stride
 * dst_stride), zero elsewhere. VEC=1 (float, every stride and d multiples of 4) moves four
 * columns per load. */
__attribute__((always_inline)) void stage_rows(__local float *dst, int dst_stride, int n_rows,
                                               int n_cols, __global const storage_t *x,
                                               index_t stride, int rows, int c0, int d, float sign,
                                               int tid) {
#if VEC
    const int quads = n_cols / 4;
    for (int e = tid; e < n_rows * quads; e += NT) {
        const int r = e / quads, c = 4 * (e % quads);
        LOCAL4(dst, r * dst_stride + c) =
            (r < rows && c0 + c < d) ? LOAD4(x, r * stride + c0 + c) * sign : (float4)(0.0f);
    }
#else
    for (int e = tid; e < n_rows * n_cols; e += NT) {
        const int r = e / n_cols, c = e % n_cols;
        dst[r * dst_stride + c] =
            (r < rows && c0 + c < d) ? LOAD(x, r * stride + c0 + c) * sign : 0.0f;
    }
#endif
}

/* acc += P V over VC keys. With guard, key u of step kk counts for row i only when
 * u + kk <= last0 + i*NOR (the causal diagonal); otherwise every key counts. */
__attribute__((always_inline)) void accumulate_pv(float acc[OM][OCN], __local const float *prow,
                                                  __local const float *vcol, const int guard,
                                                  const int last0) {
    for (int kk = 0; kk < VC; kk += 4) {
        float4 pf[OM];
        UNROLLED
        for (int i = 0; i < OM; i++) pf[i] = LOCAL4(prow, i * NOR * PS + kk);
        UNROLLED
        for (int u = 0; u < 4; u++) {
            float4 vf[OG];
            UNROLLED
            for (int g = 0; g < OG; g++) vf[g] = LOCAL4(vcol, (kk + u) * DV + 4 * NCG * g);
            UNROLLED
            for (int i = 0; i < OM; i++) {
                const float p = u == 0 ? pf[i].x : u == 1 ? pf[i].y : u == 2 ? pf[i].z : pf[i].w;
                const int visible = !guard || kk + u <= last0 + i * NOR;
                UNROLLED
                for (int g = 0; g < OG; g++) {
                    float *a = &acc[i][4 * g];
                    a[0] = visible ? fma(p, vf[g].x, a[0]) : a[0];
                    a[1] = visible ? fma(p, vf[g].y, a[1]) : a[1];
                    a[2] = visible ? fma(p, vf[g].z, a[2]) : a[2];
                    a[3] = visible ? fma(p, vf[g].w, a[3]) : a[3];
                }
            }
        }
    }
}

__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
attention_tiled(__global const storage_t *q, __global const storage_t *k,
                __global const storage_t *v, __global storage_t *o, __global float *lse,
                int has_lse, int nq, int nkv, int d, int heads_q, int group, int n_slices,
                int causal, float q_sign, float scale_log2, long q_sb, long q_sh, long q_sn,
                long k_sb, long k_sh, long k_sn, long v_sb, long v_sh, long v_sn, long o_sb,
                long o_sh, long o_sn) {
    __local float4 stage4[STAGE_FLOATS / 4];
    __local float4 ps4[BR * PS / 4];
    __local float red[BR * CT_PAD];
    __local float row_value[BR]; /* per block: alpha; at the end: the scaled row maximum */
    __local float *stage = (__local float *)stage4;
    __local float *ps = (__local float *)ps4;
#if QR
    __local float4 qres4[BR * QS / 4];
    __local float *qres = (__local float *)qres4;
    __local float *ks = stage; /* [BC][KC_PAD] */
#else
    __local float *qs = stage;               /* [BR][KC_PAD] */
    __local float *ks = stage + BR * KC_PAD; /* [BC][KC_PAD] */
#endif
    __local float *vs = stage; /* [VC][DV] */

    const int tid = (int)get_local_id(0);
    const int tr = tid / CT, tc = tid % CT;     /* score tile */
    const int org = tid / NCG, ocg = tid % NCG; /* output tile */
    /* The heaviest causal tiles (the last rows) start first. */
    const int tile = (int)(get_num_groups(0) - 1 - get_group_id(0));
    const int h = (int)get_group_id(1);
    const int b = (int)get_group_id(2) / n_slices;
    const int slice = (int)get_group_id(2) % n_slices;
    const int r0 = tile * BR;
    const int dv0 = slice * DV;
    /* Bottom-right causal alignment: key j is visible to row i iff j <= i + offset. Both
     * sides stay within int, as nq and nkv do. */
    const int offset = nkv - nq;
    /* Tensors of this (batch, head); the Q and O rows of this tile. */
    __global const storage_t *qt = q + (b * q_sb + h * q_sh + (long)r0 * q_sn);
    __global const storage_t *kh = k + (b * k_sb + (h / group) * k_sh);
    __global const storage_t *vh = v + (b * v_sb + (h / group) * v_sh);
    __global storage_t *ot = o + (b * o_sb + h * o_sh + (long)r0 * o_sn + dv0);
    const index_t qsn = (index_t)q_sn, ksn = (index_t)k_sn, vsn = (index_t)v_sn,
                  osn = (index_t)o_sn;
    const int q_rows = nq - r0;

    /* Keys past kv_end are hidden from every row of the tile: their blocks are skipped. */
    int kv_end = nkv;
    if (causal && r0 + offset < nkv - BR) kv_end = r0 + BR + offset;

#if QR
    stage_rows(qres, QS, BR, DQ, qt, qsn, q_rows, 0, d, q_sign, tid);
#endif

    float mc[TM], lsum[TM], acc[OM][OCN];
    UNROLLED
    for (int i = 0; i < TM; i++) {
        mc[i] = -INFINITY;
        lsum[i] = 0.0f;
    }
    UNROLLED
    for (int i = 0; i < OM; i++) UNROLLED
    for (int c = 0; c < OCN; c++) acc[i][c] = 0.0f;

#if PF
    float k_next[K_PER_ITEM];
#if !QR
    float q_next[Q_PER_ITEM];
#endif
    if (kv_end > 0) {
        UNROLLED
        for (int u = 0; u < K_PER_ITEM; u++) {
            const int e = tid + u * NT;
            k_next[u] = e < BC * KC ? chunk_element(kh, ksn, nkv, 0, d, e, 1.0f) : 0.0f;
        }
#if !QR
        UNROLLED
        for (int u = 0; u < Q_PER_ITEM; u++) {
            const int e = tid + u * NT;
            q_next[u] = e < BR * KC ? chunk_element(qt, qsn, q_rows, 0, d, e, q_sign) : 0.0f;
        }
#endif
    }
#endif

    for (int kb = 0; kb < kv_end; kb += BC) {
        /* The K and V rows of this block. */
        __global const storage_t *kb_rows = kh + (long)kb * k_sn;
        __global const storage_t *vb_rows = vh + (long)kb * v_sn + dv0;
        float s[TM][TN];
        UNROLLED
        for (int i = 0; i < TM; i++) UNROLLED
        for (int j = 0; j < TN; j++) s[i][j] = 0.0f;

        for (int c0 = 0; c0 < d; c0 += KC) {
            barrier(CLK_LOCAL_MEM_FENCE); /* the previous readers of the stage are done */
#if PF
            UNROLLED
            for (int u = 0; u < K_PER_ITEM; u++) {
                const int e = tid + u * NT;
                if (e < BC * KC) ks[(e / KC) * KC_PAD + e % KC] = k_next[u];
            }
#if !QR
            UNROLLED
            for (int u = 0; u < Q_PER_ITEM; u++) {
                const int e = tid + u * NT;
                if (e < BR * KC) qs[(e / KC) * KC_PAD + e % KC] = q_next[u];
            }
#endif
            /* The chunk after this one: the next columns, or the first of the next block. */
            const int last_chunk = c0 + KC >= d;
            const int nc0 = last_chunk ? 0 : c0 + KC;
            const int nkb = last_chunk ? kb + BC : kb;
            if (nkb < kv_end) {
                UNROLLED
                for (int u = 0; u < K_PER_ITEM; u++) {
                    const int e = tid + u * NT;
                    k_next[u] = e < BC * KC ? chunk_element(kh + (long)nkb * k_sn, ksn, nkv - nkb,
                                                            nc0, d, e, 1.0f)
                                            : 0.0f;
                }
#if !QR
                UNROLLED
                for (int u = 0; u < Q_PER_ITEM; u++) {
                    const int e = tid + u * NT;
                    q_next[u] =
                        e < BR * KC ? chunk_element(qt, qsn, q_rows, nc0, d, e, q_sign) : 0.0f;
                }
#endif
            }
#else
            stage_rows(ks, KC_PAD, BC, KC, kb_rows, ksn, nkv - kb, c0, d, 1.0f, tid);
#if !QR
            stage_rows(qs, KC_PAD, BR, KC, qt, qsn, q_rows, c0, d, q_sign, tid);
#endif
#endif
            barrier(CLK_LOCAL_MEM_FENCE);
#if QR
            __local const float *qrow = qres + tr * QS + c0;
#define Q_STRIDE QS
#else
            __local const float *qrow = qs + tr * KC_PAD;
#define Q_STRIDE KC_PAD
#endif
            __local const float *krow = ks + tc * KC_PAD;
            for (int c = 0; c < KC; c += 4) {
                float4 qv[TM];
                UNROLLED
                for (int i = 0; i < TM; i++) qv[i] = LOCAL4(qrow, i * RT * Q_STRIDE + c);
                UNROLLED
                for (int j = 0; j < TN; j++) {
                    const float4 kv = LOCAL4(krow, j * CT * KC_PAD + c);
                    UNROLLED
                    for (int i = 0; i < TM; i++) {
                        s[i][j] = fma(qv[i].x, kv.x, s[i][j]);
                        s[i][j] = fma(qv[i].y, kv.y, s[i][j]);
                        s[i][j] = fma(qv[i].z, kv.z, s[i][j]);
                        s[i][j] = fma(qv[i].w, kv.w, s[i][j]);
                    }
                }
            }
#undef Q_STRIDE
        }

        /* Only blocks crossing the end of the keys or the causal diagonal need a mask. */
        const int masked = kb + BC > nkv || (causal && kb + BC - 1 > r0 + offset);
        if (masked) {
            UNROLLED
            for (int i = 0; i < TM; i++) {
                const int row = r0 + tr + i * RT;
                UNROLLED
                for (int j = 0; j < TN; j++) {
                    const int key = kb + tc + j * CT;
                    if (key >= nkv || (causal && key > row + offset)) s[i][j] = -INFINITY;
                }
            }
        }

        /* fmax ignores NaN, so a NaN score reaches the row's sum (and output) through p,
         * while the running maximum stays usable for the other scores. */
        UNROLLED
        for (int i = 0; i < TM; i++) {
            float mx = s[i][0];
            UNROLLED
            for (int j = 1; j < TN; j++) mx = fmax(mx, s[i][j]);
            red[(tr + i * RT) * CT_PAD + tc] = mx;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* maxima visible; every reader of K is done */
        UNROLLED
        for (int i = 0; i < TM; i++) {
            const int row = tr + i * RT;
            float mx = -INFINITY;
            UNROLLED
            for (int t = 0; t < CT; t++) mx = fmax(mx, red[row * CT_PAD + t]);
            const float mc_new = fmax(mc[i], mx * scale_log2);
            /* A row that has seen no visible key yet keeps mc = -inf; subtracting 0 instead
             * gives p = 0 for its masked scores rather than NaN from -inf - -inf. */
            const float base = mc_new == -INFINITY ? 0.0f : mc_new;
            const float alpha = exp2(mc[i] - base);
            mc[i] = mc_new;
            float sum = 0.0f;
            UNROLLED
            for (int j = 0; j < TN; j++) {
                const float p = exp2(fma(s[i][j], scale_log2, -base));
                ps[row * PS + tc + j * CT] = p;
                sum += p;
            }
            lsum[i] = fma(lsum[i], alpha, sum);
            if (tc == 0) row_value[row] = alpha;
        }
        /* V goes where K was: every work-item has passed the barrier after its scores. */
        stage_rows(vs, DV, VC, DV, vb_rows, vsn, nkv - kb, 0, d - dv0, 1.0f, tid);
        barrier(CLK_LOCAL_MEM_FENCE);
        UNROLLED
        for (int i = 0; i < OM; i++) {
            const float alpha = row_value[org + i * NOR];
            UNROLLED
            for (int c = 0; c < OCN; c++) acc[i][c] *= alpha;
        }

        /* In blocks the causal diagonal crosses, hidden keys are skipped rather than multiplied
         * by p = 0, so that a NaN in a hidden V row does not reach rows that cannot see it. */
        const int guarded = masked && causal;
        for (int v0 = 0; v0 < BC && kb + v0 < kv_end; v0 += VC) {
            if (v0 > 0) {
                barrier(CLK_LOCAL_MEM_FENCE);
                stage_rows(vs, DV, VC, DV, vb_rows + v0 * vsn, vsn, nkv - kb - v0, 0, d - dv0, 1.0f,
                           tid);
                barrier(CLK_LOCAL_MEM_FENCE);
            }
            __local const float *prow = ps + org * PS + v0;
            __local const float *vcol = vs + 4 * ocg;
            const int last0 = r0 + org + offset - (kb + v0);
            if (guarded)
                accumulate_pv(acc, prow, vcol, 1, last0);
            else
                accumulate_pv(acc, prow, vcol, 0, last0);
        }
    }

    /* Row sums and maxima from the score tiles to the output tiles. */
    barrier(CLK_LOCAL_MEM_FENCE);
    UNROLLED
    for (int i = 0; i < TM; i++) {
        const int row = tr + i * RT;
        red[row * CT_PAD + tc] = lsum[i];
        if (tc == 0) row_value[row] = mc[i];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    UNROLLED
    for (int i = 0; i < OM; i++) {
        const int lr = org + i * NOR;
        const int row = r0 + lr;
        if (row >= nq) continue;
        float l = 0.0f;
        UNROLLED
        for (int t = 0; t < CT; t++) l += red[lr * CT_PAD + t];
        /* l = 0: no visible key, O = 0 and LSE = -inf. A NaN l keeps the row NaN. */
        const float inv_l = l == 0.0f ? 0.0f : 1.0f / l;
        UNROLLED
        for (int g = 0; g < OG; g++) UNROLLED
        for (int u = 0; u < 4; u++) {
            const int col = 4 * (ocg + g * NCG) + u;
            if (dv0 + col < d) STORE(ot, lr * osn + col, acc[i][4 * g + u] * inv_l);
        }
        if (has_lse && slice == 0 && ocg == 0)
            lse[((long)b * heads_q + h) * nq + row] =
                l == 0.0f ? -INFINITY : fma(row_value[lr], M_LN2_F, log(l));
    }
}
