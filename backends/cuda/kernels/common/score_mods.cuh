/*
 * The per-(query, key) part of API v2 in one place for the CUDA kernels, in flashport.h's order:
 * which keys a query sees (window and causal, aligned bottom-right per sequence), then the score
 * from the dot product: scale, softcap, ALiBi, additive bias, and the sink that joins the
 * denominator. Scores leave in the log2 domain (times log2(e)), as online_softmax.cuh takes them.
 */
#ifndef FP_KERNELS_SCORE_MODS_CUH
#define FP_KERNELS_SCORE_MODS_CUH

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "../../kernel_table.h"
#include "dtype.cuh"
#include "online_softmax.cuh"
#if !defined(FLASHPORT_HIP_BUILD) && !defined(__HIP_PLATFORM_AMD__)
#include "ptx.cuh"
#endif

#define FP_WINDOW_MAX (1 << 30)

struct fp_score_mods {
    float scale;
    float softcap; /* 0: off */
    flashport_alibi alibi;
    const float *alibi_slopes;
    const void *bias; /* NULL: no bias */
    flashport_dtype bias_dtype;
    int64_t bias_batch, bias_head, bias_query, bias_key;
    const float *sinks; /* NULL: no sinks */
    int heads_q;
    int causal;
    /* -1: unbounded. Wider windows are clamped to FP_WINDOW_MAX, which reaches past every
     * sequence a kernel takes (fp_attn_sizes_fit keeps lengths below 2^30), so the bounds of
     * fp_visible_keys stay in int arithmetic. */
    int window_left, window_right;
};

static inline fp_score_mods fp_score_mods_make(const fp_problem *p, const fp_args *a) {
    fp_score_mods m;
    m.scale = p->scale;
    m.softcap = p->softcap;
    m.alibi = p->alibi;
    m.alibi_slopes = (const float *)a->alibi_slopes;
    m.bias = p->bias.enabled ? a->bias : NULL;
    m.bias_dtype = p->bias.dtype;
    m.bias_batch = p->bias.batch;
    m.bias_head = p->bias.head;
    m.bias_query = p->bias.query;
    m.bias_key = p->bias.key;
    m.sinks = p->sinks ? (const float *)a->sinks : NULL;
    m.heads_q = (int)p->heads_q;
    m.causal = p->causal;
    m.window_left = (int)(p->window_left > FP_WINDOW_MAX ? FP_WINDOW_MAX : p->window_left);
    m.window_right = (int)(p->window_right > FP_WINDOW_MAX ? FP_WINDOW_MAX : p->window_right);
    return m;
}

/* Keys [*lo, *hi) that query i of a sequence with nq queries and nkv keys sees. With lengths
 * below 2^30 and windows at most FP_WINDOW_MAX no sum leaves int. */
__device__ __forceinline__ void fp_visible_keys(const fp_score_mods &m, int i, int nq, int nkv,
                                                int *lo, int *hi) {
    const int diag = i + nkv - nq;
    const int right = m.causal ? 0 : m.window_right, left = m.window_left;
    const int first = left < 0 || left >= diag ? 0 : diag - left;
    const int last = right < 0 || right > nkv - 1 - diag ? nkv - 1 : diag + right;
    *lo = first;
    *hi = last < first ? first : last + 1;
}

/* The keys that query rows first .. last of a sequence see, cut at key_end (the sequence's or
 * a split's end): some row sees [lo, hi), where a kernel's key tiles run; every row sees
 * [full_lo, full_hi), where tiles need no mask. Each row's keys move right with the row, so the
 * first and the last row decide. */
struct fp_span_keys {
    int lo, hi, full_lo, full_hi;
};

__device__ __forceinline__ fp_span_keys fp_visible_span(const fp_score_mods &m, int first, int last,
                                                        int nq, int nkv, int key_end) {
    fp_span_keys k;
    fp_visible_keys(m, first, nq, nkv, &k.lo, &k.full_hi);
    fp_visible_keys(m, last, nq, nkv, &k.full_lo, &k.hi);
    k.hi = min(k.hi, key_end);
    k.full_hi = min(k.full_hi, key_end);
    return k;
}

