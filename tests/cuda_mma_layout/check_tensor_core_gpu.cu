/*
 * GPU check of the tensor-core forward, independent of the CUDA module's wiring: runs the
 * variants tensor_core_mma and tensor_core_mma_split_kv (through their kernel-table entries,
 * and the split pass with forced split counts) on shapes that reach every path of the kernel
 * (head dims 64/128/256 and padded ones, causal with Nq < Nkv and Nq > Nkv, GQA, partial tiles,
 * both layouts, strides that rule out cp.async, decode), each with every tile configuration
 * compiled for its padded head dim (picked through FLASHPORT_CUDA_TC_CONFIG, as a tuning run
 * would), and compares O and LSE with a double-precision reference on the host. Needs an
 * sm_80+ GPU; exits non-zero on any failure.
 * Not part of ctest (no GPU there); from the repository root:
 *   nvcc -std=c++17 -O2 -arch=native -Iapi/include -Iapi/internal -Ibackends/cuda \
 *     -Ibackends/cuda/kernels -o check_tensor_core_gpu \
 *     tests/cuda_mma_layout/check_tensor_core_gpu.cu backends/cuda/kernels/tensor_core_mma.cu \
 *     backends/cuda/kernels/tensor_core_mma_split_kv.cu backends/cuda/kernels/split_kv.cu \
 *     && ./check_tensor_core_gpu
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "fp_half.h"
#include "kernel_table.h"
#include "mma/flash_forward.h"
#include "mma/tile_configs.h"
#include "split_kv.h"

extern const fp_gpu_kernel fp_kernel_tensor_core_mma;
extern const fp_gpu_kernel fp_kernel_tensor_core_mma_split_kv;

static int failures;

#define CUDA_OK(call)                                                                          \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                      \
                    cudaGetErrorString(e_));                                                   \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

struct shape {
    flashport_dtype dtype;
    int b, hq, hkv, nq, nkv, d, causal;
    flashport_layout layout;
    int seq_pad;   /* elements between rows beyond d (a non-multiple of 8 rules out cp.async) */
    int nan_v_key; /* >= 0: V[.., key, 0] = NaN in every head */
};

static float to_f32(flashport_dtype t, uint16_t x)
{
    return t == FLASHPORT_F16 ? fp_f16_to_f32(x) : fp_bf16_to_f32(x);
}
static uint16_t from_f32(flashport_dtype t, float x)
{
    return t == FLASHPORT_F16 ? fp_f32_to_f16(x) : fp_f32_to_bf16(x);
}

static void strides_for(const shape &s, int heads, int n, flashport_strides *st)
{
    const int64_t row = s.d + s.seq_pad;
    if (s.layout == FLASHPORT_LAYOUT_BHND) {
        st->seq = row;
        st->head = row * n;
        st->batch = row * n * heads;
    } else {
        st->head = row;
        st->seq = row * heads;
        st->batch = row * heads * n;
    }
}

/* Elements the strides reach, up to the end of the last row. */
static int64_t extent(const flashport_strides &st, int b, int h, int n, int d)
{
    return (b - 1) * st.batch + (h - 1) * st.head + (n - 1) * st.seq + d;
}

/* softmax(scale Q K^T) V per row in double, bottom-right causal; empty rows O = 0, LSE = -inf. */
static void reference(const shape &s, const fp_problem &p, const std::vector<float> &q,
                      const std::vector<float> &k, const std::vector<float> &v,
                      std::vector<double> &o, std::vector<double> &lse)
{
    const int group = s.hq / s.hkv;
    std::vector<double> w(s.nkv);
    for (int b = 0; b < s.b; ++b)
        for (int h = 0; h < s.hq; ++h)
            for (int i = 0; i < s.nq; ++i) {
                const float *qr = &q[b * p.q.batch + h * p.q.head + i * p.q.seq];
                const int hk = h / group;
                double mx = -INFINITY;
                int last = s.causal ? i + (s.nkv - s.nq) : s.nkv - 1;
                if (last > s.nkv - 1)
                    last = s.nkv - 1;
                for (int j = 0; j <= last; ++j) {
                    const float *kr = &k[b * p.k.batch + hk * p.k.head + j * p.k.seq];
                    double dot = 0.0;
                    for (int c = 0; c < s.d; ++c)
                        dot += (double)qr[c] * kr[c];
                    w[j] = dot * p.scale;
                    if (w[j] > mx) /* a NaN score still reaches the sum through exp */
                        mx = w[j];
                }
                const int64_t row = ((int64_t)b * s.hq + h) * s.nq + i;
                double sum = 0.0;
                for (int j = 0; j <= last; ++j) {
                    w[j] = exp(w[j] - mx);
                    sum += w[j];
                }
                for (int c = 0; c < s.d; ++c) {
                    double acc = 0.0;
                    for (int j = 0; j <= last; ++j)
                        acc += w[j] * v[b * p.v.batch + hk * p.v.head + j * p.v.seq + c];
                    o[row * s.d + c] = last < 0 ? 0.0 : acc / sum;
                }
                lse[row] = last < 0 ? -INFINITY : mx + log(sum);
            }
}

