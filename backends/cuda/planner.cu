/*
 * The CUDA backend's planner: the only place that decides which kernel variant runs.
 *
 * Automatic choice. A problem of at most 16 query rows per sequence (decode) goes to a decode
 * kernel, which reads K and V once per kv head at memory bandwidth: f16/bf16 with more than one
 * row per kv head (GQA, several queries) to decode_mma on the tensor cores, the rest to decode
 * on the CUDA cores. Otherwise f16/bf16 go, on compute capability 9.0 where it is built, to the
 * Hopper kernel (wgmma, TMA; after the split form when the grid is small), then to the
 * matrix-core kernel (tensor cores on CUDA, MFMA on HIP; vendors/ names it), f32 to the 3xTF32
 * tensor-core kernels where they are built and take the problem (f32 accuracy at a multiple of the
 * CUDA-core rate; d > 256 to the wide form, which splits the keys itself on small grids), else to
 * the FlashAttention-2 style CUDA-core kernel; when B*Hq*ceil(Nq/rows per block) cannot give every
 * SM a block, the split-KV form of the CUDA-core kernel is preferred, since it adds parallelism
 * along Nkv. When the preferred variants are not built or decline the problem, the ladder is walked
 * from its fastest step down to naive_tiled. The WMMA step rounds f32 inputs to f16, so it is never
 * chosen automatically; it runs when asked for by name.
 *
 * The backward pass has variants of its own, which compute nothing else: for f16/bf16 (head dims
 * 64 and 128) the matrix-core one (vendors/ names it: backward_mma on the tensor cores on CUDA,
 * backward_mfma on MFMA on HIP); for f32, as the forward, backward_tf32x3 on the tensor cores
 * (3xTF32 split, f32 accuracy; head dims 64 and 128; CUDA only) where it is built and takes the
 * problem; and backward_f32 on the CUDA cores (SIMT lanes on HIP) for whatever those decline or
 * where they are not built.
 */
#include <stdio.h>
#include <string.h>

#include "kernel_list.h"
#include "planner.h"

#define FP_GPU_KERNEL_ADDRESS(name) &fp_kernel_##name,
static const fp_gpu_kernel *const kernels[] = {FP_GPU_KERNELS(FP_GPU_KERNEL_ADDRESS)};
#undef FP_GPU_KERNEL_ADDRESS
static const int n_kernels = (int)(sizeof kernels / sizeof kernels[0]);

/* Query rows per block of the production kernels, for the "does the grid fill the GPU" test
 * (fa2_f32's rows vary with d; the split variants' own supports() has the final word on
 * whether splitting pays, and the plain variant follows when it declines). The matrix-core
 * kernels are the target's (vendors/): mma.sync on CUDA, MFMA on HIP. */
#define FA2_F32_ROWS 64

/* f32 on the tensor cores, tried before fa2_f32 when built (CUDA only, cc >= 8.0): d <= 256,
 * and the wide form for 256 < d <= 1024, which splits the keys itself when the grid is small. */
#define F32_TENSOR_KERNEL      "tensor_core_tf32x3"
#define F32_WIDE_TENSOR_KERNEL "tensor_core_tf32x3_wide"

/* f16/bf16 on sm_90a (kernels/hopper/), tried first on compute capability 9.0 when built. */
#define HOPPER_KERNEL     "hopper_wgmma"
#define HOPPER_FP8_KERNEL "hopper_wgmma_fp8"
/* f32 on sm_90a (3xTF32 on wgmma), tried before F32_TENSOR_KERNEL on compute capability 9.0. */
#define HOPPER_F32_KERNEL "hopper_wgmma_tf32x3"

/* Decode, for problems of at most this many query rows per sequence, when built. */
#define DECODE_KERNEL      "decode"
#define DECODE_MMA_KERNEL  "decode_mma"
#define DECODE_MAX_QUERIES 16

/* The backward pass: the matrix-core variant for f16/bf16 (FP_MATRIX_BACKWARD_KERNEL), the
 * 3xTF32 tensor-core one for f32, the CUDA-core one for the rest. */
#define BACKWARD_TF32X3_KERNEL "backward_tf32x3"
#define BACKWARD_F32_KERNEL    "backward_f32"

