/*
 * The decode path's micro-kernels (kernel_ops.h: decode_scores, decode_pv), written once over
 * the vector operations of simd_kernels.h, which includes this file before its kernel table.
 *
 * A decode group has few query rows (heads per KV head x positions), so the tile kernels' Q
 * panels, a register of rows per key, would mostly compute padding. Here a score is a dot
 * product along the head dimension instead: each K row is loaded (and widened from f16 or
 * bf16) once and multiplied with every row of Q from L1, and each O row gets its V rows from
 * registers. Both read K and V where they are, through a pointer per key, so a block is never
 * copied: the loads that miss go straight to the FMAs, and the core keeps more of them in
 * flight than when every load is followed by a store of the converted row.
 *
 * On AVX-512 (SIMD_DECODE_PANELS), where a group fills whole registers of rows and K is
 * float32, those rows take a panel instead (decode_scores_panel): a register holds one key's
 * scores of VL rows, so no score needs a horizontal sum, whose shuffles take the vector port
 * the 512-bit FMAs also use.
 */

/* SIMD_LANES values from column c of a row of dtype dt (f32, f16 or bf16) as float32. */
static inline __attribute__((always_inline)) vf SIMD_FN(row_load)(const void *row, int64_t c,
                                                                  const int dt) {
    if (dt == FLASHPORT_F32) return vf_loadu((const float *)row + c);
    return SIMD_FN(widen16)((const uint16_t *)row + c, dt == FLASHPORT_F16);
}

/* Accumulators of a score tile: half the register file, the rest holding K and Q. */
#define DECODE_ACC (VL >= 16 ? 16 : 8)

/* RB rows x KB keys: RB * KB accumulators along the head dimension, each load of Q feeding KB
 * FMAs and each load of K RB; with CH = 2 each score has two, for alternate registers of
 * columns (two chains of FMAs where RB * KB alone would be too few to hide their latency), added
 * before the sums. A remainder of half a register (f32 rows, d a multiple of CS_DIM_STEP) is
 * read masked. The sums are folded four registers at a time: four rows of a key, or four keys
 * of a row. Constants at every call, so that the compiler unrolls it. */
static inline __attribute__((always_inline)) void
SIMD_FN(decode_scores_tile)(const float *q, int64_t dq, const void *const *k, int64_t d, float *st,
                            int64_t ldst, const int RB, const int KB, const int CH, const int dt) {
    vf acc[DECODE_ACC], odd[DECODE_ACC];
    for (int i = 0; i < RB * KB; ++i) acc[i] = odd[i] = vf_zero();
    int64_t c = 0;
    for (; c + CH * VL <= d; c += CH * VL) {
        vf y[DECODE_ACC / 2];
        for (int jj = 0; jj < KB; ++jj) y[jj] = SIMD_FN(row_load)(k[jj], c, dt);
        for (int r = 0; r < RB; ++r) {
            const vf x = vf_loadu(q + r * dq + c);
            for (int jj = 0; jj < KB; ++jj) acc[jj * RB + r] = vf_fmadd(x, y[jj], acc[jj * RB + r]);
        }
        if (CH == 2) {
            for (int jj = 0; jj < KB; ++jj) y[jj] = SIMD_FN(row_load)(k[jj], c + VL, dt);
            for (int r = 0; r < RB; ++r) {
                const vf x = vf_loadu(q + r * dq + c + VL);
                for (int jj = 0; jj < KB; ++jj)
                    odd[jj * RB + r] = vf_fmadd(x, y[jj], odd[jj * RB + r]);
            }
        }
    }
    for (; c + VL <= d; c += VL)
        for (int jj = 0; jj < KB; ++jj) {
            const vf y = SIMD_FN(row_load)(k[jj], c, dt);
            for (int r = 0; r < RB; ++r)
                acc[jj * RB + r] = vf_fmadd(vf_loadu(q + r * dq + c), y, acc[jj * RB + r]);
        }
    if (CH == 2)
        for (int i = 0; i < RB * KB; ++i) acc[i] = vf_add(acc[i], odd[i]);
    if (c < d) {
        const vlanes n = vlanes_first(d - c);
        for (int r = 0; r < RB; ++r) {
            const vf x = vf_load_lanes(q + r * dq + c, n);
            for (int jj = 0; jj < KB; ++jj)
                acc[jj * RB + r] =
                    vf_fmadd(x, vf_load_lanes((const float *)k[jj] + c, n), acc[jj * RB + r]);
        }
    }
    if (RB == 4) {
        for (int jj = 0; jj < KB; ++jj)
            vf_sum4(acc[jj * RB], acc[jj * RB + 1], acc[jj * RB + 2], acc[jj * RB + 3],
                    st + jj * ldst);
    } else if (KB % 4 == 0) {
        for (int r = 0; r < RB; ++r)
            for (int jj = 0; jj < KB; jj += 4) {
                float sums[4];
                vf_sum4(acc[jj * RB + r], acc[(jj + 1) * RB + r], acc[(jj + 2) * RB + r],
                        acc[(jj + 3) * RB + r], sums);
                for (int i = 0; i < 4; ++i) st[(jj + i) * ldst + r] = sums[i];
            }
    } else {
        for (int jj = 0; jj < KB; ++jj)
            for (int r = 0; r < RB; ++r) st[jj * ldst + r] = vf_sum(acc[jj * RB + r]);
    }
}