/* Tile configurations compiled for the head dim d is padded to. */
static int config_count(int d)
{
    const int padded = d <= 64 ? 64 : (d <= 128 ? 128 : 256);
    int n = 0;
#define COUNT_CONFIG(cd, ...) n += (cd) == padded;
    FP_TC_CONFIG_LIST(COUNT_CONFIG)
#undef COUNT_CONFIG
    return n;
}

static void run_shape(const shape &s, const fp_gpu_device_props &props)
{
    fp_problem p;
    memset(&p, 0, sizeof p);
    p.window_left = p.window_right = -1;
    p.dtype = s.dtype;
    p.batch = s.b, p.heads_q = s.hq, p.heads_kv = s.hkv;
    p.seq_q = s.nq, p.seq_kv = s.nkv, p.head_dim = s.d;
    strides_for(s, s.hq, s.nq, &p.q);
    strides_for(s, s.hkv, s.nkv, &p.k);
    strides_for(s, s.hkv, s.nkv, &p.v);
    strides_for(s, s.hq, s.nq, &p.o);
    p.scale = 1.0f / sqrtf((float)s.d);
    p.causal = s.causal;

    const int64_t nq_el = extent(p.q, s.b, s.hq, s.nq, s.d);
    const int64_t nk_el = extent(p.k, s.b, s.hkv, s.nkv, s.d);
    std::vector<float> q(nq_el), k(nk_el), v(nk_el);
    std::vector<uint16_t> q16(nq_el), k16(nk_el), v16(nk_el);
    srand(1234 + s.d + s.nq);
    auto fill = [&](std::vector<float> &f, std::vector<uint16_t> &h) {
        for (size_t i = 0; i < f.size(); ++i) {
            h[i] = from_f32(s.dtype, (float)rand() / RAND_MAX * 2.0f - 1.0f);
            f[i] = to_f32(s.dtype, h[i]);
        }
    };
    fill(q, q16);
    fill(k, k16);
    fill(v, v16);
    if (s.nan_v_key >= 0)
        for (int b = 0; b < s.b; ++b)
            for (int h = 0; h < s.hkv; ++h) {
                const int64_t at = b * p.v.batch + h * p.v.head + s.nan_v_key * p.v.seq;
                v[at] = NAN;
                v16[at] = from_f32(s.dtype, NAN);
            }
    const int64_t rows = (int64_t)s.b * s.hq * s.nq;
    std::vector<double> o_ref(rows * s.d), lse_ref(rows);
    reference(s, p, q, k, v, o_ref, lse_ref);

    void *dq, *dk, *dv, *dout;
    float *dlse;
    CUDA_OK(cudaMalloc(&dq, nq_el * 2));
    CUDA_OK(cudaMalloc(&dk, nk_el * 2));
    CUDA_OK(cudaMalloc(&dv, nk_el * 2));
    CUDA_OK(cudaMalloc(&dout, nq_el * 2));
    CUDA_OK(cudaMalloc(&dlse, rows * sizeof(float)));
    CUDA_OK(cudaMemcpy(dq, q16.data(), nq_el * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dk, k16.data(), nk_el * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dv, v16.data(), nk_el * 2, cudaMemcpyHostToDevice));

    /* -1: the plain variant; 0: the split variant as its planner chooses; > 1: forced splits. */
    const int modes[] = {-1, 0, 2, 5};
    for (int config = 0; config < config_count(s.d); ++config) {
        char config_text[16];
        snprintf(config_text, sizeof config_text, "%d", config);
        setenv(FP_TC_CONFIG_ENV, config_text, 1);
        for (int mode : modes) {
            fp_gpu_kernel_params params = {};
            char why[256] = "";
            fp_gpu_launch L;
            memset(&L, 0, sizeof L);
            L.p = p, L.q = dq, L.k = dk, L.v = dv, L.o = dout, L.lse = dlse, L.params = &params;
            L.props = &props;
            const char *name = mode < 0 ? "tensor_core_mma" : "tensor_core_mma_split_kv";
            const fp_gpu_kernel *kern =
                mode < 0 ? &fp_kernel_tensor_core_mma : &fp_kernel_tensor_core_mma_split_kv;
            if (mode > 1) {
                int chosen = -1;
                if (!fp_tc_forward_support(&p, &props, &chosen, why, sizeof why))
                    continue;
                params.split_kv = fp_split_kv_share(&p, mode, fp_tc_block_keys(s.d, chosen));
                params.split_kv.tile.config = chosen;
                if (params.split_kv.splits < 2)
                    continue;
            } else if (!kern->supports(&p, &props, &params, why, sizeof why)) {
                printf("  %-26s config %d unsupported: %s\n", name, config, why);
                continue;
            }
            const size_t ws = kern->workspace ? kern->workspace(&p, &params) : 0;
            void *dws = NULL;
            if (ws)
                CUDA_OK(cudaMalloc(&dws, ws));
            L.workspace = dws;
            CUDA_OK(cudaMemset(dout, 0xff, nq_el * 2)); /* NaN poison */
            CUDA_OK(cudaMemset(dlse, 0xff, rows * sizeof(float)));
            CUDA_OK(kern->launch(&L));
            CUDA_OK(cudaDeviceSynchronize());
            std::vector<uint16_t> o16(nq_el);
            std::vector<float> lse(rows);
            CUDA_OK(cudaMemcpy(o16.data(), dout, nq_el * 2, cudaMemcpyDeviceToHost));
            CUDA_OK(cudaMemcpy(lse.data(), dlse, rows * sizeof(float), cudaMemcpyDeviceToHost));
            if (dws)
                CUDA_OK(cudaFree(dws));

            double err2 = 0, ref2 = 0, max_abs = 0, lse_max = 0;
            int64_t bad_nan = 0;
            for (int b = 0; b < s.b; ++b)
                for (int h = 0; h < s.hq; ++h)
                    for (int i = 0; i < s.nq; ++i) {
                        const int64_t row = ((int64_t)b * s.hq + h) * s.nq + i;
                        for (int c = 0; c < s.d; ++c) {
                            const double want = o_ref[row * s.d + c];
                            const int64_t at = b * p.o.batch + h * p.o.head + i * p.o.seq + c;
                            const double got = to_f32(s.dtype, o16[at]);
                            if (isnan(want) != isnan(got)) {
                                ++bad_nan;
                                continue;
                            }
                            if (isnan(want))
                                continue;
                            err2 += (got - want) * (got - want);
                            ref2 += want * want;
                            max_abs = fmax(max_abs, fabs(got - want));
                        }
                        const double lw = lse_ref[row], lg = lse[row];
                        if (isinf(lw) || isnan(lw)) {
                            if (!(lg == lw || (isnan(lw) && isnan(lg))))
                                ++bad_nan;
                        } else {
                            lse_max = fmax(lse_max, fabs(lg - lw));
                        }
                    }
            const double rel = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
            const double tol = s.dtype == FLASHPORT_F16 ? 2e-3 : 1e-2;
            const int ok = rel <= tol && bad_nan == 0 && lse_max <= 1e-2;
            if (!ok)
                ++failures;
            printf("  %-26s config %d splits %-3d rel_l2 %.2e max_abs %.2e lse_err %.2e "
                   "nan_mismatch %lld %s\n",
                   name, config, mode < 0 ? 0 : params.split_kv.splits, rel, max_abs, lse_max,
                   (long long)bad_nan, ok ? "ok" : "FAIL");
        }
    }
    CUDA_OK(cudaFree(dq));
    CUDA_OK(cudaFree(dk));
    CUDA_OK(cudaFree(dv));
    CUDA_OK(cudaFree(dout));
    CUDA_OK(cudaFree(dlse));
}