/* The same keys as a band around the aligned diagonal, for per-score tests: query i sees key j
 * (0 <= j < nkv) exactly when dmin <= j - i <= dmax, which is one subtraction and two compares
 * where fp_visible_keys clamps per row. */
struct fp_key_band {
    int dmin, dmax;
};

__device__ __forceinline__ fp_key_band fp_visible_band(const fp_score_mods &m, int nq, int nkv) {
    const int diag0 = nkv - nq;
    const int right = m.causal ? 0 : m.window_right;
    fp_key_band band;
    band.dmin = m.window_left < 0 ? INT_MIN : diag0 - m.window_left;
    band.dmax = right < 0 ? INT_MAX : diag0 + right;
    return band;
}

__device__ __forceinline__ bool fp_in_band(const fp_key_band &band, int i, int j) {
    return j - i >= band.dmin && j - i <= band.dmax;
}

/* Whether any modifier beyond the scale applies: kernels take the plain path when not. */
__device__ __forceinline__ bool fp_score_mods_any(const fp_score_mods &m) {
    return m.softcap > 0.0f || m.alibi != FLASHPORT_ALIBI_NONE || m.bias != NULL;
}

/* The parts of a score in the log2 domain, for kernels that apply each modifier to a whole tile
 * of scores at once (one uniform branch per modifier and tile instead of one per score).
 * fp_score_log2 is their sum. */

/* How a kernel evaluates softcap * tanh(x / softcap), by the accuracy its inputs leave room for.
 * EXACT: tanhf, for kernels of f32 accuracy. EXP2: softcap - 2 softcap / (1 + e^(2x / softcap)),
 * one exponential and one fast reciprocal instead of tanhf's long sequence, within about
 * 1e-6 * softcap of the exact value: far below the rounding of f16 inputs and of P in f16.
 * TANH_APPROX: the hardware's tanh.approx.f32, one MUFU op instead of two (relative error about
 * 2^-11 of tanh, so at most softcap * 2^-11 in the logit); for bf16 kernels, where P itself is
 * rounded to 8 bits (2^-9) before P V and the tolerance is 1e-2. Where the hardware has no
 * tanh.approx (HIP builds) it is EXP2. All take +-inf and NaN where tanh does. */
enum fp_softcap_math { FP_SOFTCAP_EXACT, FP_SOFTCAP_EXP2, FP_SOFTCAP_TANH_APPROX };

/* The softcap math of the 16-bit tensor-core forwards, by input type: bf16 rounds P to 8 bits,
 * below tanh.approx's error; f16 keeps 11 and takes the EXP2 form. */
template <typename T> struct fp_softcap_math_of;
template <> struct fp_softcap_math_of<gpuHalf> {
    static constexpr fp_softcap_math value = FP_SOFTCAP_EXP2;
};
template <> struct fp_softcap_math_of<gpuBFloat16> {
    static constexpr fp_softcap_math value = FP_SOFTCAP_TANH_APPROX;
};

/* out * tanh(scale * dot / softcap) for a softcap > 0. out = softcap * log2(e) gives the capped
 * score in the log2 domain; a kernel that applies that factor later, in an FMA it does anyway,
 * passes 1. */
template <fp_softcap_math MATH>
__device__ __forceinline__ float fp_softcap_times(const fp_score_mods &m, float dot, float out) {
    if (MATH == FP_SOFTCAP_EXACT) return out * tanhf(m.scale * dot / m.softcap);
#if defined(FLASHPORT_HIP_BUILD) || defined(__HIP_PLATFORM_AMD__)
    const float x = dot * (2.0f * FP_LOG2E * m.scale / m.softcap);
    const float e = exp2f(x);
#else
    if (MATH == FP_SOFTCAP_TANH_APPROX) return out * fp_tanh_approx(dot * (m.scale / m.softcap));
    const float x = dot * (2.0f * FP_LOG2E * m.scale / m.softcap);
    const float e = fp_exp2_approx(x);
#endif
    return out - 2.0f * out * __fdividef(1.0f, 1.0f + e);
}

