/*
 * AVX512-BF16 micro-kernels for bf16 inputs: both products of the tile path on vdpbf16ps
 * (bf16_pair_kernels.h); the online softmax, the modifiers, the loads and stores of rows are
 * simd_kernels.h's float32 code on AVX-512F (simd_avx512.h). This file alone is compiled with
 * -mavx512bf16 (and -mavx512bw for 16-bit lane stores); the planner selects it only for bf16
 * Q/K/V after cpuid said the CPU has AVX512-BF16 and AVX512BW and the OS saves ZMM state.
 */
#define SIMD_NAME         avx512bf16
#define SIMD_NAME_STR     "avx512bf16"
#define SIMD_OWN_PRODUCTS 1

#include "simd_avx512.h"

#include "simd_kernels.h"

#include "bf16_pair_kernels.h"

#include "decode_bf16_kernels.h"

/* The backward pass takes float32 operands: its entries are the AVX-512F kernels compiled here
 * (the planner does not send it to this variant). The decode path's scores of bf16 K are dot
 * products (decode_bf16_kernels.h); its P V widens V to float32, as P is float32. */
const cs_kernel_ops cs_kernels_avx512bf16 = {
    .name = SIMD_NAME_STR,
    .load_row = SIMD_FN(load_row),
    .store_row = SIMD_FN(store_row),
    .pack_q = pack_q_bf16,
    .load_kv = load_kv_bf16,
    .scores = scores_bf16,
    .decode_step = VL,
    .decode_prepare_q = decode_prepare_q_bf16,
    .decode_scores = decode_scores_bf16,
    .decode_panel_rows = VL,
    .decode_scores_panel = SIMD_FN(decode_scores_panel),
    .decode_pv = SIMD_FN(decode_pv),
    .decode_softmax = SIMD_FN(softmax),
    .softmax = softmax_bf16,
    .pv_rows = pv_rows_bf16,
    .pv_rows_ranged = pv_rows_ranged_bf16,
    .pv_cols = 32,
    .grads = SIMD_FN(grads),
    .pt_rows = SIMD_FN(pt_rows),
};

/* The dot-product rate of one core: twelve independent vdpbf16ps chains, as the FMA loop of
 * simd_kernels.h. Each instruction is 16 lanes x 2 products x (multiply + add). */
#define DP_CHAINS 12

double cs_bf16_dot_peak(int64_t iterations) {
    __m512 acc[DP_CHAINS];
    for (int i = 0; i < DP_CHAINS; ++i) acc[i] = _mm512_set1_ps((float)i * 1e-3f);
    /* Products of 2^-20 keep every sum finite however long the loop runs. */
    const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0x1p-10f), _mm512_set1_ps(0x1p-10f));
    for (int64_t it = 0; it < iterations; ++it)
        for (int i = 0; i < DP_CHAINS; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, a);
    __m512 sum = acc[0];
    for (int i = 1; i < DP_CHAINS; ++i) sum = _mm512_add_ps(sum, acc[i]);
    volatile float sink = _mm512_cvtss_f32(sum);
    (void)sink;
    return (double)iterations * DP_CHAINS * VL * 4;
}
