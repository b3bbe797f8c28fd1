/*
 * Variant tensor_core_mma: FlashAttention-2 forward for f16 and bf16 on the tensor cores
 * (mma/flash_forward_kernel.cuh), one pass over the keys. This file also holds the host side
 * the split-KV variant shares: the support check and the launcher of every kernel instance.
 *
 * Tile configuration: each padded head dim has a few compiled candidates (mma/tile_configs.h),
 * and runs the default one of the problem's instance (or, on a device with less shared memory
 * than the default needs, the lowest-numbered one that fits). For tuning,
 * FLASHPORT_CUDA_TC_CONFIG=<index> runs candidate <index> of the problem's padded head dim instead,
 * in both variants; an index the head dim does not have makes the variants decline the problem with
 * that reason (the planner then says so, and falls back to the next variant). The configuration
 * chosen is the plan's fp_gpu_tile_params (fp_split_kv_params.tile in the split variant).
 *
 * Instances: per configuration and input type, dense problems run one of two instances (element
 * loads, or cp.async where Q, K and V allow it) in which the compiler has folded every API v2
 * feature away; problems with features run one of four more, cp.async only (so supports()
 * asks for strides in whole 16-byte chunks): the paged one for a paged cache alone (the dense
 * instance with the block-table look-up), the softcap-ALiBi one for those modifiers on a dense
 * layout (the dense instance with them compiled in), the masked one for other layouts and
 * windows, the modified one for modifiers beside them or a bias (fp_attn_instance_of). Sinks ride
 * in every instance (the rows' softmax starts from them); a problem whose one feature is sinks runs
 * the dense cp.async instance.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/attention_args.cuh"
#include "common/config_env.h"
#include "common/instance_head_dim.h"
#include "common/smem_limit.cuh"
#include "mma/flash_forward.h"
#include "mma/flash_forward_kernel.cuh"
#include "split_kv.h"

/* Whether p's visible keys lie in a band of at most FP_TC_NARROW_WINDOW_KEYS a query row. */
static int narrow_window(const fp_problem *p) {
    const int64_t right = p->causal ? 0 : p->window_right;
    return p->window_left >= 0 && right >= 0 &&
           p->window_left + right + 1 <= FP_TC_NARROW_WINDOW_KEYS;
}

/* The default configuration of a padded head dim for the instance p runs. */
static int default_config(int padded_d, const fp_problem *p) {
    static const int configs[5][3] = {
        {FP_TC_DEFAULT_CONFIG_D64, FP_TC_DEFAULT_CONFIG_D128, FP_TC_DEFAULT_CONFIG_D256},
        {FP_TC_PAGED_CONFIG_D64, FP_TC_PAGED_CONFIG_D128, FP_TC_PAGED_CONFIG_D256},
        {FP_TC_SOFTCAP_ALIBI_CONFIG_D64, FP_TC_SOFTCAP_ALIBI_CONFIG_D128,
         FP_TC_SOFTCAP_ALIBI_CONFIG_D256},
        {FP_TC_MASKED_CONFIG_D64, FP_TC_MASKED_CONFIG_D128, FP_TC_MASKED_CONFIG_D256},
        {FP_TC_MODIFIED_CONFIG_D64, FP_TC_MODIFIED_CONFIG_D128, FP_TC_MODIFIED_CONFIG_D256},
    };
    static const int narrow[3] = {FP_TC_NARROW_WINDOW_CONFIG_D64, FP_TC_NARROW_WINDOW_CONFIG_D128,
                                  FP_TC_NARROW_WINDOW_CONFIG_D256};
    const int col = padded_d == 64 ? 0 : padded_d == 128 ? 1 : 2;
    const enum fp_attn_instance features = fp_attn_instance_of(p);
    if (features == FP_ATTN_MASKED && narrow_window(p)) return narrow[col];
    return configs[features][col];
}

typedef gpuError_t (*instance_launcher)(const fp_tc_params &prm, dim3 grid, gpuStream_t stream);

/* The kernel instances of one configuration and type: dense problems by element loads or by
 * cp.async, and problems with API v2 features, a paged cache alone, softcap and ALiBi on a dense
 * layout, others without and with score modifiers (by cp.async only). */
enum {
    TC_DENSE_SYNC,
    TC_DENSE_ASYNC,
    TC_PAGED,
    TC_SOFTCAP_ALIBI,
    TC_MASKED,
    TC_MODIFIED,
    TC_PATHS
};

/* One compiled configuration: the numbers the host needs and its launchers, indexed by input
 * type (0 f16, 1 bf16) and path. */
struct tc_instance {
    int d, index, block_keys;
    size_t smem;
    instance_launcher launch[2][TC_PATHS];
};