/* scale * dot, through the softcap when there is one, in the log2 domain. */
template <fp_softcap_math MATH = FP_SOFTCAP_EXACT>
__device__ __forceinline__ float fp_scaled_log2(const fp_score_mods &m, float dot) {
    if (!(m.softcap > 0.0f)) return m.scale * FP_LOG2E * dot;
    return fp_softcap_times<MATH>(m, dot, m.softcap * FP_LOG2E);
}

/* ALiBi's slope of (batch b, head h) in the log2 domain: the score falls by it per key of
 * distance from the aligned diagonal. */
__device__ __forceinline__ float fp_alibi_slope_log2(const fp_score_mods &m, int b, int h) {
    const int idx = m.alibi == FLASHPORT_ALIBI_PER_BATCH_HEAD ? b * m.heads_q + h : h;
    return m.alibi_slopes[idx] * FP_LOG2E;
}

__device__ __forceinline__ float fp_alibi_log2(float slope_log2, int i, int j, int nq, int nkv) {
    return -slope_log2 * fabsf((float)(i + nkv - nq - j));
}

/* Where the bias of (b, h) starts, in elements; entry (i, j) is bias_query * i + bias_key * j
 * further on. */
__device__ __forceinline__ int64_t fp_bias_head_offset(const fp_score_mods &m, int b, int h) {
    return (int64_t)b * m.bias_batch + (int64_t)h * m.bias_head;
}

/* The additive bias of (b, h, i, j) in the log2 domain, read as B (m.bias_dtype's type) from
 * the head's offset: for kernels that settle the type once for a whole tile. */
template <typename B>
__device__ __forceinline__ float fp_bias_log2_as(const fp_score_mods &m, int64_t head_offset, int i,
                                                 int j) {
    return FP_LOG2E *
           fp_to_f32(static_cast<const B *>(
               m.bias)[head_offset + (int64_t)i * m.bias_query + (int64_t)j * m.bias_key]);
}

__device__ __forceinline__ float fp_bias_log2(const fp_score_mods &m, int b, int h, int i, int j) {
    const int64_t at = fp_bias_head_offset(m, b, h);
    switch (m.bias_dtype) {
    case FLASHPORT_F16: return fp_bias_log2_as<gpuHalf>(m, at, i, j);
    case FLASHPORT_BF16: return fp_bias_log2_as<gpuBFloat16>(m, at, i, j);
    default: return fp_bias_log2_as<float>(m, at, i, j);
    }
}

/* The tensor-core forwards can add the bias before the dot product instead of after it: with
 * the accumulators of S = Q K^T started at bias / scale instead of 0, the scale step that
 * follows yields scale q.k + bias (ALiBi's FMA and the mask after it unchanged). The bias then
 * takes no registers beyond the accumulators, and its loads are issued while the block waits
 * for the tile, where reading it after the dot product kept two tiles of values live or formed
 * a 64-bit address a score. Softcap applies to scale q.k alone, so with softcap the bias is
 * added after it; a scale whose reciprocal is not a finite nonzero float takes that path too. */
__device__ __forceinline__ bool fp_bias_in_accumulators(const fp_score_mods &m) {
    const float inv = 1.0f / m.scale;
    return m.bias && !(m.softcap > 0.0f) && isfinite(inv) && inv != 0.0f;
}

/* bias / scale as an accumulator's start (inv_scale = 1 / scale). A finite bias whose quotient
 * overflows starts at the largest float of its sign, so that a row masked with -FLT_MAX
 * everywhere still gets equal scores (and the uniform softmax the definition gives); infinite
 * and NaN biases pass through. The Hopper forward takes this form; the mma.sync forward
 * multiplies alone (its biased tiles ran 6-15% faster so, bench/results), and there, as in the
 * other kernels' base-2 scores, a bias near -FLT_MAX overflows and masks like -inf. */
__device__ __forceinline__ float fp_bias_over_scale(float bias, float inv_scale) {
    const float y = bias * inv_scale;
    return isfinite(y) || !isfinite(bias) ? y : copysignf(FLT_MAX, y);
}

/* The bias along one row of a thread's accumulators, for the tensor-core layouts (mma.sync's
 * and wgmma's), where a thread holds pairs of adjacent keys 8 apart: keys c + 8 n and
 * c + 8 n + 1 from its first key c. The row's address is formed once a tile, and each pair is
 * one load of two elements where every row's pairs are aligned (fp_bias_pairs, PAIRS), two
 * loads otherwise. Reads are unguarded: for tiles whose keys every real row sees, the row
 * clamped to a real one (fp_bias_row_clamped). */
