/*
 * The ladder kernels of the CUDA backend, run from their own source on the CPU through the SIMT
 * emulation (emulation/simt_emulation.h), against the reference backend. Covers what a GPU
 * run would, short of timing: partial tiles in Nq, Nkv and d (inputs allocated to their exact
 * size, outputs between guard regions), GQA, Nq != Nkv, causal with rows that see no key, both
 * layouts, f32/f16/bf16, LSE, and NaN inputs that must reach exactly the rows that see them.
 * Warps run in forward, reverse and shuffled order, so a shared buffer reused without a
 * barrier (the write-up's kernels 4 and 5) fails here; the first check shows the emulation does
 * catch such a race. The planner is built the same way, with only these four variants linked,
 * to check its fallback along the ladder and its refusals.
 */
#include <math.h>
#include <stdlib.h>

#include <vector>

#include "kernels/ladder/naive_tiled.cu"
#include "kernels/ladder/register_tiled.cu"
#include "kernels/ladder/smem_tiled.cu"
#include "kernels/ladder/wide_register_tile.cu"
#include "planner.cu"

#include "check.h"

/* ---- the emulation catches a missing barrier ---- */

template <bool BARRIER> __global__ void neighbour_exchange(int *out) {
    __shared__ int slot[4];
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) slot[warp] = warp + 1;
    if (BARRIER) __syncthreads();
    if (threadIdx.x % 32 == 0) out[warp] = slot[(warp + 1) % 4];
}

static void check_emulation_sees_races(void) {
    int with[4] = {0}, without[4] = {0};
    fp_emu_set_order(FP_EMU_FORWARD);
    neighbour_exchange<true> FP_GPU_LAUNCH(dim3(1), dim3(128), 0, NULL)(with);
    neighbour_exchange<false> FP_GPU_LAUNCH(dim3(1), dim3(128), 0, NULL)(without);
    int right = 0, raced = 0;
    for (int w = 0; w < 4; w++) {
        right += with[w] == (w + 1) % 4 + 1;
        raced += without[w] != (w + 1) % 4 + 1;
    }
    CHECK(right == 4);
    CHECK(raced > 0); /* warp 0 read its neighbour's slot before the neighbour wrote it */
}

/* ---- the ladder against the reference ---- */

struct shape {
    flashport_dtype dtype;
    int b, hq, hkv, nq, nkv, d, causal;
    flashport_layout layout;
    char nan_in; /* 0, or the tensor ('q', 'k', 'v') that gets one NaN */
};

static const shape shapes[] = {
    {FLASHPORT_F32, 2, 4, 2, 37, 45, 72, 0, FLASHPORT_LAYOUT_BHND, 0},
    {FLASHPORT_F32, 1, 3, 1, 70, 33, 40, 1, FLASHPORT_LAYOUT_BNHD, 0}, /* rows with no key */
    {FLASHPORT_F32, 1, 1, 1, 20, 90, 257, 1, FLASHPORT_LAYOUT_BHND, 'q'},
    {FLASHPORT_F32, 1, 1, 1, 40, 70, 16, 1, FLASHPORT_LAYOUT_BHND, 'v'},
    {FLASHPORT_F32, 1, 1, 1, 40, 70, 16, 1, FLASHPORT_LAYOUT_BNHD, 'k'},
    {FLASHPORT_F16, 2, 2, 1, 65, 65, 64, 1, FLASHPORT_LAYOUT_BNHD, 0},
    {FLASHPORT_BF16, 1, 2, 1, 17, 200, 96, 0, FLASHPORT_LAYOUT_BHND, 0},
};

static const int GUARD = 64; /* elements either side of O and LSE that must stay untouched */
static const float SENTINEL = 4096.0f; /* exact in f16 and bf16 */

static uint32_t rng = 2024u;
static float uniform(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 16777216.0f * 4.0f - 2.0f;
}

static void put(std::vector<uint8_t> &x, int64_t i, flashport_dtype dt, float v) {
    if (dt == FLASHPORT_F32)
        ((float *)x.data())[i] = v;
    else
        ((uint16_t *)x.data())[i] = dt == FLASHPORT_F16 ? fp_f32_to_f16(v) : fp_f32_to_bf16(v);
}

static double get(const std::vector<uint8_t> &x, int64_t i, flashport_dtype dt) {
    if (dt == FLASHPORT_F32) return ((const float *)x.data())[i];
    const uint16_t h = ((const uint16_t *)x.data())[i];
    return dt == FLASHPORT_F16 ? fp_f16_to_f32(h) : fp_bf16_to_f32(h);
}

