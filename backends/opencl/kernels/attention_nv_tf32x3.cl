/*
 * Exact f32 attention on NVIDIA tensor cores (compute capability 8.0+), OpenCL C 1.2 with inline
 * PTX: the FlashAttention-2 forward with the 3xTF32 split, the algorithm of the CUDA backend's
 * tensor_core_tf32x3 variant. OpenCL C has no tensor-core, shuffle or vote operation, but
 * NVIDIA's OpenCL compiler passes GCC-style asm statements through to its PTX, so mma.sync,
 * shfl.sync, vote.sync and ex2.approx are written as PTX (spelled __asm__, which a compiler in
 * strict OpenCL C mode still accepts where it rejects the GNU keyword asm). Only NVIDIA
 * devices build this file, except with EMULATE below.
 *
 * A work-group of WARPS x 32 work-items (a 1-D local size, so work-items 32w .. 32w + 31 are
 * warp w) owns 16 x MT x WARPS query rows of one (batch, query head); each warp owns MT slices of
 * 16 rows for the whole pass, so a row's softmax statistics never leave the four lanes that hold
 * it. Per lane, g = lane / 4 and c = lane % 4.
 *
 * Fragments (mma.m16n8k8 .row.col, 32-bit operands, PTX ISA "Matrix Fragments for
 * mma.m16n8k8"): A a0 = A[g][c], a1 = A[g+8][c], a2 = A[g][c+4], a3 = A[g+8][c+4];
 * B b0 = B[c][g], b1 = B[c+4][g]; C register r = C[g + 8 (r / 2)][2c + r % 2]. A dot product
 * may take its terms in any order as long as A and B agree, which the kernel uses twice:
 *   S = Q K^T: in each 32-column group u of d, lane c owns columns 32u + 8c .. 32u + 8c + 7,
 *     read as two 16-byte chunks (part = 0, 1); float e of chunk `part` is k-register e % 2
 *     (k = c, k = c + 4) of k-step 2 part + e / 2. Q's A fragments and K's B fragments thus
 *     come from float4 reads of rows g, g + 8 (Q) and key g of each 8-key tile (K).
 *   O = P V: k = c is key 2c of an 8-key tile, k = c + 4 is key 2c + 1: exactly the keys of S
 *     accumulator registers 0, 1 (row g) and 2, 3 (row g + 8), so P's A register r is S
 *     register ((r & 1) << 1) | (r >> 1) of the same key tile, with no shuffle. O's columns are
 *     permuted alike: n-tile dt, n = j stands for column 32 (dt / 4) + 4j + dt % 4, so b0 (b1)
 *     of the n-tiles 4w .. 4w + 3 is one float4 of V row 2c (2c + 1), columns 32w + 4g .. + 3,
 *     and a lane's accumulators of those n-tiles are 8 consecutive columns 32w + 8c .. + 7.
 *
 * 3xTF32: x = big + small with big = x's bits & 0xffffe000 (a tf32) and small = x - big (exact
 * in f32; the tensor core reads its tf32 part). A product takes three mma, small*big, big*small,
 * big*big (small*small is below 2^-20 of it); the small terms go first, while the accumulator is
 * still small beside them. A NaN or an infinity makes small NaN, so it reaches the product.
 *
 * Q stays in registers (raw f32, D/2 floats a lane per slice; the split is redone per tile),
 * because NVIDIA's OpenCL gives a work-group 48 KB of local memory: that holds two K/V stages,
 * not Q beside them. K and V go through local memory in tiles of BC keys, two stages: in the
 * walk over tile t, the global loads of tile t + 1's K (V) are issued into registers before
 * the products with tile t's K (V) and stored into the other stage after them, so the loads
 * overlap the tensor cores without an asynchronous copy; one barrier per tile both publishes
 * tile t and frees the stage of tile t - 1. Shared rows use the XOR swizzle (chunk ch of row r
 * at chunk ch ^ (r % 8)) that keeps every 16-byte local read and write conflict-free.
 *
 * Per tile and warp: S = Q K^T, scaled by scale * log2(e) (sign included), masked in the tiles
 * that cross the causal diagonal or the end of the keys, online softmax with ex2.approx that
 * rescales O only when a row's max moved (vote across the warp), then O += P V summed per
 * 32-column group in a fresh accumulator and added to O in f32: mma.sync's accumulation is not
 * rounded like f32 adds, and summed straight into O over thousands of keys it drifted past the
 * f32 tolerance on the CUDA kernel; this way the drift spans one tile's keys. Tiles wholly above
 * the causal diagonal for a warp are skipped by it. O is divided by the row sum once, at the end.
 *
 * Head dims: compiled for one D (64 or 128); a smaller d runs with the columns past d
 * zero-filled on load (and multiplied through) and never stored.
 *
 * Build options (all required): D, WARPS, MT, BC; VEC=1 when Q, K and V allow 16-byte loads
 * (float4-aligned strides, d % 4 == 0); OVEC=1 when O allows 16-byte stores; EMULATE=1 replaces
 * the PTX by a model of each warp operation through local memory and barriers, so that the
 * kernel's index maps and pipeline can be tested on any OpenCL device (slow; every warp then
 * computes every tile, since a barrier must be reached by the whole work-group).
 */