template <typename T, typename Cfg, bool ASYNC, int FEATURES>
static gpuError_t launch_instance(const fp_tc_params &prm, dim3 grid, gpuStream_t stream) {
    gpuError_t err =
        fp_raise_smem_limit<fp_tc_forward_kernel<T, Cfg, ASYNC, FEATURES>, Cfg::SMEM_BYTES>();
    if (err != gpuSuccess) return err;
    constexpr int threads = Cfg::WARPS * 32;
    fp_tc_forward_kernel<T, Cfg, ASYNC, FEATURES> FP_GPU_LAUNCH(grid, threads, Cfg::SMEM_BYTES,
                                                                stream)(prm);
    return gpuGetLastError();
}

#define FP_TC_LAUNCHERS(T, d, index)                                                               \
    {                                                                                              \
        launch_instance<T, fp_tc_config<d, index>, false, FP_ATTN_DENSE>,                          \
            launch_instance<T, fp_tc_config<d, index>, true, FP_ATTN_DENSE>,                       \
            launch_instance<T, fp_tc_config<d, index>, true, FP_ATTN_PAGED>,                       \
            launch_instance<T, fp_tc_config<d, index>, true, FP_ATTN_SOFTCAP_ALIBI>,               \
            launch_instance<T, fp_tc_config<d, index>, true, FP_ATTN_MASKED>,                      \
            launch_instance<T, fp_tc_config<d, index>, true, FP_ATTN_MODIFIED>                     \
    }
#define FP_TC_INSTANCE(d, index, warps, m_tiles, bc, stages, q_in_regs, min_blocks)                \
    {d,                                                                                            \
     index,                                                                                        \
     bc,                                                                                           \
     fp_tc_config<d, index>::SMEM_BYTES,                                                           \
     {FP_TC_LAUNCHERS(__half, d, index), FP_TC_LAUNCHERS(__nv_bfloat16, d, index)}},
static const tc_instance instances[] = {FP_TC_CONFIG_LIST(FP_TC_INSTANCE)};
#undef FP_TC_INSTANCE
#undef FP_TC_LAUNCHERS
static const int n_instances = (int)(sizeof instances / sizeof instances[0]);

/* Configuration `index` of a padded head dim; NULL when it has none of that number. */
static const tc_instance *find_instance(int padded_d, int index) {
    for (int i = 0; i < n_instances; ++i)
        if (instances[i].d == padded_d && instances[i].index == index) return &instances[i];
    return NULL;
}

static int config_count(int padded_d) {
    int n = 0;
    while (find_instance(padded_d, n)) ++n;
    return n;
}

/* The configuration index for padded head dim padded_d: FP_TC_CONFIG_ENV when set and not
 * empty (*named = 1), else the default of the problem's instance. -1 and the reason in why
 * when the variable names no config. */
static int choose_config(int padded_d, const fp_problem *p, int *named, char *why, size_t why_len) {
    const int index =
        fp_config_from_env(FP_TC_CONFIG_ENV, padded_d, config_count(padded_d), why, why_len);
    *named = index != FP_CONFIG_ENV_UNSET;
    return *named ? index : default_config(padded_d, p);
}

static int aligned(const void *ptr, unsigned bytes) { return ((uintptr_t)ptr % bytes) == 0; }

/* cp.async moves whole 16-byte chunks: every row start must be 16-byte aligned. */
static int chunk_aligned(const void *base, const flashport_strides *s) {
    return aligned(base, 16) && s->batch % 8 == 0 && s->head % 8 == 0 && s->seq % 8 == 0;
}

int fp_tc_block_keys(int64_t head_dim, int config) {
    const tc_instance *in = find_instance(fp_instance_head_dim(head_dim), config);
    return in ? in->block_keys : 0;
}

