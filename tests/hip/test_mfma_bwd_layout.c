/*
 * The MFMA backward's index math (backends/hip/mfma_bwd_layout.h), run on the CPU against the
 * MFMA model of mfma_model.h.
 *
 * Checked: the accumulator is the A operand of its transpose register for register; every LDS
 * map of both kernels, at the strides the kernels use, stays in its tile, hands each lane the
 * element its operand slot needs, covers the tile once where it writes, reads four values as
 * one aligned 8-byte access, and gives the 16 lanes of such an access 32 distinct banks; the dQ
 * accumulator offsets are one-to-one and are where the shared conversion kernel reads; and a
 * key-tile step (dK, dV, dQ) and a query-tile pass (dQ) computed the kernels' way equal a direct
 * computation, at d = 64 and d = 128.
 */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "mfma_bwd_layout.h"
#include "mfma_model.h"

#define BANKS 32 /* 4-byte LDS banks of a CDNA CU */

static void check_acc_as_a(void) {
    int ok = 1;
    for (int l = 0; l < W; l++)
        for (int r = 0; r < FP_MFMA_ACC; r++) {
            const int k = FP_MFMA_K * fp_mfma_acc_a_step(r) + fp_mfma_a_k(l, fp_mfma_acc_a_slot(r));
            ok &= fp_mfma_a_row(l) == fp_mfma_d_col(l) && k == fp_mfma_d_row(l, r);
        }
    CHECK(ok);
}

/* An 8-byte read of values j = 0..3 at off(j): contiguous and aligned, and for each 16 lanes
 * served together, 32 distinct banks. */
static int vector_read_ok(const int off[W][FP_MFMA_OPERAND]) {
    int ok = 1;
    for (int l = 0; l < W; l++) {
        ok &= off[l][0] % FP_MFMA_OPERAND == 0;
        for (int j = 1; j < FP_MFMA_OPERAND; j++) ok &= off[l][j] == off[l][0] + j;
    }
    for (int l0 = 0; l0 < W; l0 += 16) {
        int hit[BANKS] = {0};
        for (int l = l0; l < l0 + 16; l++) {
            const int word = off[l][0] / 2; /* two 16-bit values a word */
            hit[word % BANKS]++;
            hit[(word + 1) % BANKS]++;
        }
        for (int b = 0; b < BANKS; b++) ok &= hit[b] == 1;
    }
    return ok;
}

/* Operand maps over a tile of `rows` x `cols` (row stride `stride`): A from a transposed tile
 * [k][row], A from a row tile [row][k], B from a transposed tile [n][k]; and the accumulator's
 * store into a row tile. Each must hand value j of lane l the element of its slot. */
