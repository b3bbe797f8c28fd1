/*
 * Four-element (float4) access to the problem's tensors, and the block shape and steps shared by
 * ladder steps 6 and 7 (transposed_smem, double_buffered): they differ only in how loads overlap
 * compute, so the Q/K chunk staging, the softmax step, the P.V product and the epilogue live here
 * once. Step 5 (float4_loads) uses the four-element access only.
 *
 * Block shape of steps 6 and 7: TX x TY threads (tx fastest), one block per (query tile of BQ
 * rows, column tile of BW = TX*RW output columns, batch*head). Each thread owns RQ query rows
 * (ty*RQ ...) of the block, RK consecutive keys of each key tile for the scores (tx*RK ...) and
 * RW output columns: for g < RW/4 the four columns g*4*TX + tx*4 ..., so that the TX lanes of a
 * row group read one contiguous run of shared memory per float4. A row's softmax statistics
 * live in the TX lanes of its row group, reduced with shuffles across TX consecutive lanes.
 *
 * Tiling the output columns recomputes the scores once per column tile; it buys blocks when
 * B*H and N are small (the write-up's shape has one head) at the price of that extra work, so
 * RW grows with d to keep the number of column tiles small.
 */
#ifndef FP_KERNELS_VECTOR_TILES_CUH
#define FP_KERNELS_VECTOR_TILES_CUH

#include "../common/attention_args.cuh"
#include "../common/dtype.cuh"
#include "../common/online_softmax.cuh"
#include "../common/warp_reduce.cuh"