int fp_tc_forward_support(const fp_problem *p, const fp_gpu_device_props *props, int *config,
                          char *why, size_t why_len) {
    if (props->cc_major < 8) {
        snprintf(why, why_len,
                 "needs compute capability 8.0+ (mma.sync, cp.async), device is %d.%d",
                 props->cc_major, props->cc_minor);
        return 0;
    }
    if (p->dtype != FLASHPORT_F16 && p->dtype != FLASHPORT_BF16) {
        snprintf(why, why_len, "tensor-core path takes f16 or bf16 inputs, not f32");
        return 0;
    }
    if (p->head_dim > 256) {
        snprintf(why, why_len, "head_dim %lld > 256", (long long)p->head_dim);
        return 0;
    }
    if (!fp_attn_sizes_fit(p, why, why_len)) return 0;
    if (!fp_attn_general_strides_fit(p, 8, why, why_len)) return 0;
    const int padded_d = fp_instance_head_dim(p->head_dim);
    int named = 0;
    *config = choose_config(padded_d, p, &named, why, why_len);
    if (*config < 0) return 0;
    /* A default sized for sm_90 may not fit a device with less shared memory; unless the config
     * was named, the lowest-numbered one that fits stands in for it. */
    if (!named && find_instance(padded_d, *config)->smem > props->smem_per_block_optin)
        for (int i = 0; find_instance(padded_d, i); ++i)
            if (find_instance(padded_d, i)->smem <= props->smem_per_block_optin) {
                *config = i;
                break;
            }
    const size_t smem = find_instance(padded_d, *config)->smem;
    if (smem > props->smem_per_block_optin) {
        snprintf(why, why_len,
                 "tile config %d of d=%d needs %zu bytes of shared memory a block, device "
                 "allows %zu",
                 *config, padded_d, smem, props->smem_per_block_optin);
        return 0;
    }
    return 1;
}

gpuError_t fp_tc_forward_launch(const fp_gpu_launch *L, int config, int splits, int keys_per_split,
                                float *part_o, float *part_ml) {
    const fp_problem *p = &L->p;
    const tc_instance *in = find_instance(fp_instance_head_dim(p->head_dim), config);
    if (!in) return cudaErrorInvalidValue;
    fp_tc_params prm;
    prm.q = L->q;
    prm.k = L->k;
    prm.v = L->v;
    prm.o = L->o;
    prm.lse = splits ? NULL : L->lse;
    prm.part_o = splits ? part_o : NULL;
    prm.part_ml = splits ? part_ml : NULL;
    prm.qs = p->q;
    prm.ks = p->k;
    prm.vs = p->v;
    prm.os = p->o;
    prm.seq = fp_seq_layout_make(p, L->args);
    prm.mods = fp_score_mods_make(p, L->args);
    prm.mods.scale = fabsf(p->scale); /* a negative scale flips Q instead */
    prm.rows = fp_split_kv_rows(p);
    prm.group = (int)(p->heads_q / p->heads_kv);
    prm.d = (int)p->head_dim;
    prm.keys_per_split = splits ? keys_per_split : (int)p->seq_kv;
    prm.scale_log2 = fabsf(p->scale) * FP_LOG2E;
    prm.negate_q = p->scale < 0.0f;
    prm.o_pairs =
        aligned(L->o, 4) && p->o.batch % 2 == 0 && p->o.head % 2 == 0 && p->o.seq % 2 == 0;

    const dim3 grid((unsigned)((p->seq_q + FP_TC_BLOCK_ROWS - 1) / FP_TC_BLOCK_ROWS),
                    (unsigned)(p->batch * p->heads_q), (unsigned)(splits ? splits : 1));
    const int async =
        chunk_aligned(L->q, &p->q) && chunk_aligned(L->k, &p->k) && chunk_aligned(L->v, &p->v);
    /* supports() checked the strides of a general problem; only the pointers can be checked
     * here. */
    if (fp_attn_general(p) && !async) return gpuErrorMisalignedAddress;
    const enum fp_attn_instance features = fp_attn_instance_of(p);
    const int path = features == FP_ATTN_MODIFIED        ? TC_MODIFIED
                     : features == FP_ATTN_MASKED        ? TC_MASKED
                     : features == FP_ATTN_PAGED         ? TC_PAGED
                     : features == FP_ATTN_SOFTCAP_ALIBI ? TC_SOFTCAP_ALIBI
                     : async                             ? TC_DENSE_ASYNC
                                                         : TC_DENSE_SYNC;
    return in->launch[p->dtype == FLASHPORT_BF16][path](prm, grid, L->stream);
}

static int supports(const fp_problem *p, const fp_gpu_device_props *props,
                    fp_gpu_kernel_params *params, char *why, size_t why_len) {
    return fp_tc_forward_support(p, props, &params->tile.config, why, why_len);
}

static gpuError_t launch(const fp_gpu_launch *L) {
    return fp_tc_forward_launch(L, L->params->tile.config, 0, 0, NULL, NULL);
}

/* Declared here as kernel_list.h declares it, so that the definition has external linkage. */
extern const fp_gpu_kernel fp_kernel_tensor_core_mma;
const fp_gpu_kernel fp_kernel_tensor_core_mma = {
    {"tensor_core_mma",
     "FlashAttention-2 forward on tensor cores (mma.sync m16n8k16, ldmatrix, cp.async), f16/bf16; "
     "varlen and paged K/V, windows, softcap, ALiBi, bias, sinks",
     FP_PRECISION_NATIVE, FP_GPU_FEATURES_NO_FP8},
    supports,
    NULL,
    launch,
};
