/*
 * The MFMA kernel's index math (backends/hip/mfma_layout.h), run on the CPU.
 *
 * The lane layouts themselves restate the ISA's description of the 32x32x8 MFMA and cannot be
 * proven without the hardware; what is checked here is everything the kernel builds on them:
 * each operand and accumulator layout covers its tile exactly once; the row-reduction masks only
 * ever combine lanes holding the same row; the LDS offsets stay in their tiles and hand each lane
 * the element its operand slot needs; and a whole key tile of attention computed the kernel's way
 * (Q as A operands from registers, K and V^T from LDS, the online softmax on the accumulator
 * layout with butterfly reductions, P through LDS) equals a direct computation.
 */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "mfma_model.h"

static void check_coverage(void) {
    int a[FP_MFMA_M][FP_MFMA_K] = {{0}}, b[FP_MFMA_K][FP_MFMA_N] = {{0}};
    int d[FP_MFMA_M][FP_MFMA_N] = {{0}};
    for (int l = 0; l < W; l++) {
        for (int j = 0; j < FP_MFMA_OPERAND; j++) {
            a[fp_mfma_a_row(l)][fp_mfma_a_k(l, j)]++;
            b[fp_mfma_b_k(l, j)][fp_mfma_b_col(l)]++;
        }
        for (int r = 0; r < FP_MFMA_ACC; r++) d[fp_mfma_d_row(l, r)][fp_mfma_d_col(l)]++;
    }
    int ok = 1;
    for (int i = 0; i < FP_MFMA_M; i++)
        for (int k = 0; k < FP_MFMA_K; k++) ok &= a[i][k] == 1 && b[k][i] == 1;
    for (int i = 0; i < FP_MFMA_M; i++)
        for (int n = 0; n < FP_MFMA_N; n++) ok &= d[i][n] == 1;
    CHECK(ok);
}

/* Every mask step pairs lanes of one row; after the butterfly every lane holds its row's max
 * and sum over all 32 columns. */
static void check_row_reduction(void) {
    float mx[W][FP_MFMA_ACC], sm[W][FP_MFMA_ACC], tile[FP_MFMA_M][FP_MFMA_N];
    for (int l = 0; l < W; l++)
        for (int r = 0; r < FP_MFMA_ACC; r++) {
            const float x = (float)((l * 37 + r * 11) % 23) - 7.0f;
            mx[l][r] = sm[l][r] = x;
            tile[fp_mfma_d_row(l, r)][fp_mfma_d_col(l)] = x;
        }
    int same_row = 1;
    for (int s = 0; s < FP_MFMA_ROW_REDUCE_STEPS; s++) {
        const int mask = fp_mfma_row_reduce_mask(s);
        CHECK(mask > 0 && mask < FP_MFMA_ROW_LANES);
        float nmx[W][FP_MFMA_ACC], nsm[W][FP_MFMA_ACC];
        for (int l = 0; l < W; l++)
            for (int r = 0; r < FP_MFMA_ACC; r++) {
                const int p = l ^ mask;
                same_row &= fp_mfma_d_row(p, r) == fp_mfma_d_row(l, r);
                nmx[l][r] = fmaxf(mx[l][r], mx[p][r]);
                nsm[l][r] = sm[l][r] + sm[p][r];
            }
        memcpy(mx, nmx, sizeof mx);
        memcpy(sm, nsm, sizeof sm);
    }
    CHECK(same_row);
    int ok = 1;
    for (int l = 0; l < W; l++)
        for (int r = 0; r < FP_MFMA_ACC; r++) {
            const int i = fp_mfma_d_row(l, r);
            float m = -INFINITY, s = 0.0f;
            for (int n = 0; n < FP_MFMA_N; n++) {
                m = fmaxf(m, tile[i][n]);
                s += tile[i][n];
            }
            ok &= mx[l][r] == m && sm[l][r] == s;
        }
    CHECK(ok);
}

/* Wave-size-generic butterflies: for widths 2..wave on waves of 32 and 64, each lane ends with
 * the sum of its aligned group of `width` lanes. */