namespace fp_vt {

constexpr int TX = 16; /* lanes of a row group: one row's keys and columns */
constexpr int TY = 8;
constexpr int THREADS = TX * TY;
constexpr int RQ = 4;        /* query rows per thread */
constexpr int RK = 4;        /* keys per thread per key tile */
constexpr int BQ = TY * RQ;  /* 32 query rows per block */
constexpr int BK = TX * RK;  /* 64 keys per key tile */
constexpr int BD = 32;       /* head-dim chunk of Q and K staged at a time */
constexpr int VK = 16;       /* keys of V staged at a time */
constexpr int P_STRIDE = BQ + 4; /* P staged transposed, [BK][P_STRIDE]: float4 over rows */

static_assert(TX <= FP_WARP_SIZE && FP_WARP_SIZE % TX == 0, "a row group must sit in one warp");

/* Output columns per thread for head dimension d: as few column tiles as the registers allow. */
static inline int cols_per_thread(int64_t d) { return d <= 64 ? 4 : (d <= 128 ? 8 : 16); }

/* Four consecutive elements as floats; the pointer is aligned to four elements. */
template <typename T> struct alignas(4 * sizeof(T)) vec4 {
    T v[4];
};

template <typename T> __device__ __forceinline__ float4 load4(const T *p) {
    vec4<T> x = *reinterpret_cast<const vec4<T> *>(p);
    return make_float4(fp_to_f32(x.v[0]), fp_to_f32(x.v[1]), fp_to_f32(x.v[2]),
                       fp_to_f32(x.v[3]));
}

template <typename T> __device__ __forceinline__ void store4(T *p, float4 f) {
    vec4<T> x;
    x.v[0] = fp_from_f32<T>(f.x);
    x.v[1] = fp_from_f32<T>(f.y);
    x.v[2] = fp_from_f32<T>(f.z);
    x.v[3] = fp_from_f32<T>(f.w);
    *reinterpret_cast<vec4<T> *>(p) = x;
}

/* Elements col .. col+3 of one row (row_ok: the row exists), zero past the end of the row or
 * for a missing row, so partial tiles read nothing outside the tensor. vec: d and the strides
 * are multiples of 4 and the tensor is aligned, so one vector load serves. */
template <typename T>
__device__ __forceinline__ float4 load4_guarded(const T *row, bool row_ok, int col, int d,
                                                bool vec) {
    float4 r = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (!row_ok) return r;
    if (vec) {
        if (col < d) r = load4(row + col);
    } else {
        if (col < d) r.x = fp_to_f32(row[col]);
        if (col + 1 < d) r.y = fp_to_f32(row[col + 1]);
        if (col + 2 < d) r.z = fp_to_f32(row[col + 2]);
        if (col + 3 < d) r.w = fp_to_f32(row[col + 3]);
    }
    return r;
}

/* The per-thread state of one block across its key tiles. */
template <int RW> struct tile_state {
    float s[RQ][RK];  /* scores of the current key tile */
    float o[RQ][RW];  /* unnormalised output: o[i][g*4+e] is row ty*RQ+i, column g*4*TX+tx*4+e */
    fp_softmax_row row[RQ];
};

template <int RW> __device__ __forceinline__ void start_state(tile_state<RW> &t) {
#pragma unroll
    for (int i = 0; i < RQ; ++i) {
        t.row[i] = fp_softmax_start();
#pragma unroll
        for (int c = 0; c < RW; ++c) t.o[i][c] = 0.0f;
    }
}

template <int RW> __device__ __forceinline__ void clear_scores(tile_state<RW> &t) {
#pragma unroll
    for (int i = 0; i < RQ; ++i)
#pragma unroll
        for (int j = 0; j < RK; ++j) t.s[i][j] = 0.0f;
}

/*
 * Online-softmax step on a finished score tile: masks keys past Nkv and (causal) past each row's
 * diagonal, folds the tile maximum into each row, rescales the output accumulators, and writes
 * P transposed to ps ([BK][P_STRIDE]) for the P.V product. The caller's barrier publishes ps.
 */
template <int RW>
__device__ __forceinline__ void softmax_step(tile_state<RW> &t, const fp_attn_args &a, int row0,
                                             int key0, float *ps) {
    const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
    float p[RQ][RK];
#pragma unroll
    for (int i = 0; i < RQ; ++i) {
        int keys = fp_visible_keys(a, row0 + ty * RQ + i);
        float tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < RK; ++j) {
            int key = key0 + tx * RK + j;
            float s = key < keys ? t.s[i][j] * a.scale_log2 : -INFINITY;
            p[i][j] = s;
            tile_max = fmaxf(tile_max, s);
        }
        tile_max = fp_group_max<TX>(tile_max);
        float alpha = fp_softmax_advance(t.row[i], tile_max);
        float base = fp_softmax_base(t.row[i]);
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < RK; ++j) {
            p[i][j] = exp2f(p[i][j] - base);
            sum += p[i][j];
        }
        fp_softmax_add(t.row[i], fp_group_sum<TX>(sum));
#pragma unroll
        for (int c = 0; c < RW; ++c) t.o[i][c] *= alpha;
    }
    static_assert(RQ == 4, "P is written as one float4 of rows per key");
#pragma unroll
    for (int j = 0; j < RK; ++j)
        *reinterpret_cast<float4 *>(&ps[(tx * RK + j) * P_STRIDE + ty * RQ]) =
            make_float4(p[0][j], p[1][j], p[2][j], p[3][j]);
}

/*
 * One BD-wide chunk of the head dimension of Q (BQ rows) and K (BK keys), stored transposed in
 * shared memory, qs [BD][QT_STRIDE] and ks [BD][KT_STRIDE], so that a thread reads its RQ rows
 * (RK keys) at one depth as a single float4, broadcast across the row group. Slot s of a chunk
 * maps to row 16*(s/128) + s%16 and float4 column 2*((s/32)%4) + (s/16)%2: each warp reads two
 * float4 of sixteen rows (whole 32-byte sectors) and its transposed stores, with row strides
 * of 4 mod 32 words, fall on 32 different banks.
 */
constexpr int QT_STRIDE = BQ + 4;
constexpr int KT_STRIDE = BK + 4;
constexpr int QK_CHUNK_FLOATS = BD * (QT_STRIDE + KT_STRIDE);
static_assert(BD == 32, "the slot mapping covers eight float4 columns");

struct qk_chunk {
    static constexpr int Q_PER_THREAD = BQ * BD / 4 / THREADS;
    static constexpr int K_PER_THREAD = BK * BD / 4 / THREADS;
    float4 q[Q_PER_THREAD], k[K_PER_THREAD];
};