static void check_maps(int rows, int cols, int stride, int vector_reads) {
    const int elems = rows * stride;
    int ok = 1, off[W][FP_MFMA_OPERAND];
    for (int m = 0; m < cols / FP_MFMA_M; m++) /* A from [k][row]: rows of the tile are k */
        for (int t = 0; t < rows / FP_MFMA_K; t++)
            for (int l = 0; l < W; l++)
                for (int j = 0; j < FP_MFMA_OPERAND; j++) {
                    const int o = fp_mfma_bwd_a_from_t(stride, l, m, t, j);
                    ok &= o >= 0 && o < elems && o / stride == FP_MFMA_K * t + fp_mfma_a_k(l, j) &&
                          o % stride == FP_MFMA_M * m + fp_mfma_a_row(l);
                }
    for (int m = 0; m < rows / FP_MFMA_M; m++)
        for (int t = 0; t < cols / FP_MFMA_K; t++) {
            for (int l = 0; l < W; l++)
                for (int j = 0; j < FP_MFMA_OPERAND; j++) {
                    const int o = off[l][j] = fp_mfma_bwd_a_from_rows(stride, l, m, t, j);
                    ok &= o >= 0 && o < elems && o / stride == FP_MFMA_M * m + fp_mfma_a_row(l) &&
                          o % stride == FP_MFMA_K * t + fp_mfma_a_k(l, j);
                }
            if (vector_reads) ok &= vector_read_ok(off);
        }
    for (int n = 0; n < rows / FP_MFMA_N; n++)
        for (int t = 0; t < cols / FP_MFMA_K; t++) {
            for (int l = 0; l < W; l++)
                for (int j = 0; j < FP_MFMA_OPERAND; j++) {
                    const int o = off[l][j] = fp_mfma_bwd_b_from_t(stride, l, n, t, j);
                    ok &= o >= 0 && o < elems && o / stride == FP_MFMA_N * n + fp_mfma_b_col(l) &&
                          o % stride == FP_MFMA_K * t + fp_mfma_b_k(l, j);
                }
            ok &= vector_read_ok(off);
        }
    int *hits = calloc((size_t)elems, sizeof *hits);
    for (int m = 0; m < rows / FP_MFMA_M; m++)
        for (int n = 0; n < cols / FP_MFMA_N; n++)
            for (int l = 0; l < W; l++)
                for (int r = 0; r < FP_MFMA_ACC; r++) {
                    const int o = fp_mfma_bwd_acc_to_rows(stride, l, m, n, r);
                    ok &= o >= 0 && o < elems &&
                          o / stride == FP_MFMA_M * m + fp_mfma_d_row(l, r) &&
                          o % stride == FP_MFMA_N * n + fp_mfma_d_col(l);
                    if (o >= 0 && o < elems) hits[o]++;
                }
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < cols; c++) ok &= hits[i * stride + c] == 1;
    free(hits);
    if (!ok) fprintf(stderr, "maps of a %d x %d tile, stride %d\n", rows, cols, stride);
    CHECK(ok);
}

/* The kernels' tiles: key-tile Q^T, dO^T [d][BR], K^T [d][128], dS [BR][128]; query-tile K, V
 * [32][d], K^T [d][32], dS [32][32]. A reads of Q and dO are one value at a time. */
static void check_lds(int d) {
    const int br = FP_MFMA_BWD_ROWS(d), bc = FP_MFMA_BWD_KEYS;
    CHECK(br * d == FP_MFMA_BWD_WAVES * FP_MFMA_M * FP_MFMA_N);
    check_maps(d, br, FP_MFMA_BWD_STRIDE(br), 0);
    check_maps(d, bc, FP_MFMA_BWD_STRIDE(bc), 1);
    check_maps(br, bc, FP_MFMA_BWD_STRIDE(bc), 1);
    check_maps(FP_MFMA_N, d, FP_MFMA_BWD_STRIDE(d), 1);
    check_maps(d, FP_MFMA_N, FP_MFMA_BWD_STRIDE(FP_MFMA_N), 1);
    check_maps(FP_MFMA_M, FP_MFMA_N, FP_MFMA_BWD_STRIDE(FP_MFMA_N), 1);
}

/* dQ offsets: one-to-one over whole row blocks, and where the conversion kernel
 * (backward/workspace.cuh) reads rows g, g + 8 and columns 2c, 2c + 1 of chunk `chunk`: the
 * float4 at tile + fp_bwd_dq_in_tile(g, 2c). */
static void check_dq_offsets(int d) {
    const int rows = 48;
    int *hits = calloc((size_t)rows * d, sizeof *hits), ok = 1;
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < d; c++) {
            const int64_t o = fp_mfma_bwd_dq_offset(d, i, c);
            ok &= o >= 0 && o < (int64_t)rows * d;
            if (o >= 0 && o < (int64_t)rows * d) hits[o]++;
        }
    for (int e = 0; e < rows * d; e++) ok &= hits[e] == 1;
    free(hits);
    for (int t = 0; t < rows / FP_BWD_DQ_TILE_ROWS; t++)
        for (int chunk = 0; chunk < d / 8; chunk++)
            for (int g = 0; g < 8; g++)
                for (int c = 0; c < 4; c++) {
                    const int64_t v = (int64_t)FP_BWD_DQ_TILE_ROWS * t * d +
                                      FP_BWD_DQ_TILE * chunk + fp_bwd_dq_in_tile(g, 2 * c);
                    const int i = FP_BWD_DQ_TILE_ROWS * t + g, col = 8 * chunk + 2 * c;
                    ok &= fp_mfma_bwd_dq_offset(d, i, col) == v &&
                          fp_mfma_bwd_dq_offset(d, i, col + 1) == v + 1 &&
                          fp_mfma_bwd_dq_offset(d, i + 8, col) == v + 2 &&
                          fp_mfma_bwd_dq_offset(d, i + 8, col + 1) == v + 3;
                }
    CHECK(ok);
}