/* A FLASHPORT_CUDA_TC_CONFIG that names no config of the head dim makes both variants decline,
 * saying so; unset, they take the default. */
static void check_config_env(const fp_gpu_device_props &props)
{
    fp_problem p;
    memset(&p, 0, sizeof p);
    p.window_left = p.window_right = -1;
    p.dtype = FLASHPORT_BF16;
    p.batch = p.heads_q = p.heads_kv = 1;
    p.seq_q = p.seq_kv = 256;
    p.head_dim = 128;
    strides_for(shape{FLASHPORT_BF16, 1, 1, 1, 256, 256, 128, 0, FLASHPORT_LAYOUT_BHND, 0, -1}, 1,
                256, &p.q);
    p.k = p.v = p.o = p.q;
    p.scale = 0.125f;
    char count_text[16];
    snprintf(count_text, sizeof count_text, "%d", config_count(128));
    const char *const bad[] = {count_text, "-1", "1x", " 1", "99999999999999999999"};
    for (const char *value : bad) {
        setenv(FP_TC_CONFIG_ENV, value, 1);
        fp_gpu_kernel_params params = {};
        char why[256] = "";
        const int yes = fp_kernel_tensor_core_mma.supports(&p, &props, &params, why, sizeof why);
        const int named = strstr(why, FP_TC_CONFIG_ENV) != NULL;
        if (yes || !named)
            ++failures;
        printf("%s=\"%s\": %s (%s)\n", FP_TC_CONFIG_ENV, value,
               yes ? "accepted, FAIL" : named ? "declined, ok" : "declined without naming it, FAIL",
               why);
    }
    unsetenv(FP_TC_CONFIG_ENV);
    fp_gpu_kernel_params params = {};
    char why[256] = "";
    const int yes = fp_kernel_tensor_core_mma.supports(&p, &props, &params, why, sizeof why);
    if (!yes || params.tile.config != FP_TC_DEFAULT_CONFIG_D128)
        ++failures;
    printf("%s unset: config %d for d=128, default %d: %s\n", FP_TC_CONFIG_ENV,
           params.tile.config, FP_TC_DEFAULT_CONFIG_D128,
           yes && params.tile.config == FP_TC_DEFAULT_CONFIG_D128 ? "ok" : "FAIL");
}