/* Returns 1 when the kernel's O and LSE match the reference's. */
static int matches_reference(const fp_gpu_kernel *kernel, const shape &s, flashport_context *ref) {
    fp_problem p;
    flashport_attention_desc_init(&p, s.dtype, s.b, s.hq, s.hkv, s.nq, s.nkv, s.d, s.layout);
    p.causal = s.causal;
    p.scale = 1.0f / sqrtf((float)s.d);
    const size_t es = flashport_dtype_size(s.dtype);
    const int64_t nq = (int64_t)s.b * s.hq * s.nq * s.d, nk = (int64_t)s.b * s.hkv * s.nkv * s.d;
    const int64_t nv = nk, no = nq; /* contiguous layouts */
    const int64_t nl = (int64_t)s.b * s.hq * s.nq;
    std::vector<uint8_t> q(nq * es), k(nk * es), v(nv * es), o_ref(no * es);
    std::vector<uint8_t> o((no + 2 * GUARD) * es);
    std::vector<float> lse(nl + 2 * GUARD, SENTINEL), lse_ref(nl);
    for (int64_t i = 0; i < nq; i++) put(q, i, s.dtype, uniform());
    for (int64_t i = 0; i < nk; i++) put(k, i, s.dtype, uniform());
    for (int64_t i = 0; i < nv; i++) put(v, i, s.dtype, uniform());
    for (int64_t i = 0; i < no + 2 * GUARD; i++) put(o, i, s.dtype, SENTINEL);
    if (s.nan_in == 'q') put(q, p.q.seq * (s.nq / 2) + s.d / 3, s.dtype, NAN);
    if (s.nan_in == 'k') put(k, p.k.seq * (s.nkv - 1) + s.d - 1, s.dtype, NAN);
    if (s.nan_in == 'v') put(v, p.v.seq * (s.nkv - 1), s.dtype, NAN); /* hidden from early rows */

    fp_gpu_kernel_params params = {};
    char why[256];
    if (!kernel->supports(&p, NULL, &params, why, sizeof why)) {
        fprintf(stderr, "%s declines a shape it should take: %s\n", kernel->info.name, why);
        return 0;
    }
    fp_gpu_launch L = {};
    L.p = p;
    L.q = q.data();
    L.k = k.data();
    L.v = v.data();
    L.o = o.data() + GUARD * es;
    L.lse = lse.data() + GUARD;
    L.params = &params;
    if (kernel->launch(&L) != gpuSuccess || fp_emu_errors()) return 0;
    flashport_attention_host_args ref_args{};
    ref_args.struct_size = sizeof ref_args;
    ref_args.q = q.data();
    ref_args.k = k.data();
    ref_args.v = v.data();
    ref_args.o = o_ref.data();
    ref_args.lse = lse_ref.data();
    if (flashport_attention_run_host(ref, &p, &ref_args) != FLASHPORT_OK) {
        fprintf(stderr, "reference: %s\n", flashport_last_error());
        return 0;
    }

    int ok = 1;
    for (int64_t i = 0; i < GUARD; i++) {
        ok &= get(o, i, s.dtype) == SENTINEL && get(o, GUARD + no + i, s.dtype) == SENTINEL;
        ok &= lse[i] == SENTINEL && lse[GUARD + nl + i] == SENTINEL;
    }
    if (!ok) fprintf(stderr, "%s wrote outside O or LSE\n", kernel->info.name);
    double num = 0.0, den = 0.0, max_abs = 0.0;
    int64_t nan_mismatch = 0, lse_mismatch = 0;
    for (int64_t i = 0; i < no; i++) {
        const double x = get(o, GUARD + i, s.dtype), r = get(o_ref, i, s.dtype);
        if (isnan(x) != isnan(r)) nan_mismatch++;
        if (isnan(x) || isnan(r)) continue;
        num += (x - r) * (x - r);
        den += r * r;
        max_abs = fmax(max_abs, fabs(x - r));
    }
    for (int64_t i = 0; i < nl; i++) {
        const float x = lse[GUARD + i], r = lse_ref[i];
        const bool same = isnan(r)   ? isnan(x)
                          : isinf(r) ? x == r
                                     : fabsf(x - r) <= 1e-4f * fmaxf(1.0f, fabsf(r));
        lse_mismatch += !same;
    }
    const double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
    const double tol = s.dtype == FLASHPORT_F32 ? 1e-5 : s.dtype == FLASHPORT_F16 ? 2e-3 : 1e-2;
    const double tol_abs = s.dtype == FLASHPORT_F32 ? 1e-4 : INFINITY;
    if (nan_mismatch || lse_mismatch || rel > tol || max_abs > tol_abs) {
        fprintf(stderr, "%s: relative L2 %.2e, max abs %.2e, %lld NaN and %lld LSE mismatches\n",
                kernel->info.name, rel, max_abs, (long long)nan_mismatch, (long long)lse_mismatch);
        ok = 0;
    }
    return ok;
}