__device__ __forceinline__ int chunk_row(int slot) { return 16 * (slot >> 7) + (slot & 15); }
__device__ __forceinline__ int chunk_col4(int slot) {
    return 2 * ((slot >> 5) & 3) + ((slot >> 4) & 1);
}

template <typename T>
__device__ __forceinline__ void fetch_qk(qk_chunk &c, const fp_attn_head<T> &H,
                                         const fp_attn_args &a, int row0, int key0, int d0,
                                         bool vec_q, bool vec_k) {
#pragma unroll
    for (int n = 0; n < qk_chunk::Q_PER_THREAD; ++n) {
        int slot = threadIdx.x + n * THREADS, row = row0 + chunk_row(slot);
        bool ok = row < a.nq;
        c.q[n] = load4_guarded(ok ? H.q + row * a.qs.seq : H.q, ok, d0 + 4 * chunk_col4(slot),
                               a.d, vec_q);
    }
#pragma unroll
    for (int n = 0; n < qk_chunk::K_PER_THREAD; ++n) {
        int slot = threadIdx.x + n * THREADS, key = key0 + chunk_row(slot);
        bool ok = key < a.nkv;
        c.k[n] = load4_guarded(ok ? H.k + key * a.ks.seq : H.k, ok, d0 + 4 * chunk_col4(slot),
                               a.d, vec_k);
    }
}

__device__ __forceinline__ void store_transposed(float *dst, int stride, int slot, float4 f) {
    float *p = dst + 4 * chunk_col4(slot) * stride + chunk_row(slot);
    p[0] = f.x;
    p[stride] = f.y;
    p[2 * stride] = f.z;
    p[3 * stride] = f.w;
}

/* chunk holds QK_CHUNK_FLOATS floats: qs first, then ks. */
__device__ __forceinline__ void commit_qk(const qk_chunk &c, float *chunk) {
#pragma unroll
    for (int n = 0; n < qk_chunk::Q_PER_THREAD; ++n)
        store_transposed(chunk, QT_STRIDE, threadIdx.x + n * THREADS, c.q[n]);
#pragma unroll
    for (int n = 0; n < qk_chunk::K_PER_THREAD; ++n)
        store_transposed(chunk + BD * QT_STRIDE, KT_STRIDE, threadIdx.x + n * THREADS, c.k[n]);
}

/* s += Q chunk . K chunk^T for the thread's RQ x RK scores. */
template <int RW> __device__ __forceinline__ void qk_step(tile_state<RW> &t, const float *chunk) {
    const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
    const float *qs = chunk, *ks = chunk + BD * QT_STRIDE;
#pragma unroll
    for (int dd = 0; dd < BD; ++dd) {
        float4 q = *reinterpret_cast<const float4 *>(&qs[dd * QT_STRIDE + ty * RQ]);
        float4 k = *reinterpret_cast<const float4 *>(&ks[dd * KT_STRIDE + tx * RK]);
        float qr[RQ] = {q.x, q.y, q.z, q.w}, kr[RK] = {k.x, k.y, k.z, k.w};
#pragma unroll
        for (int i = 0; i < RQ; ++i)
#pragma unroll
            for (int j = 0; j < RK; ++j) t.s[i][j] = fmaf(qr[i], kr[j], t.s[i][j]);
    }
}

/* Global loads of VK keys x BW columns of V, into registers (fetch) and then shared memory,
 * row-major [VK][BW] (commit): split so that a pipelined kernel can put compute between them. */
template <int RW> struct v_chunk {
    static constexpr int BW = TX * RW;
    static constexpr int PER_THREAD = VK * BW / 4 / THREADS;
    float4 r[PER_THREAD];
};