#define THREADS      (WARPS * 32)
#define BR           (16 * MT * WARPS) /* query rows of a work-group */
#define CPR          (D / 4)           /* 16-byte chunks of a row */
#define GROUPS       (D / 32)          /* 32-column groups of d */
#define KEY_TILES    (BC / 8)          /* n-tiles of S, k-steps of O += P V */
#define D_TILES      (D / 8)           /* n-tiles of O */
#define TILE_FLOATS  (BC * D)          /* one K or V tile */
#define STAGE_FLOATS (2 * TILE_FLOATS)
#define PASSES       (BC * CPR / THREADS) /* chunks of a tile each work-item copies */

#if D % 32 || BC % 8 || THREADS % CPR || (BC * CPR) % THREADS
#error "needs D % 32 == 0, BC % 8 == 0, and whole rows of chunks per pass of the work-group"
#endif

#define LOCAL4(p) (*(__local float4 *)(p))

/* Float offset of chunk `chunk` of row `row` in a swizzled tile. */
__attribute__((always_inline)) int swizzle(int row, int chunk) {
    return (row * CPR + (chunk ^ (row & 7))) * 4;
}

typedef struct {
    uint big, small;
} tf32_pair;

__attribute__((always_inline)) tf32_pair split_tf32(float x) {
    tf32_pair p;
    p.big = as_uint(x) & 0xffffe000u;
    p.small = as_uint(x - as_float(p.big));
    return p;
}

#if EMULATE
/* The warp operations below take the work-item's slot of a local exchange area, 6 floats a
 * lane, as a first argument; XS declares it, XA passes it on. */
#define XS         __local float *xw,
#define XA         xw,
#define XCH_FLOATS 6

/* Lane `lane`'s float `i` of the warp's exchange area (xw is this lane's slot). */
#define XCH(lane, i) xw[((lane) - (int)(get_local_id(0) & 31)) * XCH_FLOATS + (i)]

/* d += A B as mma.m16n8k8 computes it from the warp's fragments, with the tensor core's
 * reading of a tf32 operand modelled as truncation of the low 13 bits. */