static const char *const ladder_fallback[] = {
    "double_buffered", "transposed_smem", "float4_loads", "wide_register_tile",
    "register_tiled",  "smem_tiled",      "naive_tiled",
};

int fp_gpu_kernel_count(void) { return n_kernels; }

const fp_gpu_kernel *fp_gpu_kernel_at(int index) {
    return index >= 0 && index < n_kernels ? kernels[index] : NULL;
}

static int find_kernel(const char *name) {
    for (int i = 0; i < n_kernels; i++)
        if (strcmp(kernels[i]->info.name, name) == 0) return i;
    return -1;
}

/* Asks variant i about operation op; on yes fills the plan and *params, on no leaves the reason
 * in why. A variant is asked only about problems whose features it implements; the backward
 * variants (FP_FEATURE_BACKWARD) compute nothing but the backward pass. */
static int try_variant(int i, const fp_gpu_device_props *props, const fp_problem *p, fp_op op,
                       fp_plan *out, fp_gpu_kernel_params *params, char *why, size_t why_len) {
    memset(params, 0, sizeof *params);
    why[0] = '\0';
    if (op == FP_OP_FORWARD && (kernels[i]->info.features & FP_FEATURE_BACKWARD)) {
        /* The problem's features are named too: a forced decline names what it was asked. */
        const unsigned asked = fp_problem_features(p, FP_OP_FORWARD);
        size_t used = (size_t)snprintf(why, why_len,
                                       "computes only the gradients "
                                       "(flashport_attention_backward), no forward output");
        const char *sep = " (asked for ";
        for (unsigned bit = 1; bit & FP_FEATURES_ALL; bit <<= 1)
            if ((asked & bit) && used < why_len) {
                used +=
                    (size_t)snprintf(why + used, why_len - used, "%s%s", sep, fp_feature_name(bit));
                sep = ", ";
            }
        if (asked && used < why_len) snprintf(why + used, why_len - used, ")");
        return 0;
    }
    const unsigned missing = fp_problem_features(p, op) & ~kernels[i]->info.features;
    if (missing) {
        snprintf(why, why_len, "does not implement %s", fp_feature_name(missing & -missing));
        return 0;
    }
    if (!kernels[i]->supports(p, props, params, why, why_len)) return 0;
    out->variant = i;
    memcpy(out->kernel_params.bytes, params, sizeof *params);
    out->workspace_bytes = kernels[i]->workspace ? kernels[i]->workspace(p, params) : 0;
    return 1;
}

/* Appends "name: what happened" to the list of variants passed over. When the list is full it
 * is cut short and ends in "...": the reason keeps the variants tried first, and says that it
 * was cut. */
static void note_skip(char *skipped, size_t len, const char *name, const char *what) {
    const size_t used = strlen(skipped);
    if (used + 1 >= len) return;
    const int n = snprintf(skipped + used, len - used, "%s%s: %s", used ? "; " : "", name, what);
    if (n >= 0 && (size_t)n >= len - used && len >= 4) memcpy(skipped + len - 4, "...", 4);
}

/* The backward pass: f16/bf16 on the matrix cores where that variant is built and takes the
 * shape, f32 on the tensor cores where backward_tf32x3 does; else the f32 CUDA-core variant.
 * Each dtype asks only its own matrix-core variant, so that a decline lists no variant that
 * could never have taken it. */
static flashport_status plan_backward(const fp_gpu_device_props *props, const fp_problem *p,
                                      fp_plan *out) {
    static const char *const order[] = {FP_MATRIX_BACKWARD_KERNEL, BACKWARD_TF32X3_KERNEL,
                                        BACKWARD_F32_KERNEL};
    static const char *const kinds[] = {
        FP_MATRIX_BACKWARD_KIND,
        "f32 backward on tensor cores (3xTF32 split, f32 accuracy)",
        "backward on CUDA cores in f32",
    };
    const int f32 = p->dtype == FLASHPORT_F32;
    const char *mode = p->deterministic ? "deterministic: dQ in a pass over query tiles"
                                        : "fast: dQ accumulated by f32 atomics";
    char why[192], skipped[192] = "";
    fp_gpu_kernel_params params;
    const int tried[] = {f32 ? 1 : 0, 2};
    for (int t = 0; t < 2; t++) {
        const int o = tried[t], i = find_kernel(order[o]);
        if (i < 0) {
            note_skip(skipped, sizeof skipped, order[o], "not built");
            continue;
        }
        if (!try_variant(i, props, p, FP_OP_BACKWARD, out, &params, why, sizeof why)) {
            note_skip(skipped, sizeof skipped, order[o], why);
            continue;
        }
        snprintf(out->reason, sizeof out->reason, "%s; %s%s%.120s", kinds[o], mode,
                 skipped[0] ? "; " : "", skipped);
        return FLASHPORT_OK;
    }
    snprintf(out->reason, sizeof out->reason, "every backward variant declined: %s", skipped);
    return FLASHPORT_ERROR_UNSUPPORTED;
}

