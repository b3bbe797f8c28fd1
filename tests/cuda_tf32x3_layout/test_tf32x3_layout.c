/*
 * Host check of the 3xTF32 forward's index maps (backends/cuda/kernels/tf32x3/
 * fragment_layout.h): for every tile configuration, each warp's S = Q K^T and O = P V are
 * replayed through a model of mma.sync m16n8k8 .tf32 exactly as the kernel feeds it (16-byte
 * shared loads through the swizzle, P taken from the S accumulators), and compared with the
 * products computed directly; every shared load and tile store is checked to be free of bank
 * conflicts. Then the arithmetic (the tensor core's reading of the small half modelled at its
 * worst, truncation): the split, a 3xTF32 dot product, and whole attention rows computed as the
 * kernel computes them, against double precision and the f32 tolerances.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fragment_layout.h"
#include "layout_model.h"
#include "mma_tf32_model.h"
#include "tile_configs.h"

enum { MAX_ROWS = 256, MAX_D = 256, MAX_KEYS = 128 };

/* ---- the kernel's placements ----------------------------------------------------------- */

/* A 16-byte shared load is served 8 lanes at a time; each such quarter must touch 8 different
 * 16-byte bank groups (offsets in floats, each 16-byte aligned). */
static void expect_conflict_free(const int off[LANES], const char *what, int d) {
    for (int q = 0; q < 4; ++q) {
        int seen = 0;
        for (int i = 0; i < 8; ++i) {
            EXPECT(off[8 * q + i] % 4 == 0, "%s d=%d: offset %d not 16-byte aligned", what, d,
                   off[8 * q + i]);
            seen |= 1 << ((off[8 * q + i] / 4) % 8);
        }
        EXPECT(seen == 0xff, "%s d=%d: quarter %d bank groups 0x%02x", what, d, q, seen);
    }
}

/* The 16-row slice from row `row0` of a block with `rows` query rows: S over `keys` keys,
 * P = f(S) from the accumulators, O = P V, all as the kernel does it. */