/* Keys [j0, j1) in steps of KB, rows in blocks of RB and a remainder of RB - 1 at most. */
static inline __attribute__((always_inline)) void
SIMD_FN(decode_scores_keys)(const float *q, int64_t dq, int rows, const void *const *k, int64_t d,
                            int j0, int j1, float *st, int64_t ldst, const int RB, const int KB,
                            const int dt) {
    /* One row alone: two chains per score while that keeps the accumulators in registers. */
    const int CH1 = 2 * KB <= DECODE_ACC ? 2 : 1, CH = RB == 1 ? CH1 : 1;
    for (int j = j0; j + KB <= j1; j += KB) {
        float *out = st + (int64_t)j * ldst;
        int r = 0;
        for (; r + RB <= rows; r += RB)
            SIMD_FN(decode_scores_tile)(q + r * dq, dq, k + j, d, out + r, ldst, RB, KB, CH, dt);
        if (RB == 4 && rows - r == 3)
            SIMD_FN(decode_scores_tile)(q + r * dq, dq, k + j, d, out + r, ldst, 3, KB, 1, dt);
        else if (RB == 4 && rows - r == 2)
            SIMD_FN(decode_scores_tile)(q + r * dq, dq, k + j, d, out + r, ldst, 2, KB, 1, dt);
        else if (rows - r == 1)
            SIMD_FN(decode_scores_tile)(q + r * dq, dq, k + j, d, out + r, ldst, 1, KB, CH1, dt);
    }
}

/* Four rows at a time with DECODE_ACC / 4 keys; one or two rows with four keys (the decode
 * path's calls take four: a wider tile would leave every key to the one-key remainder, one
 * chain of dependent FMAs per score), a lone row with two chains per score; the remaining keys
 * one by one. */
static inline __attribute__((always_inline)) void
SIMD_FN(decode_scores_dt)(const float *q, int64_t dq, int rows, const void *const *k, int64_t d,
                          int keys, float *st, int64_t ldst, const int dt) {
    if (rows <= 2) {
        const int KB = DECODE_ACC / 2 < 4 ? DECODE_ACC / 2 : 4;
        const int main = keys / KB * KB;
        SIMD_FN(decode_scores_keys)(q, dq, rows, k, d, 0, main, st, ldst, 2, KB, dt);
        SIMD_FN(decode_scores_keys)(q, dq, rows, k, d, main, keys, st, ldst, 2, 1, dt);
    } else {
        const int main = keys / (DECODE_ACC / 4) * (DECODE_ACC / 4);
        SIMD_FN(decode_scores_keys)(q, dq, rows, k, d, 0, main, st, ldst, 4, DECODE_ACC / 4, dt);
        SIMD_FN(decode_scores_keys)(q, dq, rows, k, d, main, keys, st, ldst, 4, 1, dt);
    }
}