static float val(int seed, int i, int c) {
    return sinf(0.37f * (float)(seed * 7919 + i * 131 + c));
}

static void zero_acc(float acc[W][FP_MFMA_ACC]) { memset(acc, 0, sizeof(float) * W * FP_MFMA_ACC); }

/* Direct gradients of a problem of nq rows, nk keys, head dim d (no mask): P = exp(scale s -
 * lse) with the true LSE, dS = P (dP - D), dV = P^T dO, dK = scale dS^T Q, dQ = scale dS K. */
struct problem {
    int nq, nk, d;
    float scale, *q, *k, *v, *d_o, *lse, *delta, *dq, *dk, *dv;
};

static void problem_make(struct problem *p, int nq, int nk, int d) {
    p->nq = nq, p->nk = nk, p->d = d, p->scale = 1.0f / sqrtf((float)d);
    float **arrays[] = {&p->q, &p->d_o, &p->dq, &p->k, &p->v, &p->dk, &p->dv};
    for (int a = 0; a < 7; a++) *arrays[a] = calloc((size_t)(a < 3 ? nq : nk) * d, sizeof(float));
    p->lse = calloc((size_t)nq, sizeof(float));
    p->delta = calloc((size_t)nq, sizeof(float));
    for (int i = 0; i < nq; i++)
        for (int c = 0; c < d; c++)
            p->q[i * d + c] = val(1, i, c), p->d_o[i * d + c] = val(2, i, c);
    for (int j = 0; j < nk; j++)
        for (int c = 0; c < d; c++) p->k[j * d + c] = val(3, j, c), p->v[j * d + c] = val(4, j, c);
    double *pm = calloc((size_t)nq * nk, sizeof(double)),
           *ds = calloc((size_t)nq * nk, sizeof(double));
    for (int i = 0; i < nq; i++) {
        double den = 0.0;
        for (int j = 0; j < nk; j++) {
            double x = 0.0;
            for (int c = 0; c < d; c++) x += (double)p->q[i * d + c] * p->k[j * d + c];
            pm[i * nk + j] = exp(x * p->scale);
            den += pm[i * nk + j];
        }
        p->lse[i] = (float)log(den);
        double delta = 0.0;
        for (int c = 0; c < d; c++) {
            double o = 0.0;
            for (int j = 0; j < nk; j++) o += pm[i * nk + j] / den * p->v[j * d + c];
            delta += o * p->d_o[i * d + c];
        }
        p->delta[i] = (float)delta;
        for (int j = 0; j < nk; j++) {
            pm[i * nk + j] /= den;
            double dp = 0.0;
            for (int c = 0; c < d; c++) dp += (double)p->d_o[i * d + c] * p->v[j * d + c];
            ds[i * nk + j] = pm[i * nk + j] * (dp - delta);
        }
    }
    for (int j = 0; j < nk; j++)
        for (int c = 0; c < d; c++) {
            double dv = 0.0, dk = 0.0;
            for (int i = 0; i < nq; i++) {
                dv += pm[i * nk + j] * p->d_o[i * d + c];
                dk += ds[i * nk + j] * p->q[i * d + c];
            }
            p->dv[j * d + c] = (float)dv, p->dk[j * d + c] = (float)(dk * p->scale);
        }
    for (int i = 0; i < nq; i++)
        for (int c = 0; c < d; c++) {
            double dq = 0.0;
            for (int j = 0; j < nk; j++) dq += ds[i * nk + j] * p->k[j * d + c];
            p->dq[i * d + c] = (float)(dq * p->scale);
        }
    free(pm);
    free(ds);
}