static void check_generic_reduction(void) {
    CHECK(fp_wave_reduce_steps(32) == 5 && fp_wave_reduce_steps(64) == 6);
    for (int wave = 32; wave <= 64; wave *= 2)
        for (int width = 2; width <= wave; width *= 2) {
            int v[64], ok = 1;
            for (int l = 0; l < wave; l++) v[l] = l * l + 1;
            for (int s = 0; s < fp_wave_reduce_steps(width); s++) {
                int nv[64];
                const int mask = fp_wave_reduce_mask(width, s);
                for (int l = 0; l < wave; l++) {
                    ok &= (l ^ mask) / width == l / width; /* stays inside the group */
                    nv[l] = v[l] + v[l ^ mask];
                }
                memcpy(v, nv, sizeof(int) * wave);
            }
            for (int l = 0; l < wave; l++) {
                int expect = 0;
                for (int m = l / width * width; m < (l / width + 1) * width; m++)
                    expect += m * m + 1;
                ok &= v[l] == expect;
            }
            CHECK(ok);
        }
}

/* LDS offsets: in bounds, one element per (lane, slot), and the element the slot needs. */
static void check_lds_offsets(void) {
    const int d_tile = 128, k_elems = FP_MFMA_N * fp_mfma_k_stride(d_tile);
    const int vt_elems = d_tile * fp_mfma_vt_stride(), p_elems = FP_MFMA_M * fp_mfma_p_stride();
    int ok = 1;
    for (int l = 0; l < W; l++)
        for (int j = 0; j < FP_MFMA_OPERAND; j++) {
            for (int t = 0; t < d_tile / FP_MFMA_K; t++) {
                const int off = fp_mfma_k_offset(d_tile, l, t, j);
                const int key = off / fp_mfma_k_stride(d_tile),
                          dim = off % fp_mfma_k_stride(d_tile);
                ok &= off >= 0 && off < k_elems && key == fp_mfma_b_col(l) &&
                      dim == FP_MFMA_K * t + fp_mfma_b_k(l, j) && dim < d_tile;
            }
            for (int n = 0; n < d_tile / FP_MFMA_N; n++)
                for (int ks = 0; ks < FP_MFMA_N / FP_MFMA_K; ks++) {
                    const int off = fp_mfma_vt_offset(l, n, ks, j);
                    const int col = off / fp_mfma_vt_stride(), key = off % fp_mfma_vt_stride();
                    ok &= off >= 0 && off < vt_elems && col == FP_MFMA_N * n + fp_mfma_b_col(l) &&
                          key == FP_MFMA_K * ks + fp_mfma_b_k(l, j) && key < FP_MFMA_N;
                }
            for (int ks = 0; ks < FP_MFMA_N / FP_MFMA_K; ks++) {
                const int off = fp_mfma_p_load_offset(l, ks, j);
                ok &= off >= 0 && off < p_elems;
            }
        }
    /* P written in D's layout covers the tile once. */
    int *hits = calloc((size_t)p_elems, sizeof *hits);
    for (int l = 0; l < W; l++)
        for (int r = 0; r < FP_MFMA_ACC; r++) hits[fp_mfma_p_store_offset(l, r)]++;
    for (int i = 0; i < FP_MFMA_M; i++)
        for (int n = 0; n < FP_MFMA_N; n++) ok &= hits[i * fp_mfma_p_stride() + n] == 1;
    free(hits);
    CHECK(ok);
}