static void SIMD_FN(decode_scores)(const float *q, int64_t dq, int rows, const void *const *k,
                                   flashport_dtype dt, int64_t d, int keys, float *st,
                                   int64_t ldst) {
    if (dt == FLASHPORT_F16)
        SIMD_FN(decode_scores_dt)(q, dq, rows, k, d, keys, st, ldst, FLASHPORT_F16);
    else if (dt == FLASHPORT_BF16)
        SIMD_FN(decode_scores_dt)(q, dq, rows, k, d, keys, st, ldst, FLASHPORT_BF16);
    else
        SIMD_FN(decode_scores_dt)(q, dq, rows, k, d, keys, st, ldst, FLASHPORT_F32);
}

#if defined(SIMD_DECODE_PANELS)
/* KB keys against a panel of VL rows (qt[c * VL + lane] for columns c < d) of float32 K: per
 * column one load of Q feeds an FMA a key, each with that key's element broadcast from memory,
 * into a register of VL scores; even and odd columns in two chains, so that four keys keep
 * eight FMAs in flight, as the FMA latency times the FMA ports needs. */
static inline __attribute__((always_inline)) void
SIMD_FN(decode_panel_tile)(const float *qt, const void *const *k, int64_t d, float *st,
                           int64_t ldst, const int KB) {
    vf even[4], odd[4];
    const float *row[4];
    for (int jj = 0; jj < KB; ++jj) {
        even[jj] = odd[jj] = vf_zero();
        row[jj] = (const float *)k[jj];
    }
    int64_t c = 0;
    for (; c + 2 <= d; c += 2) {
        const vf x0 = vf_loadu(qt + c * VL), x1 = vf_loadu(qt + (c + 1) * VL);
        for (int jj = 0; jj < KB; ++jj) {
            even[jj] = vf_fmadd(x0, vf_broadcast(row[jj] + c), even[jj]);
            odd[jj] = vf_fmadd(x1, vf_broadcast(row[jj] + c + 1), odd[jj]);
        }
    }
    if (c < d) {
        const vf x0 = vf_loadu(qt + c * VL);
        for (int jj = 0; jj < KB; ++jj)
            even[jj] = vf_fmadd(x0, vf_broadcast(row[jj] + c), even[jj]);
    }
    for (int jj = 0; jj < KB; ++jj) vf_storeu(st + jj * ldst, vf_add(even[jj], odd[jj]));
}

/* kernel_ops.h's decode_scores_panel: four keys a tile, the rest one by one. */
static void SIMD_FN(decode_scores_panel)(const float *qt, const void *const *k, int64_t d, int keys,
                                         float *st, int64_t ldst) {
    int j = 0;
    for (; j + 4 <= keys; j += 4)
        SIMD_FN(decode_panel_tile)(qt, k + j, d, st + (int64_t)j * ldst, ldst, 4);
    for (; j < keys; ++j) SIMD_FN(decode_panel_tile)(qt, k + j, d, st + (int64_t)j * ldst, ldst, 1);
}
#endif

/* RB rows x SW registers of columns of O, in registers over every key: per key SW loads of V
 * and RB broadcasts of P feed RB * SW FMAs, and V is read along its rows. With `tail` the strip
 * is the last half register of f32 rows (SW = 1), read and written masked. */