void mma_tf32(XS float d[4], uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {
    const int lane = (int)(get_local_id(0) & 31), g = lane >> 2, c = lane & 3;
    const uint mine[6] = {a0, a1, a2, a3, b0, b1};
    for (int i = 0; i < 6; i++) XCH(lane, i) = as_float(mine[i] & 0xffffe000u);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = 0; r < 4; r++) {
        const int row = g + 8 * (r >> 1), col = 2 * c + (r & 1);
        float sum = d[r];
        for (int k = 0; k < 8; k++) {
            /* A[row][k]: lane (row % 8, k % 4), register (row >= 8) + 2 (k >= 4); B[k][col]:
             * lane (col, k % 4), register 4 + (k >= 4). */
            const float a = XCH(4 * (row & 7) + (k & 3), (row >> 3) + 2 * (k >> 2));
            const float b = XCH(4 * col + (k & 3), 4 + (k >> 2));
            sum = fma(a, b, sum);
        }
        d[r] = sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

float shfl_xor(XS float x, int mask) {
    const int lane = (int)(get_local_id(0) & 31);
    XCH(lane, 0) = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    const float r = XCH(lane ^ mask, 0);
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

int warp_any(XS int x) {
    const int lane = (int)(get_local_id(0) & 31);
    XCH(lane, 0) = x ? 1.0f : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    int any = 0;
    for (int i = 0; i < 32; i++) any |= XCH(i, 0) != 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    return any;
}

float exp2_approx(float x) { return exp2(x); }
#else
#define XS
#define XA

/* d += A B, one m16n8k8 tf32 product. Not volatile: a pure function of its operands, which the
 * compiler may schedule freely. */
__attribute__((always_inline)) void mma_tf32(float d[4], uint a0, uint a1, uint a2, uint a3,
                                             uint b0, uint b1) {
    __asm__("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* The value of lane (this lane ^ mask). Volatile: every lane of the warp must execute it. */
__attribute__((always_inline)) float shfl_xor(float x, int mask) {
    uint r;
    __asm__ __volatile__("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
                         : "=r"(r)
                         : "r"(as_uint(x)), "r"(mask));
    return as_float(r);
}

/* 1 when x != 0 on any lane of the warp. */
__attribute__((always_inline)) int warp_any(int x) {
    int r;
    __asm__ __volatile__("{\n\t.reg .pred any_p;\n\t"
                         "setp.ne.s32 any_p, %1, 0;\n\t"
                         "vote.sync.any.pred any_p, any_p, 0xffffffff;\n\t"
                         "selp.s32 %0, 1, 0, any_p;\n\t}"
                         : "=r"(r)
                         : "r"(x));
    return r;
}

/* 2^x, one MUFU instruction: 2^-inf = 0, NaN stays NaN; its relative error (2^-22) is far below
 * what the softmax weights can afford. */
__attribute__((always_inline)) float exp2_approx(float x) {
    float y;
    __asm__("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#endif

/* Term `term` of d += a b in 3xTF32: 0 small*big, 1 big*small, 2 big*big. Callers issue one term
 * for several accumulators before the next, so consecutive mma do not wait on each other. */
__attribute__((always_inline)) void mma_term(XS float d[4], const tf32_pair a[4], tf32_pair b0,
                                             tf32_pair b1, int term) {
    if (term == 0)
        mma_tf32(XA d, a[0].small, a[1].small, a[2].small, a[3].small, b0.big, b1.big);
    else if (term == 1)
        mma_tf32(XA d, a[0].big, a[1].big, a[2].big, a[3].big, b0.small, b1.small);
    else
        mma_tf32(XA d, a[0].big, a[1].big, a[2].big, a[3].big, b0.big, b1.big);
}

/* Four columns col .. col + 3 of a row (row_ok: it exists); columns at or past d read as 0. */
__attribute__((always_inline)) float4 load_chunk(__global const float *row_start, int row_ok,
                                                 int col, int d) {
#if VEC
    return (row_ok && col < d) ? *(__global const float4 *)(row_start + col) : (float4)(0.0f);
#else
    float4 r;
    r.x = (row_ok && col < d) ? row_start[col] : 0.0f;
    r.y = (row_ok && col + 1 < d) ? row_start[col + 1] : 0.0f;
    r.z = (row_ok && col + 2 < d) ? row_start[col + 2] : 0.0f;
    r.w = (row_ok && col + 3 < d) ? row_start[col + 3] : 0.0f;
    return r;
#endif
}

/* This work-item's PASSES chunks of a BC-row tile whose rows start at src (rows at or past
 * n_rows read as 0). Chunk tid % CPR of rows tid / CPR + pass * THREADS / CPR: 8 consecutive
 * work-items read 128 consecutive bytes of one row. */
__attribute__((always_inline)) void fetch_tile(float4 r[PASSES], __global const float *src,
                                               long stride, int n_rows, int d, int tid) {
    const int chunk = tid % CPR;
#pragma unroll
    for (int p = 0; p < PASSES; p++) {
        const int row = tid / CPR + p * (THREADS / CPR);
        const int ok = row < n_rows;
        r[p] = load_chunk(src + (ok ? row * stride : 0), ok, 4 * chunk, d);
    }
}

__attribute__((always_inline)) void store_tile(__local float *dst, const float4 r[PASSES],
                                               int tid) {
    const int chunk = tid % CPR;
#pragma unroll
    for (int p = 0; p < PASSES; p++)
        LOCAL4(dst + swizzle(tid / CPR + p * (THREADS / CPR), chunk)) = r[p];
}

/* s = Q K^T for one key tile (K at sK); q_lo / q_hi: the lane's chunks of rows g and g + 8 of
 * each slice, [slice][group u][part]. */
__attribute__((always_inline)) void scores(XS float s[MT][KEY_TILES][4],
                                           const float4 q_lo[MT][GROUPS][2],
                                           const float4 q_hi[MT][GROUPS][2],
                                           __local const float *sK, int lane) {
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < KEY_TILES; nt++)
#pragma unroll
            for (int r = 0; r < 4; r++) s[mt][nt][r] = 0.0f;
#pragma unroll
    for (int u = 0; u < GROUPS; u++) {
#pragma unroll
        for (int part = 0; part < 2; part++) {
            const int chunk = 8 * u + 2 * c + part;
            /* [slice][k-step of the chunk][A register] */
            tf32_pair qa[MT][2][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const float4 lo = q_lo[mt][u][part], hi = q_hi[mt][u][part];
                /* In A register order: k-step 0 (floats 0, 1), then k-step 1 (floats 2, 3). */
                float x[8] = {lo.x, hi.x, lo.y, hi.y, lo.z, hi.z, lo.w, hi.w};
#if !EMULATE
                /* An empty asm that "changes" Q: Q is the same on every tile, and a compiler
                 * would otherwise hoist its split out of the key loop, which doubles the
                 * registers Q holds (and spilled at D = 128). */
                __asm__ __volatile__(""
                                     : "+f"(x[0]), "+f"(x[1]), "+f"(x[2]), "+f"(x[3]), "+f"(x[4]),
                                       "+f"(x[5]), "+f"(x[6]), "+f"(x[7]));
#endif
#pragma unroll
                for (int r = 0; r < 8; r++) qa[mt][r >> 2][r & 3] = split_tf32(x[r]);
            }
            /* Key g of each 8-key tile: floats 2 step and 2 step + 1 are b0 and b1. */
            tf32_pair kf[KEY_TILES][4];
#pragma unroll
            for (int nt = 0; nt < KEY_TILES; nt++) {
                const float4 kv = LOCAL4(sK + swizzle(8 * nt + g, chunk));
                kf[nt][0] = split_tf32(kv.x);
                kf[nt][1] = split_tf32(kv.y);
                kf[nt][2] = split_tf32(kv.z);
                kf[nt][3] = split_tf32(kv.w);
            }
#pragma unroll
            for (int step = 0; step < 2; step++)
#pragma unroll
                for (int term = 0; term < 3; term++)
#pragma unroll
                    for (int mt = 0; mt < MT; mt++)
#pragma unroll
                        for (int nt = 0; nt < KEY_TILES; nt++)
                            mma_term(XA s[mt][nt], qa[mt][step], kf[nt][2 * step],
                                     kf[nt][2 * step + 1], term);
        }
    }
}

/* Scale and mask the scores of one key tile (keys kb ..), fold them into the running max m and
 * sum l (this lane's share) of each row, and add P V (V at sV) into o. masked: the tile crosses
 * the causal diagonal or the end of the keys (callers pass a constant, so that the unmasked
 * instance carries no per-element index arithmetic). */
__attribute__((always_inline)) void update(XS float s[MT][KEY_TILES][4], float o[MT][D_TILES][4],
                                           float m[MT][2], float l[MT][2], __local const float *sV,
                                           int lane, float scale_log2, int masked, int kb, int row0,
                                           int nkv, int causal, int diag) {
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < KEY_TILES; nt++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                float x = s[mt][nt][r] * scale_log2;
                if (masked) {
                    const int key = kb + 8 * nt + 2 * c + (r & 1);
                    const int row = row0 + 16 * mt + g + 8 * (r >> 1);
                    if (key >= nkv || (causal && key > row + diag)) x = -INFINITY;
                }
                s[mt][nt][r] = x;
            }

    /* Row maxima over the four lanes of a group. fmax skips a NaN score, which still reaches l
     * and O through its p. A row with no visible key so far keeps m = -inf and takes its
     * exponents against 0, giving p = 0 rather than NaN. */
    float m_new[MT][2], m_ref[MT][2];
    int new_max = 0;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < KEY_TILES; nt++)
                mx = fmax(mx, fmax(s[mt][nt][2 * i], s[mt][nt][2 * i + 1]));
            mx = fmax(mx, shfl_xor(XA mx, 1));
            mx = fmax(mx, shfl_xor(XA mx, 2));
            m_new[mt][i] = fmax(m[mt][i], mx);
            m_ref[mt][i] = m_new[mt][i] == -INFINITY ? 0.0f : m_new[mt][i];
            new_max |= m_new[mt][i] != m[mt][i];
        }
    /* After the first tiles most tiles raise no max; alpha would be exactly 1. */
    if (warp_any(XA new_max)) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const float alpha = exp2_approx(m[mt][i] - m_ref[mt][i]);
                l[mt][i] *= alpha;
#pragma unroll
                for (int dt = 0; dt < D_TILES; dt++) {
                    o[mt][dt][2 * i] *= alpha;
                    o[mt][dt][2 * i + 1] *= alpha;
                }
            }
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int i = 0; i < 2; i++) m[mt][i] = m_new[mt][i];
#pragma unroll
        for (int nt = 0; nt < KEY_TILES; nt++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const float p = exp2_approx(s[mt][nt][r] - m_ref[mt][r >> 1]);
                s[mt][nt][r] = p;
                l[mt][r >> 1] += p;
            }
    }

    /* O += P V, one 32-column group of d at a time, through a fresh accumulator. */
#pragma unroll
    for (int w = 0; w < GROUPS; w++) {
        float acc[MT][4][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
#pragma unroll
                for (int r = 0; r < 4; r++) acc[mt][e][r] = 0.0f;
#pragma unroll
        for (int t8 = 0; t8 < KEY_TILES; t8++) {
            tf32_pair ap[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int r = 0; r < 4; r++)
                    ap[mt][r] = split_tf32(s[mt][t8][((r & 1) << 1) | (r >> 1)]);
            /* V rows 8 t8 + 2c and the next one, which differ in bit 0 of the swizzle only. */
            const int vrow = 8 * t8 + 2 * c;
            const int off = swizzle(vrow, 8 * w + g);
            const float4 x0 = LOCAL4(sV + off);
            const float4 x1 = LOCAL4(sV + ((off + D) ^ 4));
            tf32_pair b0[4], b1[4];
            b0[0] = split_tf32(x0.x);
            b0[1] = split_tf32(x0.y);
            b0[2] = split_tf32(x0.z);
            b0[3] = split_tf32(x0.w);
            b1[0] = split_tf32(x1.x);
            b1[1] = split_tf32(x1.y);
            b1[2] = split_tf32(x1.z);
            b1[3] = split_tf32(x1.w);
#pragma unroll
            for (int term = 0; term < 3; term++)
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) mma_term(XA acc[mt][e], ap[mt], b0[e], b1[e], term);
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
#pragma unroll
                for (int r = 0; r < 4; r++) o[mt][4 * w + e][r] += acc[mt][e][r];
    }
}

/* The arguments are those of attention_tiled (n_slices is 1 here), so the host sets them alike. */
__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void
attention_nv_tf32x3(__global const float *q, __global const float *k, __global const float *v,
                    __global float *o, __global float *lse, int has_lse, int nq, int nkv, int d,
                    int heads_q, int group, int n_slices, int causal, float q_sign,
                    float scale_log2_abs, long q_sb, long q_sh, long q_sn, long k_sb, long k_sh,
                    long k_sn, long v_sb, long v_sh, long v_sn, long o_sb, long o_sh, long o_sn) {
    __local float4 kv4[2 * STAGE_FLOATS / 4]; /* two stages of [K tile][V tile] */
    __local float *const kv = (__local float *)kv4;
#if EMULATE
    __local float xch[THREADS * XCH_FLOATS];
    __local float *const xw = xch + get_local_id(0) * XCH_FLOATS;
#endif

    const int tid = (int)get_local_id(0);
    const int lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, c = lane & 3;
    /* Causal work-groups near the bottom do the most work: start them first. */
    const int m_block =
        causal ? (int)(get_num_groups(0) - 1 - get_group_id(0)) : (int)get_group_id(0);
    const int h = (int)get_group_id(1);
    const int b = (int)get_group_id(2) / n_slices;
    const int q0 = m_block * BR;
    const int row0 = q0 + 16 * MT * warp; /* first query row of the warp's slices */
    const int diag = nkv - nq;            /* key j is visible to row i iff j <= i + diag */
    const float scale_log2 = q_sign * scale_log2_abs;

    int kv_hi = nkv;
    if (causal) kv_hi = min(kv_hi, min(q0 + BR, nq) + diag); /* past the last row's last key */
    const int n_tiles = kv_hi > 0 ? (kv_hi + BC - 1) / BC : 0;
    /* Tiles reaching past this key need the mask: the end of the keys, or the first key the
     * work-group's first row cannot see. */
    const int mask_from = causal ? min(nkv, q0 + diag + 1) : nkv;

    __global const float *kh = k + (b * k_sb + (h / group) * k_sh);
    __global const float *vh = v + (b * v_sb + (h / group) * v_sh);
    const int warp_active = row0 < nq;

    float4 q_lo[MT][GROUPS][2], q_hi[MT][GROUPS][2];
    {
        __global const float *qh = q + (b * q_sb + h * q_sh);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int r_lo = row0 + 16 * mt + g, r_hi = r_lo + 8;
            __global const float *lo_row = qh + (r_lo < nq ? (long)r_lo * q_sn : 0);
            __global const float *hi_row = qh + (r_hi < nq ? (long)r_hi * q_sn : 0);
#pragma unroll
            for (int u = 0; u < GROUPS; u++)
#pragma unroll
                for (int part = 0; part < 2; part++) {
                    const int col = 4 * (8 * u + 2 * c + part);
                    q_lo[mt][u][part] = load_chunk(lo_row, r_lo < nq, col, d);
                    q_hi[mt][u][part] = load_chunk(hi_row, r_hi < nq, col, d);
                }
        }
    }

    float o_acc[MT][D_TILES][4];
    float m[MT][2], l[MT][2]; /* rows g and g + 8 of each slice: running max (base 2), sum */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int dt = 0; dt < D_TILES; dt++)
