/*
 * Variant hopper_wgmma: the FlashAttention-3 style forward of hopper/forward_kernel.cuh for f16
 * and bf16 on compute capability 9.0 (wgmma, TMA, setmaxnreg), head dims 64, 128 and 256, causal
 * and sliding windows, softcap, ALiBi and bias (in instances of their own), sinks, GQA,
 * Nq != Nkv, LSE, packed batches (varlen) and paged K/V whose pages hold a multiple of 8 rows
 * that divides one of the head dim's key tiles or is a multiple of it (others are declined).
 *
 * This file is compiled for sm_90a only (FLASHPORT_CUDA_HOPPER_ARCHITECTURES), so the module
 * holds its kernels exactly when it holds sm_90a code for them; supports() asks the runtime
 * whether the device can load that code and declines with the reason when it cannot. Q, K and V
 * reach the kernel through TMA tensor maps, which need 16-byte aligned bases and strides (the
 * strides are checked here, the bases at launch). A packed tensor's map is one batch of its
 * total_q or total_kv rows; a paged cache's has a batch per page and copies a page at a time
 * where a page is smaller than a key tile.
 *
 * Written in CUDA C++ with inline PTX (hopper/wgmma_ops.cuh, hopper/tma_mbarrier.cuh), not on
 * CUTLASS/CuTe: the kernel needs a dozen instructions, and their layouts are stated once in
 * hopper/fragment_layout.h and checked on the host (tests/cuda_hopper_layout); CUTLASS would
 * add a header tree that reaches a fresh machine only through pip (nvidia-cutlass), outside
 * the CMake build every other kernel of this module uses.
 */
#include <math.h>
#include <stdio.h>

#include "../common/attention_args.cuh"
#include "../common/config_env.h"
#include "../common/smem_limit.cuh"
#include "forward_kernel.cuh"
#include "tensor_map.h"

/* The modifiers that the kernel takes in its SCORES and BIAS instances (forward_kernel.cuh,
 * fp_hopper_mods). Sinks enter only the final division and ride in every instance: the dense
 * one keeps its registers with them (ptxas -v: no spills either way). */
#define FP_HOPPER_MODS (FP_FEATURE_SOFTCAP | FP_FEATURE_ALIBI | FP_FEATURE_BIAS)

/* Environment variable that picks the consumer warpgroups for tuning: 0 two, 1 three (where an
 * instance has them); unset or empty: the choice of choose_instance. */
#define FP_HOPPER_CONFIG_ENV "FLASHPORT_CUDA_HOPPER_CONFIG"
/* The long queries that take an instance of three consumers where the head dim has one
 * (fp_hopper_tile::CONSUMERS_LONG): at least LONG_QUERY rows, and at least LONG_WAVES blocks of
 * its 192 rows per SM, so that the last partial wave weighs little. Shorter queries and smaller
 * grids ran faster with two, and grids near the bound level (bench/results,
 * 2026-12-06_h100_hopper-d64-three-consumers and 2026-12-07_h100_hopper-d64-three-consumers). */
#define FP_HOPPER_LONG_QUERY 2048
#define FP_HOPPER_LONG_WAVES 4

template <typename T, int D, int BC, fp_hopper_mods MODS, int C> static const void *kernel_of() {
    return reinterpret_cast<const void *>(fp_hopper_forward_kernel<T, D, BC, MODS, C>);
}

template <typename T, int D, int BC, fp_hopper_mods MODS, int C>
static cudaError_t launch_instance(const CUtensorMap &qm, const CUtensorMap &km,
                                   const CUtensorMap &vm, const fp_hopper_params &prm, dim3 grid,
                                   cudaStream_t stream) {
    using Block = fp_hopper_block<C>;
    constexpr size_t smem = fp_hopper_smem<T, D, BC, Block::BR, MODS == FP_HOPPER_MODS_BIAS>::BYTES;
    cudaError_t err = fp_raise_smem_limit<fp_hopper_forward_kernel<T, D, BC, MODS, C>, smem>();
    if (err != cudaSuccess) return err;
    fp_hopper_forward_kernel<T, D, BC, MODS, C>
        <<<grid, Block::THREADS, smem, stream>>>(qm, km, vm, prm);
    return cudaGetLastError();
}

typedef cudaError_t (*instance_launcher)(const CUtensorMap &, const CUtensorMap &,
                                         const CUtensorMap &, const fp_hopper_params &, dim3,
                                         cudaStream_t);

/* One built instance: head dim, key tile, the modifiers it computes, its consumer warpgroups
 * and query rows a block, its shared memory, and its entry points by input type (0 f16,
 * 1 bf16). */