static inline __attribute__((always_inline)) void
SIMD_FN(decode_pv_strip)(const float *p, int64_t ldp, const void *const *v, int64_t c, int64_t d,
                         int keys, const float *alpha, float *o, int64_t ldo, const int RB,
                         const int SW, const int tail, const int dt) {
    const vlanes n = vlanes_first(tail ? d - c : VL);
    vf acc[DECODE_ACC];
    for (int r = 0; r < RB; ++r) {
        const vf a = vf_broadcast(alpha + r);
        for (int s = 0; s < SW; ++s)
            acc[r * SW + s] = vf_mul(a, tail ? vf_load_lanes(o + r * ldo + c, n)
                                             : vf_loadu(o + r * ldo + c + s * VL));
    }
    for (int j = 0; j < keys; ++j) {
        vf y[DECODE_ACC];
        for (int s = 0; s < SW; ++s)
            y[s] = tail ? vf_load_lanes((const float *)v[j] + c, n)
                        : SIMD_FN(row_load)(v[j], c + s * VL, dt);
        const float *pj = p + (int64_t)j * ldp;
        for (int r = 0; r < RB; ++r) {
            const vf pr = vf_broadcast(pj + r);
            for (int s = 0; s < SW; ++s) acc[r * SW + s] = vf_fmadd(pr, y[s], acc[r * SW + s]);
        }
    }
    for (int r = 0; r < RB; ++r)
        for (int s = 0; s < SW; ++s) {
            if (tail)
                vf_store_lanes(o + r * ldo + c, acc[r * SW + s], n);
            else
                vf_storeu(o + r * ldo + c + s * VL, acc[r * SW + s]);
        }
}

/* Strips as wide as the accumulators allow for RB rows (DECODE_ACC / RB registers, at most
 * half the register file for V), then single registers, then the masked half register. */
static inline __attribute__((always_inline)) void
SIMD_FN(decode_pv_tile)(const float *p, int64_t ldp, const void *const *v, int64_t d, int keys,
                        const float *alpha, float *o, int64_t ldo, const int RB, const int dt) {
    const int SW = DECODE_ACC / RB < DECODE_ACC / 2 ? DECODE_ACC / RB : DECODE_ACC / 2;
    int64_t c = 0;
    for (; c + SW * VL <= d; c += SW * VL)
        SIMD_FN(decode_pv_strip)(p, ldp, v, c, d, keys, alpha, o, ldo, RB, SW, 0, dt);
    for (; c + VL <= d; c += VL)
        SIMD_FN(decode_pv_strip)(p, ldp, v, c, d, keys, alpha, o, ldo, RB, 1, 0, dt);
    if (c < d) SIMD_FN(decode_pv_strip)(p, ldp, v, c, d, keys, alpha, o, ldo, RB, 1, 1, dt);
}

static inline __attribute__((always_inline)) void
SIMD_FN(decode_pv_dt)(const float *p, int64_t ldp, const void *const *v, int64_t d, int keys,
                      int rows, const float *alpha, float *o, int64_t ldo, const int dt) {
    _Static_assert(CS_PV_ROWS == 6, "one case per row count");
    switch (rows) {
    case 1: SIMD_FN(decode_pv_tile)(p, ldp, v, d, keys, alpha, o, ldo, 1, dt); break;
    case 2: SIMD_FN(decode_pv_tile)(p, ldp, v, d, keys, alpha, o, ldo, 2, dt); break;
    case 3: SIMD_FN(decode_pv_tile)(p, ldp, v, d, keys, alpha, o, ldo, 3, dt); break;
    case 4: SIMD_FN(decode_pv_tile)(p, ldp, v, d, keys, alpha, o, ldo, 4, dt); break;
    case 5: SIMD_FN(decode_pv_tile)(p, ldp, v, d, keys, alpha, o, ldo, 5, dt); break;
    default: SIMD_FN(decode_pv_tile)(p, ldp, v, d, keys, alpha, o, ldo, 6, dt); break;
    }
}

static void SIMD_FN(decode_pv)(const float *p, int64_t ldp, const void *const *v,
                               flashport_dtype dt, int64_t d, int keys, int rows,
                               const float *alpha, float *o, int64_t ldo) {
    if (dt == FLASHPORT_F16)
        SIMD_FN(decode_pv_dt)(p, ldp, v, d, keys, rows, alpha, o, ldo, FLASHPORT_F16);
    else if (dt == FLASHPORT_BF16)
        SIMD_FN(decode_pv_dt)(p, ldp, v, d, keys, rows, alpha, o, ldo, FLASHPORT_BF16);
    else
        SIMD_FN(decode_pv_dt)(p, ldp, v, d, keys, rows, alpha, o, ldo, FLASHPORT_F32);
}