template <typename T, int RW>
__device__ __forceinline__ void fetch_v(v_chunk<RW> &c, const T *v, int64_t v_seq,
                                        const fp_attn_args &a, int key0, int col0, bool vec) {
    constexpr int BW = v_chunk<RW>::BW;
#pragma unroll
    for (int n = 0; n < v_chunk<RW>::PER_THREAD; ++n) {
        int slot = threadIdx.x + n * THREADS;
        int r = slot / (BW / 4), col = col0 + (slot % (BW / 4)) * 4;
        int key = key0 + r;
        bool ok = key < a.nkv;
        c.r[n] = load4_guarded(ok ? v + key * v_seq : v, ok, col, a.d, vec);
    }
}

template <int RW> __device__ __forceinline__ void commit_v(const v_chunk<RW> &c, float *vs) {
    constexpr int BW = v_chunk<RW>::BW;
#pragma unroll
    for (int n = 0; n < v_chunk<RW>::PER_THREAD; ++n) {
        int slot = threadIdx.x + n * THREADS;
        *reinterpret_cast<float4 *>(&vs[(slot / (BW / 4)) * BW + (slot % (BW / 4)) * 4]) = c.r[n];
    }
}

/*
 * o += P[:, kv0 .. kv0+VK) . V chunk, from ps ([BK][P_STRIDE]) and vs ([VK][BW]); key0 is the
 * absolute index of key kv0. GUARDED skips, per row, the keys that row may not see: their P is
 * 0, but their V may hold a NaN and 0 * NaN would leak it into the row. Chunks every row of the
 * block sees in full (all but those on the causal diagonal or at the end of Nkv) go unguarded.
 */
template <int RW, bool GUARDED>
__device__ __forceinline__ void pv_step(tile_state<RW> &t, const float *ps, const float *vs,
                                        int kv0, const fp_attn_args &a, int row0, int key0) {
    constexpr int BW = TX * RW;
    const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
    int keys[RQ];
#pragma unroll
    for (int i = 0; i < RQ; ++i) keys[i] = GUARDED ? fp_visible_keys(a, row0 + ty * RQ + i) : 0;
#pragma unroll
    for (int kk = 0; kk < VK; ++kk) {
        float4 p = *reinterpret_cast<const float4 *>(&ps[(kv0 + kk) * P_STRIDE + ty * RQ]);
        float pr[RQ] = {p.x, p.y, p.z, p.w};
#pragma unroll
        for (int g = 0; g < RW / 4; ++g) {
            float4 v = *reinterpret_cast<const float4 *>(&vs[kk * BW + g * 4 * TX + tx * 4]);
#pragma unroll
            for (int i = 0; i < RQ; ++i) {
                if (GUARDED && key0 + kk >= keys[i]) continue;
                t.o[i][g * 4 + 0] = fmaf(pr[i], v.x, t.o[i][g * 4 + 0]);
                t.o[i][g * 4 + 1] = fmaf(pr[i], v.y, t.o[i][g * 4 + 1]);
                t.o[i][g * 4 + 2] = fmaf(pr[i], v.z, t.o[i][g * 4 + 2]);
                t.o[i][g * 4 + 3] = fmaf(pr[i], v.w, t.o[i][g * 4 + 3]);
            }
        }
    }
}

/* The P.V step for the V chunk at tile offset kv0 (absolute key key0), guarded only where some
 * row of the block cannot see the whole chunk. */
template <int RW>
__device__ __forceinline__ void pv_chunk(tile_state<RW> &t, const float *ps, const float *vs,
                                         int kv0, const fp_attn_args &a, int row0, int key0) {
    if (key0 + VK <= fp_visible_keys(a, row0))
        pv_step<RW, false>(t, ps, vs, kv0, a, row0, key0);
    else
        pv_step<RW, true>(t, ps, vs, kv0, a, row0, key0);
}