static void replay_warp(int d, int rows, int keys, int row0) {
    const int cpr = d / 4, groups = d / 32;
    static int sq[MAX_ROWS * MAX_D], sk[MAX_KEYS * MAX_D], sv[MAX_KEYS * MAX_D];
    static double s[MAX_KEYS / 8][LANES][4], o[MAX_D / 8][LANES][4];
    static double p_full[16][MAX_KEYS];
    place_tile(sq, rows, d, 1, 4, fp_tf32_swizzle);
    place_tile(sk, keys, d, 2, 4, fp_tf32_swizzle);
    place_tile(sv, keys, d, 3, 4, fp_tf32_swizzle);
    memset(s, 0, sizeof s);
    memset(o, 0, sizeof o);

    /* The warp's rewrite of its slice of Q into fragment order (tf32x3/tile_load.cuh), one
     * column group at a time: reads as loaded, then writes that stay inside the group's rows
     * and columns, each position once, both conflict-free. */
    static int sq_frag[MAX_ROWS * MAX_D];
    memcpy(sq_frag, sq, sizeof(int) * (size_t)rows * d);
    int off[LANES], off_k[LANES];
    for (int u = 0; u < groups; ++u) {
        int got[LANES][2][2][4]; /* [lane][half][rows g, g + 8][float] */
        for (int half = 0; half < 2; ++half)
            for (int r = 0; r < 2; ++r) {
                for (int lane = 0; lane < LANES; ++lane) {
                    off[lane] = fp_tf32_swizzle(row0 + (lane >> 2) + 8 * r,
                                                fp_tf32_qk_chunk(lane, u, half), cpr);
                    for (int e = 0; e < 4; ++e) got[lane][half][r][e] = sq[off[lane] + e];
                }
                expect_conflict_free(off, r ? "Q rows g+8" : "Q rows g", d);
            }
        char written[16][32] = {{0}};
        for (int j = 0; j < 4; ++j) {
            const int half = j / 2, step = j % 2;
            for (int lane = 0; lane < LANES; ++lane) {
                off[lane] =
                    row0 * d + fp_tf32_q_frag_lane(lane, d) + fp_tf32_q_frag_offset(0, u, j, d);
                const int row = off[lane] / d - row0, col = off[lane] % d - 32 * u;
                EXPECT(row >= 0 && row < 16 && col >= 0 && col < 32 && !written[row][col],
                       "Q fragment order d=%d lane %d u %d j %d: offset %d", d, lane, u, j,
                       off[lane]);
                if (row >= 0 && row < 16 && col >= 0 && col < 32) {
                    for (int e = 0; e < 4; ++e) written[row][col + e] = 1;
                }
                for (int e = 0; e < 4; ++e)
                    sq_frag[off[lane] + e] = got[lane][half][e & 1][2 * step + e / 2];
            }
            expect_conflict_free(off, "Q fragment-order store/load", d);
        }
    }

    double a[LANES][4], b[LANES][2];
    for (int u = 0; u < groups; ++u)
        for (int half = 0; half < 2; ++half) {
            for (int nt = 0; nt < keys / 8; ++nt) {
                for (int lane = 0; lane < LANES; ++lane)
                    off_k[lane] =
                        fp_tf32_swizzle(8 * nt + (lane >> 2), fp_tf32_qk_chunk(lane, u, half), cpr);
                expect_conflict_free(off_k, "K", d);
                for (int step = 0; step < 2; ++step) {
                    const int ks = 4 * u + 2 * half + step;
                    for (int lane = 0; lane < LANES; ++lane) {
                        const int g = lane >> 2;
                        const int at = row0 * d + fp_tf32_q_frag_lane(lane, d) +
                                       fp_tf32_q_frag_offset(0, u, 2 * half + step, d);
                        for (int i = 0; i < 4; ++i) {
                            a[lane][i] = sq_frag[at + i];
                            /* a0 = A[g][c], a1 = A[g+8][c], a2 = A[g][c+4], a3 = A[g+8][c+4] */
                            const int col = fp_tf32_qk_col(lane, ks, i >> 1);
                            EXPECT(sq_frag[at + i] == value(1, row0 + g + 8 * (i & 1), col),
                                   "Q fragment d=%d lane %d k-step %d reg %d: not row %d column %d",
                                   d, lane, ks, i, row0 + g + 8 * (i & 1), col);
                        }
                        b[lane][0] = sk[off_k[lane] + 2 * step];
                        b[lane][1] = sk[off_k[lane] + 2 * step + 1];
                    }
                    model_mma(s[nt], a, b);
                }
            }
        }

    for (int nt = 0; nt < keys / 8; ++nt)
        for (int lane = 0; lane < LANES; ++lane)
            for (int r = 0; r < 4; ++r) {
                const int row = fp_tf32_acc_row(lane, r), key = 8 * nt + fp_tf32_s_key(lane, r);
                double want = 0.0;
                for (int col = 0; col < d; ++col)
                    want += (double)value(1, row0 + row, col) * value(2, key, col);
                EXPECT(s[nt][lane][r] == want, "S d=%d row0 %d lane %d tile %d reg %d: %g != %g", d,
                       row0, lane, nt, r, s[nt][lane][r], want);
                /* A stand-in for exp2 that keeps values small and exact. */
                const int p = ((int)s[nt][lane][r] % 5 + 5) % 5 - 2;
                s[nt][lane][r] = p;
                p_full[row][key] = p;
            }

    int off_v0[LANES], off_v1[LANES];
    for (int t = 0; t < keys / 8; ++t) {
        for (int lane = 0; lane < LANES; ++lane)
            for (int r = 0; r < 4; ++r) a[lane][r] = s[t][lane][fp_tf32_p_acc_reg(r)];
        for (int w = 0; w < groups; ++w) {
            for (int lane = 0; lane < LANES; ++lane) {
                const int row0 = 8 * t + fp_tf32_pv_key(lane, 0);
                const int chunk = fp_tf32_v_chunk(lane, w);
                EXPECT(fp_tf32_pv_key(lane, 1) == fp_tf32_pv_key(lane, 0) + 1,
                       "b1's key follows b0's");
                off_v0[lane] = fp_tf32_swizzle(row0, chunk, cpr);
                /* The kernel reaches row0 + 1 by flipping one chunk bit of row0's offset. */
                off_v1[lane] = fp_tf32_swizzle(row0 + 1, chunk, cpr);
                EXPECT(off_v1[lane] - (row0 + 1) * d == ((off_v0[lane] - row0 * d) ^ 4),
                       "V d=%d lane %d: row0 + 1 is not off ^ 4", d, lane);
            }
            expect_conflict_free(off_v0, "V b0", d);
            expect_conflict_free(off_v1, "V b1", d);
            for (int e = 0; e < 4; ++e) {
                for (int lane = 0; lane < LANES; ++lane) {
                    b[lane][0] = sv[off_v0[lane] + e];
                    b[lane][1] = sv[off_v1[lane] + e];
                }
                model_mma(o[4 * w + e], a, b);
            }
        }
    }
    for (int dt = 0; dt < d / 8; ++dt)
        for (int lane = 0; lane < LANES; ++lane)
            for (int r = 0; r < 4; ++r) {
                const int row = fp_tf32_acc_row(lane, r), col = fp_tf32_o_col(lane, dt, r);
                double want = 0.0;
                for (int key = 0; key < keys; ++key) want += p_full[row][key] * value(3, key, col);
                EXPECT(o[dt][lane][r] == want, "O d=%d row0 %d lane %d tile %d reg %d: %g != %g", d,
                       row0, lane, dt, r, o[dt][lane][r], want);
                /* The epilogue stores registers 2i + e of n-tiles 4w .. 4w + 3 as four
                 * consecutive columns from o_col(4w, 2i) + 4e. */
                EXPECT(col == fp_tf32_o_col(lane, dt - dt % 4, r & 2) + 4 * (r & 1) + dt % 4,
                       "O store column d=%d lane %d tile %d reg %d", d, lane, dt, r);
            }
    /* Every column of O is held once per row by some (lane, tile, register). */
    for (int row = 0; row < 16; ++row) {
        int seen[MAX_D] = {0};
        for (int dt = 0; dt < d / 8; ++dt)
            for (int lane = 0; lane < LANES; ++lane)
                for (int r = 0; r < 4; ++r)
                    if (fp_tf32_acc_row(lane, r) == row) seen[fp_tf32_o_col(lane, dt, r)]++;
        for (int col = 0; col < d; ++col)
            EXPECT(seen[col] == 1, "O d=%d row %d col %d held %d times", d, row, col, seen[col]);
    }
}