int main(void)
{
    cudaDeviceProp dp;
    CUDA_OK(cudaGetDeviceProperties(&dp, 0));
    fp_gpu_device_props props;
    memset(&props, 0, sizeof props);
    props.cc_major = dp.major, props.cc_minor = dp.minor;
    props.sm_count = dp.multiProcessorCount;
    props.warp_size = dp.warpSize;
    props.smem_per_block_optin = dp.sharedMemPerBlockOptin;
    props.smem_per_sm = dp.sharedMemPerMultiprocessor;
    props.regs_per_sm = dp.regsPerMultiprocessor;
    props.max_threads_per_sm = dp.maxThreadsPerMultiProcessor;
    props.l2_bytes = dp.l2CacheSize;
    printf("device %s, sm_%d%d\n", dp.name, dp.major, dp.minor);

    const flashport_layout H = FLASHPORT_LAYOUT_BHND, N = FLASHPORT_LAYOUT_BNHD;
    const shape shapes[] = {
        /* dtype, b, hq, hkv, nq, nkv, d, causal, layout, seq_pad, nan_v_key */
        {FLASHPORT_F16, 2, 4, 2, 200, 333, 64, 0, H, 0, -1},
        {FLASHPORT_BF16, 2, 4, 2, 200, 333, 64, 1, H, 0, -1},
        {FLASHPORT_F16, 1, 2, 1, 130, 130, 128, 1, N, 0, -1},
        {FLASHPORT_BF16, 1, 3, 3, 257, 129, 128, 0, N, 0, -1},
        {FLASHPORT_F16, 1, 2, 2, 300, 100, 128, 1, H, 0, -1}, /* Nq > Nkv: empty rows */
        {FLASHPORT_F16, 1, 2, 1, 100, 300, 128, 1, H, 0, -1}, /* Nq < Nkv */
        {FLASHPORT_BF16, 1, 2, 2, 150, 170, 256, 1, H, 0, -1},
        {FLASHPORT_F16, 2, 2, 1, 64, 97, 40, 0, N, 0, -1},    /* padded to 64 */
        {FLASHPORT_BF16, 1, 2, 2, 190, 190, 96, 1, H, 0, -1}, /* padded to 128 */
        {FLASHPORT_F16, 1, 2, 2, 90, 140, 200, 0, H, 0, -1},  /* padded to 256 */
        {FLASHPORT_F16, 1, 2, 2, 140, 150, 100, 1, H, 0, -1}, /* rows not 16-byte aligned */
        {FLASHPORT_BF16, 1, 2, 1, 70, 80, 64, 0, H, 3, -1},   /* strides rule out cp.async */
        {FLASHPORT_F16, 1, 1, 1, 1, 4096, 128, 0, H, 0, -1},  /* decode */
        {FLASHPORT_BF16, 2, 8, 1, 1, 3000, 64, 1, N, 0, -1},  /* decode, MQA */
        {FLASHPORT_F16, 1, 1, 1, 1024, 1024, 64, 1, H, 0, -1},
        {FLASHPORT_F16, 1, 2, 2, 64, 64, 64, 0, H, 0, 10},    /* NaN in V: every row */
    };
    for (const shape &s : shapes) {
        printf("%s B=%d Hq=%d Hkv=%d Nq=%d Nkv=%d d=%d%s %s%s%s\n",
               s.dtype == FLASHPORT_F16 ? "f16" : "bf16", s.b, s.hq, s.hkv, s.nq, s.nkv, s.d,
               s.causal ? " causal" : "", s.layout == H ? "BHND" : "BNHD",
               s.seq_pad ? " padded-rows" : "", s.nan_v_key >= 0 ? " nan-in-v" : "");
        run_shape(s, props);
    }
    check_config_env(props);
    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