static void problem_free(struct problem *p) {
    float *arrays[] = {p->q, p->d_o, p->dq, p->k, p->v, p->dk, p->dv, p->lse, p->delta};
    for (int a = 0; a < 9; a++) free(arrays[a]);
}

/* P and dS of one element the kernels' way (tile_math.cuh without modifiers), from S and dP. */
static void p_ds(const struct problem *p, int i, float *s_to_p, float *dp_to_ds) {
    const float pr = expf(*s_to_p * p->scale - p->lse[i]);
    *dp_to_ds = pr * (*dp_to_ds - p->delta[i]);
    *s_to_p = pr;
}

static int close_to(float got, float want) {
    return fabsf(got - want) <= 1e-4f + 1e-4f * fabsf(want);
}

/* One key-tile block (128 keys, four waves) over one step of BR rows. */
static void check_kv_step(int d) {
    enum { BC = FP_MFMA_BWD_KEYS };
    const int br = FP_MFMA_BWD_ROWS(d), mt = br / FP_MFMA_M, dt = d / FP_MFMA_K, nt = d / FP_MFMA_N;
    const int qts = FP_MFMA_BWD_STRIDE(br), kts = FP_MFMA_BWD_STRIDE(BC), dss = kts;
    struct problem p;
    problem_make(&p, br, BC, d);
    float *qt_s = calloc((size_t)d * qts, sizeof(float)),
          *ot_s = calloc((size_t)d * qts, sizeof(float));
    float *kt_s = calloc((size_t)d * kts, sizeof(float)),
          *ds_s = calloc((size_t)br * dss, sizeof(float));
    float *dq_acc = calloc((size_t)br * d, sizeof(float));
    for (int i = 0; i < br; i++)
        for (int c = 0; c < d; c++)
            qt_s[c * qts + i] = p.q[i * d + c], ot_s[c * qts + i] = p.d_o[i * d + c];
    for (int j = 0; j < BC; j++)
        for (int c = 0; c < d; c++) kt_s[c * kts + j] = p.k[j * d + c];
    int ok = 1;
    static float sc[2][W][FP_MFMA_ACC], dp[2][W][FP_MFMA_ACC], dk[4][W][FP_MFMA_ACC],
        dv[4][W][FP_MFMA_ACC];
    for (int wave = 0; wave < FP_MFMA_BWD_WAVES; wave++) {
        float a1[W][FP_MFMA_OPERAND], a2[W][FP_MFMA_OPERAND], b1[W][FP_MFMA_OPERAND],
            b2[W][FP_MFMA_OPERAND];
        for (int m = 0; m < mt; m++) {
            zero_acc(sc[m]), zero_acc(dp[m]);
            for (int t = 0; t < dt; t++) {
                for (int l = 0; l < W; l++)
                    for (int j = 0; j < FP_MFMA_OPERAND; j++) {
                        const int at = fp_mfma_bwd_a_from_t(qts, l, m, t, j);
                        const int key = FP_MFMA_N * wave + fp_mfma_b_col(l),
                                  c = FP_MFMA_K * t + fp_mfma_b_k(l, j);
                        a1[l][j] = qt_s[at], a2[l][j] = ot_s[at];
                        b1[l][j] = p.k[key * d + c], b2[l][j] = p.v[key * d + c];
                    }
                mfma(sc[m], a1, b1);
                mfma(dp[m], a2, b2);
            }
            for (int l = 0; l < W; l++)
                for (int r = 0; r < FP_MFMA_ACC; r++) {
                    p_ds(&p, FP_MFMA_M * m + fp_mfma_d_row(l, r), &sc[m][l][r], &dp[m][l][r]);
                    ds_s[fp_mfma_bwd_acc_to_rows(dss, l, m, wave, r)] = dp[m][l][r];
                }
        }
        for (int n = 0; n < nt; n++) zero_acc(dk[n]), zero_acc(dv[n]);
        for (int m = 0; m < mt; m++)
            for (int rt = 0; rt < FP_MFMA_M / FP_MFMA_K; rt++) {
                for (int l = 0; l < W; l++)
                    for (int j = 0; j < FP_MFMA_OPERAND; j++) {
                        const int r = FP_MFMA_OPERAND * rt + j;
                        a1[l][fp_mfma_acc_a_slot(r)] = sc[m][l][r];
                        a2[l][fp_mfma_acc_a_slot(r)] = dp[m][l][r];
                    }
                for (int n = 0; n < nt; n++) {
                    for (int l = 0; l < W; l++)
                        for (int j = 0; j < FP_MFMA_OPERAND; j++) {
                            const int at =
                                fp_mfma_bwd_b_from_t(qts, l, n, FP_MFMA_M / FP_MFMA_K * m + rt, j);
                            b1[l][j] = ot_s[at], b2[l][j] = qt_s[at];
                        }
                    mfma(dv[n], a1, b1);
                    mfma(dk[n], a2, b2);
                }
            }
        for (int n = 0; n < nt; n++)
            for (int l = 0; l < W; l++)
                for (int r = 0; r < FP_MFMA_ACC; r++) {
                    const int j = FP_MFMA_N * wave + fp_mfma_d_row(l, r),
                              c = FP_MFMA_N * n + fp_mfma_d_col(l);
                    ok &= close_to(dv[n][l][r], p.dv[j * d + c]) &&
                          close_to(dk[n][l][r] * p.scale, p.dk[j * d + c]);
                }
    }
    for (int wave = 0; wave < FP_MFMA_BWD_WAVES; wave++) { /* after the barrier: dQ tile w */
        const int dq_m = wave / nt, dq_n = wave % nt;
        float acc[W][FP_MFMA_ACC], a1[W][FP_MFMA_OPERAND], b1[W][FP_MFMA_OPERAND];
        zero_acc(acc);
        for (int t = 0; t < BC / FP_MFMA_K; t++) {
            for (int l = 0; l < W; l++)
                for (int j = 0; j < FP_MFMA_OPERAND; j++) {
                    a1[l][j] = ds_s[fp_mfma_bwd_a_from_rows(dss, l, dq_m, t, j)];
                    b1[l][j] = kt_s[fp_mfma_bwd_b_from_t(kts, l, dq_n, t, j)];
                }
            mfma(acc, a1, b1);
        }
        for (int l = 0; l < W; l++)
            for (int r = 0; r < FP_MFMA_ACC; r++)
                dq_acc[fp_mfma_bwd_dq_offset(d, FP_MFMA_M * dq_m + fp_mfma_d_row(l, r),
                                             FP_MFMA_N * dq_n + fp_mfma_d_col(l))] += acc[l][r];
    }
    for (int i = 0; i < br; i++) /* read back as the conversion kernel's map (checked above) */
        for (int c = 0; c < d; c++)
            ok &= close_to(dq_acc[fp_mfma_bwd_dq_offset(d, i, c)] * p.scale, p.dq[i * d + c]);
    if (!ok) fprintf(stderr, "key-tile step at d = %d differs from the direct gradients\n", d);
    CHECK(ok);
    free(qt_s), free(ot_s), free(kt_s), free(ds_s), free(dq_acc);
    problem_free(&p);
}