/* Tile loads cover every chunk once, and each 8 consecutive threads' 16-byte stores are one
 * wavefront. */
struct tile_config {
    int d, index, warps, m_tiles, bc, stages, min_blocks;
};
#define AS_TILE_CONFIG(d, index, warps, m_tiles, bc, stages, min_blocks)                           \
    {d, index, warps, m_tiles, bc, stages, min_blocks},
static const struct tile_config configs[] = {FP_TF32X3_CONFIG_LIST(AS_TILE_CONFIG)};
#undef AS_TILE_CONFIG
static const int n_configs = (int)(sizeof configs / sizeof configs[0]);

static int config_exists(int d, int index) {
    for (int i = 0; i < n_configs; ++i)
        if (configs[i].d == d && configs[i].index == index) return 1;
    return 0;
}

static void check_config(const struct tile_config *c) {
    const int rows = 16 * c->warps * c->m_tiles, threads = 32 * c->warps;
    const long smem = 4L * c->d * (rows + (long)c->stages * 2 * c->bc);
    EXPECT(c->d % 32 == 0 && c->d <= MAX_D, "config d=%d: not a multiple of 32", c->d);
    EXPECT(c->bc % 8 == 0 && c->bc > 0 && c->bc <= MAX_KEYS, "config d=%d: key tile %d", c->d,
           c->bc);
    EXPECT(rows <= MAX_ROWS && c->stages >= 2 && (c->m_tiles == 1 || c->m_tiles == 2),
           "config d=%d #%d: rows %d stages %d slices %d", c->d, c->index, rows, c->stages,
           c->m_tiles);
    EXPECT(c->min_blocks >= 1 && smem <= SMEM_PER_BLOCK &&
               c->min_blocks * (smem + SMEM_RESERVED) <= SMEM_PER_SM,
           "config d=%d: %ld bytes of shared memory, %d blocks an SM do not fit", c->d, smem,
           c->min_blocks);
    EXPECT(c->index >= 0 && (c->index == 0 || config_exists(c->d, c->index - 1)),
           "config d=%d #%d: indices must run 0, 1, 2, ...", c->d, c->index);
    int same = 0;
    for (int i = 0; i < n_configs; ++i)
        same += configs[i].d == c->d && configs[i].index == c->index;
    EXPECT(same == 1, "config d=%d #%d listed %d times", c->d, c->index, same);
    check_loader(rows, c->d, threads, 4, fp_tf32_load_row, fp_tf32_load_chunk, fp_tf32_swizzle);
    check_loader(c->bc, c->d, threads, 4, fp_tf32_load_row, fp_tf32_load_chunk, fp_tf32_swizzle);
    for (int w = 0; w < c->warps; ++w)
        for (int slice = 0; slice < c->m_tiles; ++slice)
            replay_warp(c->d, rows, c->bc, 16 * (w * c->m_tiles + slice));
}