template <typename B> struct fp_bias_row {
    struct __align__(2 * sizeof(B)) pair_t {
        B v[2];
    };
    const B *p; /* the entry of (row, first key) */
    int64_t key_stride;

    __device__ __forceinline__ void init(const fp_score_mods &m, int64_t head_offset, int row,
                                         int key) {
        key_stride = m.bias_key;
        p = static_cast<const B *>(m.bias) + head_offset + (int64_t)row * m.bias_query +
            (int64_t)key * key_stride;
    }

    /* The bias of keys c + 8 n and c + 8 n + 1. */
    template <bool PAIRS> __device__ __forceinline__ void pair(int n, float *b0, float *b1) const {
        if (PAIRS) {
            const pair_t q = *reinterpret_cast<const pair_t *>(p + 8 * n);
            *b0 = fp_to_f32(q.v[0]);
            *b1 = fp_to_f32(q.v[1]);
        } else {
            *b0 = fp_to_f32(p[8 * n * key_stride]);
            *b1 = fp_to_f32(p[(8 * n + 1) * key_stride]);
        }
    }
};

/* Whether every row's pairs of keys from a thread's first key `key` (even, as are the layouts'
 * pair offsets) can be read a load at a time: keys contiguous, rows an even number of entries
 * apart (or one row for all) and the first row's entry aligned to a pair. The caller tests
 * this once a tile and runs its loop for one form (fp_bias_row::pair<PAIRS>): a test per
 * pair or per row lets the compiler issue both forms' loads and addresses, predicated, for
 * every pair. */
template <typename B>
__device__ __forceinline__ bool fp_bias_pairs(const fp_score_mods &m, int64_t head_offset,
                                              int key) {
    const B *const p = static_cast<const B *>(m.bias) + head_offset + key;
    return m.bias_key == 1 && m.bias_query % 2 == 0 &&
           (uintptr_t)p % sizeof(typename fp_bias_row<B>::pair_t) == 0;
}

/* Rows past the sequence's end (computed, never stored) read the last real row's bias. */
__device__ __forceinline__ int fp_bias_row_clamped(int row, int nq) {
    return row < nq ? row : nq - 1;
}

/* The log2-domain score of query i (head h, batch b) against key j from their dot product. */
__device__ __forceinline__ float fp_score_log2(const fp_score_mods &m, float dot, int b, int h,
                                               int i, int j, int nq, int nkv) {
    float s = fp_scaled_log2(m, dot);
    if (m.alibi != FLASHPORT_ALIBI_NONE)
        s += fp_alibi_log2(fp_alibi_slope_log2(m, b, h), i, j, nq, nkv);
    if (m.bias) s += fp_bias_log2(m, b, h, i, j);
    return s;
}

/* The sink logit of head h in the log2 domain, or -inf without sinks. */
__device__ __forceinline__ float fp_sink_log2(const fp_score_mods &m, int h) {
    return m.sinks ? m.sinks[h] * FP_LOG2E : -INFINITY;
}

/* Folds head h's sink, a key with a zero value, into a row's running max *row_m (log2 domain)
 * and sum *row_l, and returns the factor the row's output accumulators take. With split keys
 * only one split may count it. A NaN sink makes the sum NaN; a row that saw no key gets
 * l = 1 at m = sink (O = 0, LSE = sink). */
__device__ __forceinline__ float fp_sink_fold(const fp_score_mods &m, int h, float *row_m,
                                              float *row_l) {
    const float sink = fp_sink_log2(m, h);
    const float top = fmaxf(*row_m, sink); /* drops a NaN sink, which reaches l below */
    const float base = top == -INFINITY ? 0.0f : top;
    const float keep = *row_m == -INFINITY ? 0.0f : exp2f(*row_m - base);
    *row_l = *row_l * keep + exp2f(sink - base);
    *row_m = top;
    return keep;
}

#endif /* FP_KERNELS_SCORE_MODS_CUH */