struct hopper_instance {
    int d, key_tile;
    fp_hopper_mods mods;
    int consumers, block_rows;
    size_t smem;
    const void *(*kernel[2])();
    instance_launcher launch[2];
};
#define FP_HOPPER_INSTANCE(D, BC, MODS, C)                                                         \
    {                                                                                              \
        D, BC, MODS, C, fp_hopper_block<C>::BR,                                                    \
            fp_hopper_smem<__half, D, BC, fp_hopper_block<C>::BR,                                  \
                           MODS == FP_HOPPER_MODS_BIAS>::BYTES,                                    \
            {kernel_of<__half, D, BC, MODS, C>, kernel_of<__nv_bfloat16, D, BC, MODS, C>}, {       \
            launch_instance<__half, D, BC, MODS, C>,                                               \
                launch_instance<__nv_bfloat16, D, BC, MODS, C>                                     \
        }                                                                                          \
    }
/* Per head dim, the tiles of fp_hopper_tile with two consumers: the preferred ones of each kind
 * of modifiers first, then the power-of-two tile for pages that do not fit them (where it is
 * the same tile, the entry repeats one above and is never reached; the BIAS instance serves
 * softcap and ALiBi there too); then, where long queries take more than two consumers, the
 * preferred tiles with them. d = 256 has no SCORES instance: softcap ran 10% slower in it than
 * in the BIAS instance, which serves both there (bench/results,
 * 2026-12-07_h100_hopper-scores-instances). */
#define FP_HOPPER_SCORES(D)                                                                        \
    FP_HOPPER_INSTANCE(D, fp_hopper_tile<D>::BC_MODS, FP_HOPPER_MODS_SCORES, 2)
#define FP_HOPPER_HEAD_DIM(D)                                                                      \
    FP_HOPPER_INSTANCE(D, fp_hopper_tile<D>::BC, FP_HOPPER_MODS_NONE, 2),                          \
        FP_HOPPER_INSTANCE(D, fp_hopper_tile<D>::BC_MODS, FP_HOPPER_MODS_BIAS, 2),                 \
        FP_HOPPER_INSTANCE(D, fp_hopper_tile<D>::BC_POW2, FP_HOPPER_MODS_NONE, 2),                 \
        FP_HOPPER_INSTANCE(D, fp_hopper_tile<D>::BC_POW2, FP_HOPPER_MODS_BIAS, 2)
#define FP_HOPPER_LONG(D, MODS)                                                                    \
    FP_HOPPER_INSTANCE(D, fp_hopper_tile<D>::BC, MODS, fp_hopper_tile<D>::CONSUMERS_LONG)
static_assert(fp_hopper_tile<64>::BC == fp_hopper_tile<64>::BC_MODS,
              "the long-query instances share one tile");
static const hopper_instance instances[] = {FP_HOPPER_HEAD_DIM(64),
                                            FP_HOPPER_SCORES(64),
                                            FP_HOPPER_LONG(64, FP_HOPPER_MODS_NONE),
                                            FP_HOPPER_LONG(64, FP_HOPPER_MODS_SCORES),
                                            FP_HOPPER_LONG(64, FP_HOPPER_MODS_BIAS),
                                            FP_HOPPER_HEAD_DIM(128),
                                            FP_HOPPER_SCORES(128),
                                            FP_HOPPER_HEAD_DIM(256)};
static_assert(fp_hopper_tile<128>::CONSUMERS_LONG == 2 && fp_hopper_tile<256>::CONSUMERS_LONG == 2,
              "the table holds a long-query instance at d = 64 alone");
#undef FP_HOPPER_LONG
#undef FP_HOPPER_HEAD_DIM
#undef FP_HOPPER_SCORES
#undef FP_HOPPER_INSTANCE
static constexpr int instance_count = (int)(sizeof instances / sizeof instances[0]);

/* Whether the instance table holds head dim d. */
static bool head_dim_built(int64_t d) {
    for (const hopper_instance &in : instances)
        if (in.d == d) return true;
    return false;
}

/* The reason for a head dim no instance has: the head dims the table holds. */
static void head_dims_declined(int64_t d, char *why, size_t why_len) {
    size_t used = (size_t)snprintf(why, why_len, "head_dim %lld: only", (long long)d);
    int last = 0;
    for (const hopper_instance &in : instances)
        if (in.d != last && used < why_len) {
            used += (size_t)snprintf(why + used, why_len - used, "%s %d", last ? "," : "", in.d);
            last = in.d;
        }
    if (used < why_len) snprintf(why + used, why_len - used, " are built");
}