/* ---- the split ---------------------------------------------------------------------------- */

/* What the tensor core may make of an f32 operand, at worst: its 13 low bits dropped. This is
 * also how the kernel makes big (tf32x3/tf32_split.cuh); small = x - big is exact in f32. */
static float tf32_truncate(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u &= 0xffffe000u;
    float y;
    memcpy(&y, &u, 4);
    return y;
}

static uint32_t rng = 12345u;
static float uniform(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 16777216.0f * 2.0f - 1.0f;
}

/* big + small is x exactly and big + tf32(small) within 2^-20 of it; a 3xTF32 dot product
 * (products exact, accumulated in f32) stays near a plain f32 one against double. */
static void check_split(void) {
    for (int i = 0; i < 100000; ++i) {
        const float x = uniform() * ldexpf(1.0f, (i % 41) - 20);
        const float big = tf32_truncate(x), small = x - big;
        EXPECT(tf32_truncate(big) == big && (double)big + small == x &&
                   fabs((double)small) < ldexp(fabs(x), -10),
               "split of %.9g: %.9g + %.9g", x, big, small);
        EXPECT(fabs((double)x - big - tf32_truncate(small)) <= ldexp(fabs(x), -20),
               "split of %.9g: %.9g + tf32(%.9g)", x, big, small);
    }
    enum { N = 256, TRIALS = 2000 };
    double worst_3x = 0.0, worst_f32 = 0.0;
    for (int t = 0; t < TRIALS; ++t) {
        float a[N], b[N];
        double exact = 0.0, norm = 0.0;
        for (int i = 0; i < N; ++i) {
            a[i] = uniform();
            b[i] = uniform();
            exact += (double)a[i] * b[i];
            norm += fabs((double)a[i] * b[i]);
        }
        float acc3 = 0.0f, acc1 = 0.0f;
        for (int i = 0; i < N; ++i) {
            const float ab = tf32_truncate(a[i]), as = tf32_truncate(a[i] - ab);
            const float bb = tf32_truncate(b[i]), bs = tf32_truncate(b[i] - bb);
            acc3 += (float)((double)as * bb);
            acc3 += (float)((double)ab * bs);
            acc3 += (float)((double)ab * bb);
            acc1 += a[i] * b[i];
        }
        const double e3 = fabs(acc3 - exact) / norm, e1 = fabs(acc1 - exact) / norm;
        worst_3x = e3 > worst_3x ? e3 : worst_3x;
        worst_f32 = e1 > worst_f32 ? e1 : worst_f32;
    }
    /* Three f32 additions a term instead of one: allow 4x the plain f32 error, and stay far
     * inside the f32 tolerance (1e-5). */
    EXPECT(worst_3x <= 4.0 * worst_f32 && worst_3x < 1e-6,
           "3xTF32 dot product error %.3g vs f32 %.3g (relative to sum |a b|)", worst_3x,
           worst_f32);
    printf("test_tf32x3_layout: 3xTF32 dot error %.3g, f32 %.3g (of sum |a b|, N = %d)\n", worst_3x,
           worst_f32, N);
}

/* One mma k-step as the model takes it: 8 exact products of the operands' tf32 parts, summed
 * with the accumulator and rounded to f32 once. */
static float mma_step(float acc, const float *a, const float *b, int n) {
    double sum = acc;
    for (int i = 0; i < n; ++i) sum += (double)a[i] * b[i];
    return (float)sum;
}

/* acc + a . b over n (a multiple of 8) the 3xTF32 way, in the kernel's order: per k-step of 8,
 * the small*big term, then big*small, then big*big. */