flashport_status fp_gpu_plan(const fp_gpu_device_props *props, const fp_problem *p, fp_op op,
                             int forced, fp_plan *out) {
    char why[192];
    fp_gpu_kernel_params params;
    if (forced >= 0) {
        if (forced >= n_kernels) {
            snprintf(out->reason, sizeof out->reason, "no variant %d in this build", forced);
            return FLASHPORT_ERROR_UNSUPPORTED;
        }
        if (!try_variant(forced, props, p, op, out, &params, why, sizeof why)) {
            snprintf(out->reason, sizeof out->reason, "%s", why);
            return FLASHPORT_ERROR_UNSUPPORTED;
        }
        snprintf(out->reason, sizeof out->reason, "requested by name");
        return FLASHPORT_OK;
    }
    if (op == FP_OP_BACKWARD) return plan_backward(props, p, out);

    const int f32 = p->dtype == FLASHPORT_F32;
    const int rows = f32 ? FA2_F32_ROWS : FP_MATRIX_KERNEL_ROWS;
    const long long blocks = (long long)(p->batch * p->heads_q * ((p->seq_q + rows - 1) / rows));
    const int small_grid = blocks < props->sm_count;
    const char *plain = f32 ? "fa2_f32" : FP_MATRIX_KERNEL;
    const char *split = f32 ? "fa2_f32_split_kv" : FP_MATRIX_SPLIT_KERNEL;

    /* The preferred variants, each with what the reason calls it; the ladder follows. The
     * tensor-core f32 kernel goes first unless the grid is small (the split form then wins),
     * and is left out quietly where it is not built. */
    const int f32_tensor = f32 && find_kernel(F32_TENSOR_KERNEL) >= 0;
    const char *tensor_kind = "f32 on tensor cores (3xTF32 split, f32 accuracy)";
    const char *kind = f32 ? "f32 on CUDA cores" : "f16/bf16 on matrix cores";
    const char *order[8 + sizeof ladder_fallback / sizeof ladder_fallback[0]];
    const char *kinds[8];
    int n_order = 0;
    if (p->seq_q <= DECODE_MAX_QUERIES) {
        const int rows_per_kv_head = (int)(p->heads_q / p->heads_kv * p->seq_q);
        if (rows_per_kv_head > 1 && !f32 && find_kernel(DECODE_MMA_KERNEL) >= 0) {
            kinds[n_order] = "decode on tensor cores (rows of a kv head as the M of mma.sync)";
            order[n_order++] = DECODE_MMA_KERNEL;
        }
        if (find_kernel(DECODE_KERNEL) >= 0) {
            kinds[n_order] = "decode (few query rows per sequence: bound by reading K and V once)";
            order[n_order++] = DECODE_KERNEL;
        }
    }
    /* FP8 prefill: the Hopper FP8 variant (decode shapes go to `decode` above; every other
     * variant declines the feature by name). */
    if ((p->dtype == FLASHPORT_FP8_E4M3 || p->dtype == FLASHPORT_FP8_E5M2) &&
        props->cc_major == 9 && find_kernel(HOPPER_FP8_KERNEL) >= 0) {
        kinds[n_order] = "FP8 on Hopper (wgmma k32, P rounded to e4m3)";
        order[n_order++] = HOPPER_FP8_KERNEL;
    }
    if (f32 && p->head_dim > 256 && find_kernel(F32_WIDE_TENSOR_KERNEL) >= 0) {
        kinds[n_order] = "f32 on tensor cores (3xTF32 split, head dim across warps)";
        order[n_order++] = F32_WIDE_TENSOR_KERNEL;
    }
    const char *first = small_grid ? split : plain, *second = small_grid ? plain : split;
    const int hopper = !f32 && props->cc_major == 9 && find_kernel(HOPPER_KERNEL) >= 0;
    const char *hopper_kind = "f16/bf16 on Hopper (wgmma, TMA, warp specialisation)";
    /* Small grids go to the split-KV form first. Score modifiers and an additive bias (a tensor
     * read per score in both kernels) cost the Hopper kernel less than the mma.sync one on the
     * H200 (bench/results), so only the grid decides. */
    const int hopper_second = small_grid;
    if (hopper && !hopper_second) {
        kinds[n_order] = hopper_kind;
        order[n_order++] = HOPPER_KERNEL;
    }
    /* f32 on Hopper goes where the f16/bf16 Hopper kernel does: ahead of the mma.sync 3xTF32
     * kernel, which it replaces at the same accuracy, behind the split form on small grids. */
    const int hopper_f32 = f32 && props->cc_major == 9 && find_kernel(HOPPER_F32_KERNEL) >= 0;
    const char *hopper_f32_kind = "f32 on Hopper (3xTF32 split on wgmma, f32 accuracy)";
    if (hopper_f32 && !small_grid) {
        kinds[n_order] = hopper_f32_kind;
        order[n_order++] = HOPPER_F32_KERNEL;
    }
    if (f32_tensor && !small_grid) {
        kinds[n_order] = tensor_kind;
        order[n_order++] = F32_TENSOR_KERNEL;
    }
    kinds[n_order] = kind;
    order[n_order++] = first;
    if (hopper && hopper_second) {
        kinds[n_order] = hopper_kind;
        order[n_order++] = HOPPER_KERNEL;
    }
    if (hopper_f32 && small_grid) {
        kinds[n_order] = hopper_f32_kind;
        order[n_order++] = HOPPER_F32_KERNEL;
    }
    if (f32_tensor && small_grid) {
        kinds[n_order] = tensor_kind;
        order[n_order++] = F32_TENSOR_KERNEL;
    }
    kinds[n_order] = kind;
    order[n_order++] = second;
    const int n_preferred = n_order;
    for (size_t i = 0; i < sizeof ladder_fallback / sizeof ladder_fallback[0]; i++)
        order[n_order++] = ladder_fallback[i];

    char skipped[192] = "";
    for (int o = 0; o < n_order; o++) {
        const int i = find_kernel(order[o]);
        if (i < 0) {
            note_skip(skipped, sizeof skipped, order[o], "not built");
            continue;
        }
        if (!try_variant(i, props, p, FP_OP_FORWARD, out, &params, why, sizeof why)) {
            note_skip(skipped, sizeof skipped, order[o], why);
            continue;
        }
        if (strcmp(order[o], DECODE_KERNEL) == 0 || strcmp(order[o], DECODE_MMA_KERNEL) == 0)
            snprintf(out->reason, sizeof out->reason,
                     "%s; %d query rows per block, keys split %d ways for %d SMs", kinds[o],
                     params.decode.rows, params.decode.splits, props->sm_count);
        else if (strcmp(order[o], F32_WIDE_TENSOR_KERNEL) == 0)
            snprintf(out->reason, sizeof out->reason, "%s; keys split %d ways for %d SMs", kinds[o],
                     params.split_kv.splits, props->sm_count);
        else if (o == 0)
            snprintf(out->reason, sizeof out->reason, "%s; %lld blocks of ~%d rows for %d SMs",
                     kinds[o], blocks, rows, props->sm_count);
        else if (o < n_preferred)
            snprintf(out->reason, sizeof out->reason,
                     "%s; %lld blocks of ~%d rows for %d SMs; %.150s", kinds[o], blocks, rows,
                     props->sm_count, skipped);
        else
            snprintf(out->reason, sizeof out->reason, "ladder fallback (%.200s)", skipped);
        return FLASHPORT_OK;
    }
    snprintf(out->reason, sizeof out->reason, "every variant declined: %s", skipped);
    return FLASHPORT_ERROR_UNSUPPORTED;
}