#pragma unroll
            for (int r = 0; r < 4; r++) o_acc[mt][dt][r] = 0.0f;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            m[mt][i] = -INFINITY;
            l[mt][i] = 0.0f;
        }
    }

    float4 next[PASSES];
    if (n_tiles > 0) {
        fetch_tile(next, kh, k_sn, nkv, d, tid);
        store_tile(kv, next, tid);
        fetch_tile(next, vh, v_sn, nkv, d, tid);
        store_tile(kv + TILE_FLOATS, next, tid);
    }

    for (int t = 0; t < n_tiles; t++) {
        barrier(CLK_LOCAL_MEM_FENCE); /* tile t is in; every reader of tile t - 1 is done */
        const int kb = t * BC;
        __local const float *sK = kv + (t & 1) * STAGE_FLOATS;
        __local float *nK = kv + ((t + 1) & 1) * STAGE_FLOATS;
        const int has_next = t + 1 < n_tiles;
        const int nkb = kb + BC;
        /* A tile wholly above the diagonal for every row of this warp would leave its state as
         * it is (p = 0, alpha = 1): the warp skips it, but still copies its share of the next. */
        const int skip = !warp_active || (causal && kb > row0 + 16 * MT - 1 + diag);
#if EMULATE
        /* Emulated, every warp computes every tile (its warp operations hold barriers), and the
         * tiles the kernel skips are undone, so that the skips are what is tested. */
        const int compute = 1;
        float o_kept[MT][D_TILES][4], m_kept[MT][2], l_kept[MT][2];
        for (int mt = 0; mt < MT; mt++) {
            for (int dt = 0; dt < D_TILES; dt++)
                for (int r = 0; r < 4; r++) o_kept[mt][dt][r] = o_acc[mt][dt][r];
            for (int i = 0; i < 2; i++) {
                m_kept[mt][i] = m[mt][i];
                l_kept[mt][i] = l[mt][i];
            }
        }
#else
        const int compute = !skip;
#endif

        if (has_next) fetch_tile(next, kh + (long)nkb * k_sn, k_sn, nkv - nkb, d, tid);
        float s[MT][KEY_TILES][4];
        if (compute) scores(XA s, q_lo, q_hi, sK, lane);
        if (has_next) {
            store_tile(nK, next, tid);
            fetch_tile(next, vh + (long)nkb * v_sn, v_sn, nkv - nkb, d, tid);
        }
        if (compute) {
            if (kb + BC > mask_from)
                update(XA s, o_acc, m, l, sK + TILE_FLOATS, lane, scale_log2, 1, kb, row0, nkv,
                       causal, diag);
            else
                update(XA s, o_acc, m, l, sK + TILE_FLOATS, lane, scale_log2, 0, kb, row0, nkv,
                       causal, diag);
        }
        if (has_next) store_tile(nK + TILE_FLOATS, next, tid);
#if EMULATE
        for (int mt = 0; mt < MT && skip; mt++) {
            for (int dt = 0; dt < D_TILES; dt++)
                for (int r = 0; r < 4; r++) o_acc[mt][dt][r] = o_kept[mt][dt][r];
            for (int i = 0; i < 2; i++) {
                m[mt][i] = m_kept[mt][i];
                l[mt][i] = l_kept[mt][i];
            }
        }
#endif
    }