static float acc_3xtf32(float acc, const float *a, const float *b, int n) {
    for (int k = 0; k < n; k += 8) {
        float ab[8], as[8], bb[8], bs[8];
        for (int i = 0; i < 8; ++i) {
            ab[i] = tf32_truncate(a[k + i]);
            as[i] = tf32_truncate(a[k + i] - ab[i]);
            bb[i] = tf32_truncate(b[k + i]);
            bs[i] = tf32_truncate(b[k + i] - bb[i]);
        }
        acc = mma_step(acc, as, bb, 8);
        acc = mma_step(acc, ab, bs, 8);
        acc = mma_step(acc, ab, bb, 8);
    }
    return acc;
}

/* A model of the kernel's arithmetic on whole attention problems (f32 state, exp2 with the
 * scale folded in, online softmax over key tiles of 32, 3xTF32 products, division at the end)
 * against double precision, judged by the f32 tolerances (relative L2 1e-5, max abs 1e-4). */
static void check_attention_accuracy(int n, int d, float scale, float spread) {
    enum { BC = 32, MAX_N = 512 };
    static float q[MAX_N][MAX_D], k[MAX_N][MAX_D], vt[MAX_D][MAX_N];
    for (int i = 0; i < n; ++i)
        for (int c = 0; c < d; ++c) {
            q[i][c] = uniform() * spread;
            k[i][c] = uniform() * spread;
            vt[c][i] = uniform();
        }
    const float scale_log2 = scale * 1.44269504088896340736f;
    double err2 = 0.0, ref2 = 0.0, max_abs = 0.0;
    for (int i = 0; i < n; ++i) {
        float m = -INFINITY, l = 0.0f, o[MAX_D] = {0};
        for (int kb = 0; kb < n; kb += BC) {
            float s[BC], mx = m;
            for (int j = 0; j < BC; ++j) {
                s[j] = acc_3xtf32(0.0f, q[i], k[kb + j], d) * scale_log2;
                mx = fmaxf(mx, s[j]);
            }
            const float alpha = exp2f(m - mx);
            m = mx;
            l *= alpha;
            for (int c = 0; c < d; ++c) o[c] *= alpha;
            for (int j = 0; j < BC; ++j) {
                s[j] = exp2f(s[j] - mx);
                l += s[j];
            }
            for (int c = 0; c < d; ++c) o[c] = acc_3xtf32(o[c], s, &vt[c][kb], BC);
        }
        double w[MAX_N], mxd = -INFINITY, sum = 0.0;
        for (int j = 0; j < n; ++j) {
            double dot = 0.0;
            for (int c = 0; c < d; ++c) dot += (double)q[i][c] * k[j][c];
            w[j] = dot * scale;
            mxd = w[j] > mxd ? w[j] : mxd;
        }
        for (int j = 0; j < n; ++j) sum += w[j] = exp(w[j] - mxd);
        for (int c = 0; c < d; ++c) {
            double want = 0.0;
            for (int j = 0; j < n; ++j) want += w[j] * vt[c][j];
            want /= sum;
            const double got = o[c] / l, e = fabs(got - want);
            err2 += e * e;
            ref2 += want * want;
            max_abs = e > max_abs ? e : max_abs;
        }
    }
    const double rel_l2 = sqrt(err2 / ref2);
    printf("test_tf32x3_layout: attention model n=%d d=%d scale=%g spread=%g: rel L2 %.3g, "
           "max abs %.3g\n",
           n, d, scale, spread, rel_l2, max_abs);
    EXPECT(rel_l2 < 1e-5 && max_abs < 1e-4, "attention model n=%d d=%d: rel L2 %.3g max abs %.3g",
           n, d, rel_l2, max_abs);
}

int main(void) {
    EXPECT(config_exists(64, FP_TF32X3_DEFAULT_CONFIG_D64), "no default config for d=64");
    EXPECT(config_exists(128, FP_TF32X3_DEFAULT_CONFIG_D128), "no default config for d=128");
    EXPECT(config_exists(256, FP_TF32X3_DEFAULT_CONFIG_D256), "no default config for d=256");
    for (int i = 0; i < n_configs; ++i) check_config(&configs[i]);
    check_split();
    check_attention_accuracy(256, 64, 0.125f, 1.0f);
    check_attention_accuracy(256, 128, 0.0883883476f, 1.0f);
    check_attention_accuracy(256, 64, 2.0f, 1.0f);
    check_attention_accuracy(512, 128, 0.0883883476f, 3.0f);
    printf("test_tf32x3_layout: %d configs, %d checks, %d failed\n", n_configs, checks, failures);
    return failures ? 1 : 0;
}