/* Normalises and writes the thread's rows and columns of O, and (first column tile) the LSE. */
template <typename T, int RW>
__device__ __forceinline__ void write_output(const tile_state<RW> &t, const fp_attn_args &a,
                                             const fp_attn_head<T> &H, int row0, int col0,
                                             bool vec_o) {
    const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
#pragma unroll
    for (int i = 0; i < RQ; ++i) {
        int row = row0 + ty * RQ + i;
        if (row >= a.nq) continue;
        float inv = fp_softmax_inv_sum(t.row[i]);
        T *o = H.o + row * a.os.seq;
#pragma unroll
        for (int g = 0; g < RW / 4; ++g) {
            int col = col0 + g * 4 * TX + tx * 4;
            float4 f = make_float4(t.o[i][g * 4] * inv, t.o[i][g * 4 + 1] * inv,
                                   t.o[i][g * 4 + 2] * inv, t.o[i][g * 4 + 3] * inv);
            if (vec_o) {
                if (col < a.d) store4(o + col, f);
            } else {
                if (col < a.d) o[col] = fp_from_f32<T>(f.x);
                if (col + 1 < a.d) o[col + 1] = fp_from_f32<T>(f.y);
                if (col + 2 < a.d) o[col + 2] = fp_from_f32<T>(f.z);
                if (col + 3 < a.d) o[col + 3] = fp_from_f32<T>(f.w);
            }
        }
        if (H.lse && col0 == 0 && tx == 0) H.lse[row] = fp_softmax_lse(t.row[i]);
    }
}

/* Host: whether a tensor allows four-element vector access (strides and pointer aligned). */
static inline bool tensor_vec4(const void *ptr, const flashport_strides &s, size_t elem) {
    return s.batch % 4 == 0 && s.head % 4 == 0 && s.seq % 4 == 0 &&
           (uintptr_t)ptr % (4 * elem) == 0;
}

/* Host: launches kernel<T, RW> of step 6 or 7 on the grid convention of attention_args.cuh
 * (query tiles, column tiles, batch*heads), with the tensors' vector-access flags. */
typedef void (*tile_kernel)(fp_attn_args, bool, bool, bool, bool);

template <typename T, int RW>
static gpuError_t launch_tiles(const fp_gpu_launch *L, tile_kernel kernel) {
    const fp_attn_args a = fp_attn_args_make(L);
    const dim3 grid((unsigned)((a.nq + BQ - 1) / BQ), (unsigned)((a.d + TX * RW - 1) / (TX * RW)),
                    (unsigned)(L->p.batch * L->p.heads_q));
    const bool vec = a.d % 4 == 0;
    kernel FP_GPU_LAUNCH(grid, THREADS, 0, L->stream)(
        a, vec && tensor_vec4(L->q, L->p.q, sizeof(T)), vec && tensor_vec4(L->k, L->p.k, sizeof(T)),
        vec && tensor_vec4(L->v, L->p.v, sizeof(T)), vec && tensor_vec4(L->o, L->p.o, sizeof(T)));
    return gpuGetLastError();
}

/* Host: the support check and the launch of the instantiation for RW = cols_per_thread(d), which
 * both derive from the problem. KERNELS::get<T, RW>() returns a kernel of the family. Both have
 * the variant table's signatures, so that a step's entry names them directly; the family needs
 * nothing of the device beyond the grid limits. */
static inline int tiles_supports(const fp_problem *p, const fp_gpu_device_props *props,
                                 fp_gpu_kernel_params *params, char *why, size_t why_len) {
    (void)props;
    (void)params;
    return fp_attn_grid_fits(p, TX * cols_per_thread(p->head_dim), why, why_len);
}

template <class KERNELS> static gpuError_t tiles_launch(const fp_gpu_launch *L) {
    gpuError_t err = gpuSuccess;
    switch (cols_per_thread(L->p.head_dim)) {
    case 4:
        FP_DISPATCH_DTYPE(L->p.dtype, T,
                          err = launch_tiles<T, 4>(L, KERNELS::template get<T, 4>()));
        break;
    case 8:
        FP_DISPATCH_DTYPE(L->p.dtype, T,
                          err = launch_tiles<T, 8>(L, KERNELS::template get<T, 8>()));
        break;
    default:
        FP_DISPATCH_DTYPE(L->p.dtype, T,
                          err = launch_tiles<T, 16>(L, KERNELS::template get<T, 16>()));
        break;
    }
    return err;
}

} /* namespace fp_vt */

#endif /* FP_KERNELS_VECTOR_TILES_CUH */