#if !EMULATE /* (emulated, the shuffles below need every work-item) */
    if (!warp_active) return;
#endif
    __global float *oh = o + (b * o_sb + h * o_sh);
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float row_l = l[mt][i];
            row_l += shfl_xor(XA row_l, 1);
            row_l += shfl_xor(XA row_l, 2);
            const int row = row0 + 16 * mt + g + 8 * i;
            if (row >= nq) continue;
            /* l == 0 only when no key was visible: O = 0, LSE = -inf. A NaN l stays NaN. */
            const float inv_l = row_l == 0.0f ? 0.0f : 1.0f / row_l;
            __global float *orow = oh + (long)row * o_sn;
#pragma unroll
            for (int w = 0; w < GROUPS; w++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    /* Registers 2i + e of n-tiles 4w .. 4w + 3: columns col .. col + 3. */
                    const int col = 32 * w + 8 * c + 4 * e;
                    const float4 x =
                        (float4)(o_acc[mt][4 * w][2 * i + e], o_acc[mt][4 * w + 1][2 * i + e],
                                 o_acc[mt][4 * w + 2][2 * i + e], o_acc[mt][4 * w + 3][2 * i + e]) *
                        inv_l;
#if OVEC
                    if (col + 4 <= d) {
                        *(__global float4 *)(orow + col) = x;
                        continue;
                    }
#endif
                    if (col < d) orow[col] = x.x;
                    if (col + 1 < d) orow[col + 1] = x.y;
                    if (col + 2 < d) orow[col + 2] = x.z;
                    if (col + 3 < d) orow[col + 3] = x.w;
                }
            if (has_lse && c == 0)
                lse[((long)b * heads_q + h) * nq + row] =
                    row_l == 0.0f ? -INFINITY : (m[mt][i] + log2(row_l)) * M_LN2_F;
        }
}