/* Whether a paged cache's pages fit a key tile: TMA copies whole pages of a multiple of 8 rows,
 * so a page divides the tile or is a multiple of it. Other layouts fit every tile. */
static bool pages_fit(const fp_problem *p, int key_tile) {
    return p->kv_layout != FLASHPORT_KV_PAGED ||
           (p->page_size % 8 == 0 &&
            (key_tile % p->page_size == 0 || p->page_size % key_tile == 0));
}

/* The modifiers p needs an instance to compute (fp_hopper_mods). */
static fp_hopper_mods mods_needed(const fp_problem *p) {
    const unsigned f = fp_problem_features(p, FP_OP_FORWARD);
    if (f & FP_FEATURE_BIAS) return FP_HOPPER_MODS_BIAS;
    if (f & (FP_FEATURE_SOFTCAP | FP_FEATURE_ALIBI)) return FP_HOPPER_MODS_SCORES;
    return FP_HOPPER_MODS_NONE;
}

/* The index of the instance that runs p with `consumers` consumer warpgroups: its head dim,
 * the first key tile that its pages fit in an instance of the modifiers p needs, else in one of
 * a wider kind (the dense instances never take modifiers); -1 when none is built. */
static int find_instance(const fp_problem *p, int consumers) {
    const fp_hopper_mods need = mods_needed(p);
    const int widest = need == FP_HOPPER_MODS_NONE ? FP_HOPPER_MODS_NONE : FP_HOPPER_MODS_BIAS;
    for (int kind = need; kind <= widest; ++kind)
        for (int i = 0; i < instance_count; ++i) {
            const hopper_instance &in = instances[i];
            if (in.d == p->head_dim && in.mods == kind && in.consumers == consumers &&
                pages_fit(p, in.key_tile))
                return i;
        }
    return -1;
}

/* Whether p is a long query (FP_HOPPER_LONG_QUERY, FP_HOPPER_LONG_WAVES) for blocks of
 * block_rows rows on the device's SMs. */
static bool long_query(const fp_problem *p, const fp_gpu_device_props *props, int block_rows) {
    const int64_t blocks = (p->seq_q + block_rows - 1) / block_rows * p->batch * p->heads_q;
    return p->seq_q >= FP_HOPPER_LONG_QUERY &&
           blocks >= (int64_t)FP_HOPPER_LONG_WAVES * props->sm_count;
}

/* Why p has no instance of three consumers: its head dim, or its pages. */
static void three_declined(const fp_problem *p, char *why, size_t why_len) {
    size_t used = (size_t)snprintf(why, why_len, "%s=1: three consumer warpgroups are built ",
                                   FP_HOPPER_CONFIG_ENV);
    if (used >= why_len) return;
    if (p->head_dim != 64)
        snprintf(why + used, why_len - used, "at d = 64 only, not %lld", (long long)p->head_dim);
    else
        snprintf(why + used, why_len - used,
                 "for the 128-key tile, which a %s of %lld-row pages does not fit",
                 fp_feature_name(FP_FEATURE_PAGED), (long long)p->page_size);
}

/* The instance index for p: FP_HOPPER_CONFIG_ENV's choice when set, else three consumers for a
 * long query where an instance has them, else two; -1 and the reason in why when none fits. */
static int choose_instance(const fp_problem *p, const fp_gpu_device_props *props, char *why,
                           size_t why_len) {
    const int config = fp_config_from_env(FP_HOPPER_CONFIG_ENV, (int)p->head_dim, 2, why, why_len);
    if (config == -1) return -1;
    const int three = find_instance(p, 3);
    if (config == 1 && three == -1) {
        three_declined(p, why, why_len);
        return -1;
    }
    if (config == 1 || (config == FP_CONFIG_ENV_UNSET && three != -1 &&
                        long_query(p, props, instances[three].block_rows)))
        return three;
    const int two = find_instance(p, 2);
    if (two == -1)
        snprintf(why, why_len,
                 "paged KV cache with %lld-row pages: TMA copies whole pages of a multiple of 8 "
                 "rows that divide a key tile of d = %lld or are a multiple of it",
                 (long long)p->page_size, (long long)p->head_dim);
    return two;
}

/* The batches and rows a tensor map spans: the problem's, one batch of the packed rows, or a
 * paged cache's pages. */
struct map_shape {
    int64_t batch, rows;
};
static map_shape q_shape(const fp_problem *p) {
    return p->q_varlen ? map_shape{1, p->total_q} : map_shape{p->batch, p->seq_q};
}
static map_shape kv_shape(const fp_problem *p) {
    switch (p->kv_layout) {
    case FLASHPORT_KV_VARLEN: return map_shape{1, p->total_kv};
    case FLASHPORT_KV_PAGED: return map_shape{p->num_pages, p->page_size};
    default: return map_shape{p->batch, p->seq_kv};
    }
}