/* One 32-row wave over two key tiles of 32, the kernel's way, against direct attention. */
static void check_attention_tile(void) {
    enum { D = 64, KEYS = 64 };
    static float q[FP_MFMA_M][D], k[KEYS][D], v[KEYS][D];
    for (int i = 0; i < FP_MFMA_M; i++)
        for (int c = 0; c < D; c++) q[i][c] = sinf(0.37f * (float)(i * D + c));
    for (int j = 0; j < KEYS; j++)
        for (int c = 0; c < D; c++) {
            k[j][c] = cosf(0.11f * (float)(j * D + c));
            v[j][c] = sinf(0.05f * (float)(j * 3 + c * 7));
        }
    const float scale = 0.125f;

    float qa[D / FP_MFMA_K][W][FP_MFMA_OPERAND];
    for (int t = 0; t < D / FP_MFMA_K; t++)
        for (int l = 0; l < W; l++)
            for (int j = 0; j < FP_MFMA_OPERAND; j++)
                qa[t][l][j] = q[fp_mfma_a_row(l)][FP_MFMA_K * t + fp_mfma_a_k(l, j)];

    static float k_s[FP_MFMA_N * (D + FP_MFMA_PAD)], vt_s[D * (FP_MFMA_N + FP_MFMA_PAD)];
    static float p_s[FP_MFMA_M * (FP_MFMA_N + FP_MFMA_PAD)];
    float o[D / FP_MFMA_N][W][FP_MFMA_ACC] = {{{0}}}, m[W][FP_MFMA_ACC], l_sum[W][FP_MFMA_ACC];
    for (int l = 0; l < W; l++)
        for (int r = 0; r < FP_MFMA_ACC; r++) m[l][r] = -INFINITY, l_sum[l][r] = 0.0f;

    for (int k0 = 0; k0 < KEYS; k0 += FP_MFMA_N) {
        for (int key = 0; key < FP_MFMA_N; key++)
            for (int c = 0; c < D; c++) {
                k_s[key * fp_mfma_k_stride(D) + c] = k[k0 + key][c];
                vt_s[c * fp_mfma_vt_stride() + key] = v[k0 + key][c];
            }
        float s[W][FP_MFMA_ACC] = {{0}}, b[W][FP_MFMA_OPERAND];
        for (int t = 0; t < D / FP_MFMA_K; t++) {
            for (int l = 0; l < W; l++)
                for (int j = 0; j < FP_MFMA_OPERAND; j++)
                    b[l][j] = k_s[fp_mfma_k_offset(D, l, t, j)];
            mfma(s, qa[t], b);
        }
        for (int r = 0; r < FP_MFMA_ACC; r++) {
            float mx[W], sm[W];
            for (int l = 0; l < W; l++) mx[l] = s[l][r] * scale;
            for (int st = 0; st < FP_MFMA_ROW_REDUCE_STEPS; st++) {
                float n[W];
                for (int l = 0; l < W; l++)
                    n[l] = fmaxf(mx[l], mx[l ^ fp_mfma_row_reduce_mask(st)]);
                memcpy(mx, n, sizeof mx);
            }
            for (int l = 0; l < W; l++) {
                const float m_new = fmaxf(m[l][r], mx[l]);
                const float alpha = expf(m[l][r] - m_new);
                m[l][r] = m_new;
                l_sum[l][r] *= alpha;
                for (int n = 0; n < D / FP_MFMA_N; n++) o[n][l][r] *= alpha;
                sm[l] = expf(s[l][r] * scale - m_new);
                p_s[fp_mfma_p_store_offset(l, r)] = sm[l];
            }
            for (int st = 0; st < FP_MFMA_ROW_REDUCE_STEPS; st++) {
                float n[W];
                for (int l = 0; l < W; l++) n[l] = sm[l] + sm[l ^ fp_mfma_row_reduce_mask(st)];
                memcpy(sm, n, sizeof sm);
            }
            for (int l = 0; l < W; l++) l_sum[l][r] += sm[l];
        }
        for (int ks = 0; ks < FP_MFMA_N / FP_MFMA_K; ks++) {
            float pa[W][FP_MFMA_OPERAND];
            for (int l = 0; l < W; l++)
                for (int j = 0; j < FP_MFMA_OPERAND; j++)
                    pa[l][j] = p_s[fp_mfma_p_load_offset(l, ks, j)];
            for (int n = 0; n < D / FP_MFMA_N; n++) {
                for (int l = 0; l < W; l++)
                    for (int j = 0; j < FP_MFMA_OPERAND; j++)
                        b[l][j] = vt_s[fp_mfma_vt_offset(l, n, ks, j)];
                mfma(o[n], pa, b);
            }
        }
    }

    double worst = 0.0;
    for (int l = 0; l < W; l++)
        for (int r = 0; r < FP_MFMA_ACC; r++)
            for (int n = 0; n < D / FP_MFMA_N; n++) {
                const int i = fp_mfma_d_row(l, r), c = FP_MFMA_N * n + fp_mfma_d_col(l);
                double mx = -INFINITY, den = 0.0, num = 0.0;
                for (int j = 0; j < KEYS; j++) {
                    double dot = 0.0;
                    for (int e = 0; e < D; e++) dot += (double)q[i][e] * k[j][e];
                    mx = fmax(mx, dot * scale);
                }
                for (int j = 0; j < KEYS; j++) {
                    double dot = 0.0;
                    for (int e = 0; e < D; e++) dot += (double)q[i][e] * k[j][e];
                    const double p = exp(dot * scale - mx);
                    den += p;
                    num += p * v[j][c];
                }
                worst = fmax(worst, fabs(o[n][l][r] / l_sum[l][r] - num / den));
            }
    if (worst > 1e-5) fprintf(stderr, "attention tile: max abs error %g\n", worst);
    CHECK(worst <= 1e-5);
}

int main(void) {
    check_coverage();
    check_row_reduction();
    check_generic_reduction();
    check_lds_offsets();
    check_attention_tile();
    return check_report("test_mfma_layout");
}