/* ---- the planner, with only the four ladder variants built ---- */

static void check_planner(void) {
    fp_gpu_device_props props = {};
    props.sm_count = 132;
    props.warp_size = 32;
    fp_problem p;
    flashport_attention_desc_init(&p, FLASHPORT_F32, 1, 1, 1, 1024, 1024, 1024,
                                  FLASHPORT_LAYOUT_BHND);
    p.scale = 1.0f / 32.0f;
    fp_plan plan = {};
    CHECK(fp_gpu_kernel_count() == 4);
    CHECK(fp_gpu_plan(&props, &p, FP_OP_FORWARD, -1, &plan) == FLASHPORT_OK);
    CHECK(strcmp(fp_gpu_kernel_at(plan.variant)->info.name, "wide_register_tile") == 0);
    CHECK(strstr(plan.reason, "ladder fallback") != NULL);
    CHECK(strstr(plan.reason, "fa2_f32_split_kv: not built") != NULL);

    p.dtype = FLASHPORT_BF16;
    CHECK(fp_gpu_plan(&props, &p, FP_OP_FORWARD, -1, &plan) == FLASHPORT_OK);
    CHECK(strstr(plan.reason, "tensor_core_mma_split_kv: not built") != NULL);

    CHECK(fp_gpu_plan(&props, &p, FP_OP_FORWARD, 0, &plan) == FLASHPORT_OK && plan.variant == 0);
    CHECK(strcmp(plan.reason, "requested by name") == 0);

    flashport_attention_desc_init(&p, FLASHPORT_F32, 1024, 128, 128, 8, 8, 64,
                                  FLASHPORT_LAYOUT_BHND);
    CHECK(fp_gpu_plan(&props, &p, FP_OP_FORWARD, 1, &plan) == FLASHPORT_ERROR_UNSUPPORTED);
    CHECK(strstr(plan.reason, "exceeds the grid limit") != NULL);
    CHECK(fp_gpu_plan(&props, &p, FP_OP_FORWARD, -1, &plan) == FLASHPORT_ERROR_UNSUPPORTED);
    CHECK(strstr(plan.reason, "every variant declined") != NULL);

    /* The backward pass has variants of its own; the ladder computes none of it. */
    flashport_attention_desc_init(&p, FLASHPORT_BF16, 1, 1, 1, 256, 256, 128,
                                  FLASHPORT_LAYOUT_BHND);
    CHECK(fp_gpu_plan(&props, &p, FP_OP_BACKWARD, -1, &plan) == FLASHPORT_ERROR_UNSUPPORTED);
    CHECK(strstr(plan.reason, "backward_mma: not built; backward_f32: not built") != NULL);
    CHECK(fp_gpu_plan(&props, &p, FP_OP_BACKWARD, 0, &plan) == FLASHPORT_ERROR_UNSUPPORTED);
    CHECK(strstr(plan.reason, "does not implement backward pass") != NULL);
}

int main(void) {
    check_emulation_sees_races();
    check_planner();

    flashport_context *ref = NULL;
    CHECK(flashport_context_create("reference", &ref) == FLASHPORT_OK);
    if (!ref) return check_report("test_ladder_emulated");
    const fp_gpu_kernel *const kernels[] = {&fp_kernel_naive_tiled, &fp_kernel_smem_tiled,
                                            &fp_kernel_register_tiled,
                                            &fp_kernel_wide_register_tile};
    const fp_emu_order orders[] = {FP_EMU_FORWARD, FP_EMU_REVERSE, FP_EMU_SHUFFLED};
    int run = 0;
    for (const fp_gpu_kernel *kernel : kernels)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            fp_emu_set_order(orders[run++ % 3]);
            const int ok = matches_reference(kernel, shapes[i], ref);
            if (!ok) fprintf(stderr, "  %s failed on shape %zu\n", kernel->info.name, i);
            CHECK(ok);
        }
    CHECK(fp_emu_errors() == 0);
    flashport_context_destroy(ref);
    return check_report("test_ladder_emulated");
}