/* Rows of one K/V copy: the key tile, or a page where pages are smaller. */
static int kv_box_rows(const fp_problem *p, int key_tile) {
    return p->kv_layout == FLASHPORT_KV_PAGED && p->page_size < key_tile ? (int)p->page_size
                                                                         : key_tile;
}

static int supports(const fp_problem *p, const fp_gpu_device_props *props,
                    fp_gpu_kernel_params *params, char *why, size_t why_len) {
    if (p->dtype != FLASHPORT_F16 && p->dtype != FLASHPORT_BF16) {
        snprintf(why, why_len, "takes f16 or bf16 inputs only");
        return 0;
    }
    if (!head_dim_built(p->head_dim)) {
        head_dims_declined(p->head_dim, why, why_len);
        return 0;
    }
    if (!fp_attn_sizes_fit(p, why, why_len)) return 0;
    const int index = choose_instance(p, props, why, why_len);
    if (index == -1) return 0;
    const hopper_instance *in = &instances[index];
    const map_shape qs = q_shape(p), kvs = kv_shape(p);
    if (qs.rows < 1 || kvs.rows < 1) {
        snprintf(why, why_len,
                 "a packed Q or K/V of no rows (total_q %lld, total_kv %lld) has no TMA map",
                 (long long)qs.rows, (long long)kvs.rows);
        return 0;
    }
    if (!fp_hopper_strides_fit("Q", &p->q, qs.batch, p->heads_q, qs.rows, 2, why, why_len) ||
        !fp_hopper_strides_fit("K", &p->k, kvs.batch, p->heads_kv, kvs.rows, 2, why, why_len) ||
        !fp_hopper_strides_fit("V", &p->v, kvs.batch, p->heads_kv, kvs.rows, 2, why, why_len))
        return 0;
    /* The module holds sm_90a code for this kernel or none: ask whether the device loads it. */
    if (!fp_hopper_device_fits(props, in->smem, in->kernel[p->dtype == FLASHPORT_BF16](), why,
                               why_len))
        return 0;
    params->tile.config = index;
    return 1;
}

static cudaError_t launch(const fp_gpu_launch *L) {
    const fp_problem *p = &L->p;
    const int index = L->params->tile.config;
    if (index < 0 || index >= instance_count || instances[index].d != p->head_dim)
        return cudaErrorInvalidValue;
    const hopper_instance *in = &instances[index];
    CUtensorMap qm, km, vm;
    const map_shape qs = q_shape(p), kvs = kv_shape(p);
    cudaError_t err = fp_hopper_encode(&qm, L->q, p->dtype, &p->q, qs.batch, p->heads_q, qs.rows,
                                       p->head_dim, in->block_rows);
    if (err == cudaSuccess)
        err = fp_hopper_encode(&km, L->k, p->dtype, &p->k, kvs.batch, p->heads_kv, kvs.rows,
                               p->head_dim, kv_box_rows(p, in->key_tile));
    if (err == cudaSuccess)
        err = fp_hopper_encode(&vm, L->v, p->dtype, &p->v, kvs.batch, p->heads_kv, kvs.rows,
                               p->head_dim, kv_box_rows(p, in->key_tile));
    if (err != cudaSuccess) return err;

    const fp_hopper_params prm = fp_hopper_params_make(L, kv_box_rows(p, in->key_tile));
    const dim3 grid((unsigned)((p->seq_q + in->block_rows - 1) / in->block_rows),
                    (unsigned)(p->batch * p->heads_q));
    return in->launch[p->dtype == FLASHPORT_BF16](qm, km, vm, prm, grid, L->stream);
}

/* Declared here as kernel_list.h declares it, so that the definition has external linkage. */
extern const fp_gpu_kernel fp_kernel_hopper_wgmma;
const fp_gpu_kernel fp_kernel_hopper_wgmma = {
    {"hopper_wgmma",
     "FlashAttention-3 style forward on Hopper (wgmma, TMA ring, warp specialisation, "
     "setmaxnreg), f16/bf16, d = 64, 128 and 256; windows, softcap, ALiBi, bias, sinks, "
     "packed batches, paged K/V (pages of a multiple of 8 rows)",
     FP_PRECISION_NATIVE,
     FP_FEATURE_WINDOW | FP_FEATURE_SINKS | FP_FEATURE_VARLEN | FP_FEATURE_PAGED | FP_HOPPER_MODS},
    supports,
    NULL,
    launch,
};