/* One wave of the query-tile kernel: 32 rows over two key tiles of 32. */
static void check_q_wave(int d) {
    enum { KEYS = 2 * FP_MFMA_N };
    const int dt = d / FP_MFMA_K, nt = d / FP_MFMA_N;
    const int ks = FP_MFMA_BWD_STRIDE(d), kts = FP_MFMA_BWD_STRIDE(FP_MFMA_N), dss = kts;
    struct problem p;
    problem_make(&p, FP_MFMA_M, KEYS, d);
    float *k_s = calloc((size_t)FP_MFMA_N * ks, sizeof(float)),
          *v_s = calloc((size_t)FP_MFMA_N * ks, sizeof(float));
    float *kt_s = calloc((size_t)d * kts, sizeof(float)),
          *ds_s = calloc((size_t)FP_MFMA_M * dss, sizeof(float));
    static float dq[4][W][FP_MFMA_ACC];
    for (int n = 0; n < nt; n++) zero_acc(dq[n]);
    for (int kb = 0; kb < KEYS; kb += FP_MFMA_N) {
        for (int j = 0; j < FP_MFMA_N; j++)
            for (int c = 0; c < d; c++) {
                k_s[j * ks + c] = kt_s[c * kts + j] = p.k[(kb + j) * d + c];
                v_s[j * ks + c] = p.v[(kb + j) * d + c];
            }
        float sc[W][FP_MFMA_ACC], dp[W][FP_MFMA_ACC];
        float a1[W][FP_MFMA_OPERAND], a2[W][FP_MFMA_OPERAND], b1[W][FP_MFMA_OPERAND],
            b2[W][FP_MFMA_OPERAND];
        zero_acc(sc), zero_acc(dp);
        for (int t = 0; t < dt; t++) {
            for (int l = 0; l < W; l++)
                for (int j = 0; j < FP_MFMA_OPERAND; j++) {
                    const int i = fp_mfma_a_row(l), c = FP_MFMA_K * t + fp_mfma_a_k(l, j);
                    const int at = fp_mfma_bwd_b_from_t(ks, l, 0, t, j);
                    a1[l][j] = p.q[i * d + c], a2[l][j] = p.d_o[i * d + c];
                    b1[l][j] = k_s[at], b2[l][j] = v_s[at];
                }
            mfma(sc, a1, b1);
            mfma(dp, a2, b2);
        }
        for (int l = 0; l < W; l++)
            for (int r = 0; r < FP_MFMA_ACC; r++) {
                p_ds(&p, fp_mfma_d_row(l, r), &sc[l][r], &dp[l][r]);
                ds_s[fp_mfma_bwd_acc_to_rows(dss, l, 0, 0, r)] = dp[l][r];
            }
        for (int t = 0; t < FP_MFMA_N / FP_MFMA_K; t++) {
            for (int l = 0; l < W; l++)
                for (int j = 0; j < FP_MFMA_OPERAND; j++)
                    a1[l][j] = ds_s[fp_mfma_bwd_a_from_rows(dss, l, 0, t, j)];
            for (int n = 0; n < nt; n++) {
                for (int l = 0; l < W; l++)
                    for (int j = 0; j < FP_MFMA_OPERAND; j++)
                        b1[l][j] = kt_s[fp_mfma_bwd_b_from_t(kts, l, n, t, j)];
                mfma(dq[n], a1, b1);
            }
        }
    }
    int ok = 1;
    for (int n = 0; n < nt; n++)
        for (int l = 0; l < W; l++)
            for (int r = 0; r < FP_MFMA_ACC; r++) {
                const int i = fp_mfma_d_row(l, r), c = FP_MFMA_N * n + fp_mfma_d_col(l);
                ok &= close_to(dq[n][l][r] * p.scale, p.dq[i * d + c]);
            }
    if (!ok) fprintf(stderr, "query-tile wave at d = %d differs from the direct dQ\n", d);
    CHECK(ok);
    free(k_s), free(v_s), free(kt_s), free(ds_s);
    problem_free(&p);
}

int main(void) {
    check_acc_as_a();
    for (int d = 64; d <= 128; d *= 2) {
        check_lds(d);
        check_dq_offsets(d);
        check_kv_step(d);
        check_q_wave(d);
    }
    return check_report("test_mfma_bwd_layout");
}
