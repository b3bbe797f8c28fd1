/*
 * The portable kernel of the OpenCL backend (kernels/attention_tiled.cl): its tile shape, its
 * build options and its work-groups. It takes every problem on every device whose work-group and
 * local-memory limits hold one of its tiles.
 *
 * The tile shape comes from the device's properties (work-group limit, local memory,
 * device type) and the problem (head dim, query count), and can be overridden for tuning with
 * FLASHPORT_OPENCL_TILE, comma-separated key=value items (any subset of the keys):
 *   br, bc  query rows per work-group, keys per block
 *   tm, tn  score register tile per work-item (rows x keys); work-items = (br/tm)*(bc/tn)
 *   kc, vc  head-dim columns of K (and Q) staged per step, V rows staged per step
 *   dv      output columns per work-group (wider heads are split into slices)
 *   om      output rows per work-item (its columns follow: br*dv / (work-items*om), a
 *           multiple of 4); default: 8 columns where there are 32 or more outputs, else 4
 *   qr      1: Q stays resident in local memory for the whole key walk, 0: Q is staged with
 *           each K chunk; default: 1 where it fits the device's local memory
 *   pf      1: the next K (and Q) chunk is loaded into registers while the current one is
 *           multiplied; default 0 (a paged KV cache needs 0)
 *   rg      NVIDIA only: at most this many registers per work-item (-cl-nv-maxrregcount),
 *           0 for the compiler's choice; default 128 for d <= 64 and 168 for d <= 128 with
 *           the default tiles, 0 otherwise (also when the override sets any key above);
 *           ignored on other devices
 *   ur      1: loops over register tiles are unrolled fully (default on GPUs), 0: left to the
 *           compiler (default on CPUs, where PoCL builds far faster so)
 * e.g. FLASHPORT_OPENCL_TILE="br=64,bc=64,tm=4,tn=8,om=8,qr=0,pf=1,rg=168".
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feature_args.h"
#include "kernel_list.h"
#include "kernel_sources.h"

static const char *const tile_keys[FP_CL_TILE_KEYS] = {"br", "bc", "tm", "tn", "kc", "vc",
                                                       "dv", "om", "qr", "pf", "rg", "ur"};

/* The tile shape is worked out in 64 bits and stored in the parameters once check_shape has
 * passed, when every key fits in 32. */
static void tile_of(const fp_cl_kernel_params *params, int64_t *t) {
    for (int i = 0; i < FP_CL_TILE_KEYS; i++) t[i] = params->tiled.tile[i];
}

static void store_tile(const int64_t *t, fp_cl_kernel_params *params) {
    for (int i = 0; i < FP_CL_TILE_KEYS; i++) params->tiled.tile[i] = (int32_t)t[i];
}

static int64_t work_items(const int64_t *t) {
    return (t[FP_CL_P_BR] / t[FP_CL_P_TM]) * (t[FP_CL_P_BC] / t[FP_CL_P_TN]);
}

/* The head dim rounded up to a multiple of kc: the width of the resident Q. */
static int64_t q_width(const int64_t *t, int64_t head_dim) {
    return (head_dim + t[FP_CL_P_KC] - 1) / t[FP_CL_P_KC] * t[FP_CL_P_KC];
}

/* Local memory of a tile, the paged cache's per-block row offsets included. */
static size_t tile_local_bytes(const int64_t *t, const fp_problem *p) {
    int64_t br = t[FP_CL_P_BR], bc = t[FP_CL_P_BC], kc_pad = t[FP_CL_P_KC] + 4;
    int64_t qk = (t[FP_CL_P_QR] ? bc : br + bc) * kc_pad;
    int64_t vv = t[FP_CL_P_VC] * t[FP_CL_P_DV];
    int64_t floats = (qk > vv ? qk : vv) + br * (bc + 8) + br * (bc / t[FP_CL_P_TN] + 1) + br;
    if (t[FP_CL_P_QR]) floats += br * (q_width(t, p->head_dim) + 4);
    int64_t row_offsets = p->kv_layout == FLASHPORT_KV_PAGED ? 2 * bc : 0;
    return (size_t)floats * sizeof(float) + (size_t)row_offsets * sizeof(int64_t);
}

/* 1, and why, when a key (every key, or those marked in only[]) is outside its range. */
static int out_of_range(const int64_t *t, const int *only, char *why, size_t len) {
    for (int i = 0; i < FP_CL_TILE_KEYS; i++) {
        int64_t lo = i >= FP_CL_P_QR ? 0 : 1;
        int64_t hi = i == FP_CL_P_RG ? 255 : i >= FP_CL_P_QR ? 1 : 1024;
        if ((!only || only[i]) && (t[i] < lo || t[i] > hi)) {
            snprintf(why, len, "tile %s=%lld is outside %lld..%lld", tile_keys[i], (long long)t[i],
                     (long long)lo, (long long)hi);
            return 1;
        }
    }
    return 0;
}

/* "" when the shape can run on the device, else why not. */
static void check_shape(const fp_cl_device_desc *dev, const int64_t *t, const fp_problem *p,
                        char *why, size_t len) {
    why[0] = '\0';
    if (out_of_range(t, NULL, why, len)) return;
    if (t[FP_CL_P_BR] % t[FP_CL_P_TM] || t[FP_CL_P_BC] % t[FP_CL_P_TN] ||
        t[FP_CL_P_BC] % t[FP_CL_P_VC] || t[FP_CL_P_KC] % 4 || t[FP_CL_P_VC] % 4) {
        snprintf(why, len, "tile shape needs tm | br, tn | bc, vc | bc, and kc, vc multiples of 4");
        return;
    }
    int64_t threads = work_items(t);
    if ((size_t)threads > dev->max_work_group) {
        snprintf(why, len, "tile needs %lld work-items per group, the device allows %zu",
                 (long long)threads, dev->max_work_group);
        return;
    }
    int64_t om = t[FP_CL_P_OM], row_items = t[FP_CL_P_BR] / om;
    if (t[FP_CL_P_BR] % om || threads % row_items || t[FP_CL_P_DV] % (4 * (threads / row_items))) {
        snprintf(why, len,
                 "output tile needs om | br, (br/om) | work-items, and dv a multiple of 4 "
                 "columns per work-item across the row");
        return;
    }
    if (t[FP_CL_P_PF] && p->kv_layout == FLASHPORT_KV_PAGED) {
        snprintf(why, len,
                 "tile pf=1 prefetches a block before the paged KV cache's block table "
                 "is read for it: a paged cache needs pf=0");
        return;
    }
    size_t local = tile_local_bytes(t, p);
    if (local > dev->local_mem)
        snprintf(why, len, "tile needs %zu bytes of local memory, the device has %llu", local,
                 (unsigned long long)dev->local_mem);
}

/* Applies FLASHPORT_OPENCL_TILE, marking the keys it sets in given[]; returns 0 and says why
 * when it does not parse. */
static int apply_override(const char *text, int64_t *t, int *given, char *why, size_t len) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *item = strtok(buf, ", "); item; item = strtok(NULL, ", ")) {
        char original[64];
        snprintf(original, sizeof original, "%s", item);
        char *eq = strchr(item, '=');
        int found = 0;
        if (eq) {
            *eq = '\0';
            for (int i = 0; i < FP_CL_TILE_KEYS; i++) {
                if (strcmp(item, tile_keys[i]) == 0) {
                    char *end = NULL;
                    long value = strtol(eq + 1, &end, 10);
                    if (end == eq + 1 || *end != '\0') break;
                    t[i] = value;
                    given[i] = 1;
                    found = 1;
                }
            }
        }
        if (!found) {
            snprintf(why, len,
                     "FLASHPORT_OPENCL_TILE: cannot read \"%s\" (expected key=value items with "
                     "keys br, bc, tm, tn, kc, vc, dv, om, qr, pf, rg, ur)",
                     original);
            return 0;
        }
    }
    return 1;
}

static int64_t round_up_pow2(int64_t x, int64_t lo, int64_t hi) {
    int64_t r = lo;
    while (r < x && r < hi) r *= 2;
    return r;
}

static void default_shape(const fp_cl_device_desc *dev, const fp_problem *p, int64_t *t) {
    int gpu_like = (dev->type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) != 0;
    /* GPUs: 64x64 blocks with 4x8 score tiles, 128 work-items, each with 32 scores and (at
     * d = 128) 8x8 outputs in registers. CPUs (PoCL) run the work-items of a group as loops
     * between barriers, where fewer, larger work-items (8x8 tiles, 64 per group) run several
     * times faster. */
    t[FP_CL_P_BR] = 64;
    t[FP_CL_P_BC] = 64;
    t[FP_CL_P_TM] = gpu_like ? 4 : 8;
    t[FP_CL_P_TN] = 8;
    if (p->seq_q <= 16) { /* decode-like: a 16-row tile */
        t[FP_CL_P_BR] = 16;
        t[FP_CL_P_TM] = gpu_like ? 1 : 2;
        t[FP_CL_P_TN] = gpu_like ? 4 : 8;
    }
    t[FP_CL_P_KC] = round_up_pow2(p->head_dim, 8, 32);
    t[FP_CL_P_VC] = t[FP_CL_P_BC] < 32 ? t[FP_CL_P_BC] : 32;
    /* Output columns per group: the head dim rounded up, at most 128 on GPUs and 256 on CPUs
     * (wider heads are split into slices that each recompute the scores, which keeps the
     * accumulators in registers). */
    t[FP_CL_P_DV] = round_up_pow2(p->head_dim, 16, gpu_like ? 128 : 256);
    t[FP_CL_P_OM] = 0; /* chosen by resolve_shape */
    t[FP_CL_P_QR] = -1;
    t[FP_CL_P_PF] = 0;
    /* NVIDIA: ptxas, left alone, takes 168 (d = 64) and 194 (d = 128) registers for these
     * tiles, where 128 and 168 hold them without spilling (as ptxas -v reports for sm_90):
     * four groups per SM instead of three, and three instead of two. */
    t[FP_CL_P_RG] = 0;
    if (dev->is_nvidia && p->seq_q > 16 && p->head_dim <= 128)
        t[FP_CL_P_RG] = p->head_dim <= 64 ? 128 : 168;
    t[FP_CL_P_UR] = gpu_like;
}

/* Fills in what the defaults and the override left open: dv wide enough for 4 output columns
 * per work-item, om for 8 (or 4) columns, qr where the resident Q fits. */
static void resolve_shape(const fp_cl_device_desc *dev, const fp_problem *p, const int *given,
                          int64_t *t) {
    int64_t br = t[FP_CL_P_BR], threads = work_items(t);
    if (br < 1 || threads < 1) return; /* check_shape says why */
    if (!given[FP_CL_P_DV])
        while (t[FP_CL_P_DV] < 1024 && br * t[FP_CL_P_DV] < 4 * threads) t[FP_CL_P_DV] *= 2;
    if (!given[FP_CL_P_OM]) {
        int64_t outputs = br * t[FP_CL_P_DV] / threads;
        int64_t cols = outputs >= 32 ? 8 : 4;
        while (outputs / cols > br) cols *= 2;
        t[FP_CL_P_OM] = outputs / cols > 0 ? outputs / cols : 1;
    }
    if (!given[FP_CL_P_QR]) {
        t[FP_CL_P_QR] = 1;
        if (tile_local_bytes(t, p) > dev->local_mem) t[FP_CL_P_QR] = 0;
    }
}

static flashport_status tiled_plan(fp_cl_dev *dev, const fp_problem *p, fp_cl_kernel_params *params,
                                   char *reason, size_t reason_len) {
    if (!fp_cl_feature_sizes_fit(p, reason, reason_len)) return FLASHPORT_ERROR_UNSUPPORTED;
    int64_t t[FP_CL_TILE_KEYS];
    int given[FP_CL_TILE_KEYS] = {0};
    default_shape(dev->desc, p, t);
    const char *override = getenv("FLASHPORT_OPENCL_TILE");
    char why[200];
    if (override && *override && !apply_override(override, t, given, reason, reason_len))
        return FLASHPORT_ERROR_INVALID_ARGUMENT;
    /* resolve_shape divides by the keys and multiplies them: an overridden key outside its
     * range is reported before it gets there (kc=0 divided by zero, found by fuzz_tile_env). */
    if (override && *override && out_of_range(t, given, why, sizeof why)) {
        snprintf(reason, reason_len, "FLASHPORT_OPENCL_TILE: %s", why);
        return FLASHPORT_ERROR_UNSUPPORTED;
    }
    /* The default register cap suits the default tiles only. */
    int shape_given = 0;
    for (int i = 0; i < FP_CL_P_RG; i++) shape_given |= given[i];
    if (shape_given && !given[FP_CL_P_RG]) t[FP_CL_P_RG] = 0;
    const int64_t dv_default = t[FP_CL_P_DV];
    resolve_shape(dev->desc, p, given, t);
    check_shape(dev->desc, t, p, why, sizeof why);
    /* Small devices: halve the default blocks until the shape fits the work-group and local
     * limits (an override is taken as it is). */
    while (why[0] && !(override && *override) && t[FP_CL_P_BC] > 16) {
        t[FP_CL_P_BC] /= 2;
        if (t[FP_CL_P_VC] > t[FP_CL_P_BC]) t[FP_CL_P_VC] = t[FP_CL_P_BC];
        if (t[FP_CL_P_BR] > 16) t[FP_CL_P_BR] /= 2;
        if (t[FP_CL_P_TM] > t[FP_CL_P_BR]) t[FP_CL_P_TM] = t[FP_CL_P_BR];
        t[FP_CL_P_DV] = dv_default;
        resolve_shape(dev->desc, p, given, t);
        check_shape(dev->desc, t, p, why, sizeof why);
    }
    if (why[0]) {
        snprintf(reason, reason_len, "%s%s", override && *override ? "FLASHPORT_OPENCL_TILE: " : "",
                 why);
        return FLASHPORT_ERROR_UNSUPPORTED;
    }
    if (!dev->desc->is_nvidia) t[FP_CL_P_RG] = 0; /* a register cap only NVIDIA's compiler reads */
    store_tile(t, params);
    int64_t slices = (p->head_dim + t[FP_CL_P_DV] - 1) / t[FP_CL_P_DV];
    snprintf(reason, reason_len,
             "tiled: br=%lld bc=%lld tm=%lld tn=%lld kc=%lld vc=%lld dv=%lld om=%lld qr=%lld "
             "pf=%lld rg=%lld ur=%lld (%s%s), %zu B local, %lld output slice%s",
             (long long)t[0], (long long)t[1], (long long)t[2], (long long)t[3], (long long)t[4],
             (long long)t[5], (long long)t[6], (long long)t[7], (long long)t[8], (long long)t[9],
             (long long)t[10], (long long)t[11],
             (dev->desc->type & CL_DEVICE_TYPE_CPU) ? "CPU shape" : "GPU shape",
             override && *override ? ", FLASHPORT_OPENCL_TILE" : "", tile_local_bytes(t, p),
             (long long)slices, slices == 1 ? "" : "s");
    return FLASHPORT_OK;
}

/* 1 when an offset inside one tile of rows (row * seq stride + column) may not fit an int. */
static int needs_wide_offsets(const int64_t *t, const fp_problem *p) {
    int64_t rows = t[FP_CL_P_BR] > t[FP_CL_P_BC] ? t[FP_CL_P_BR] : t[FP_CL_P_BC];
    const int64_t strides[4] = {p->q.seq, p->k.seq, p->v.seq, p->o.seq};
    for (int i = 0; i < 4; i++) {
        int64_t s = strides[i] < 0 ? -strides[i] : strides[i];
        if (s > (INT32_MAX - 2 * 1024 - p->head_dim) / rows) return 1;
    }
    return 0;
}

/* 1 when float Q, K and V can be staged four elements per load: every row and every block
 * of rows then starts 16-byte aligned (buffers are, and all strides are multiples of 4) and
 * a quad of columns never crosses d. */
static int quad_loads(const fp_problem *p) {
    if (p->dtype != FLASHPORT_F32 || p->head_dim % 4) return 0;
    const flashport_strides *s[3] = {&p->q, &p->k, &p->v};
    for (int i = 0; i < 3; i++)
        if (s[i]->batch % 4 || s[i]->head % 4 || s[i]->seq % 4) return 0;
    return 1;
}

static void tiled_options(const fp_cl_device_desc *dev, const fp_cl_kernel_params *params,
                          const fp_problem *p, char *buf, size_t len) {
    int64_t t[FP_CL_TILE_KEYS];
    tile_of(params, t);
    /* On NVIDIA, -cl-nv-verbose puts the registers and spills in the build log (logged at
     * the info level when a program is built). */
    char nvidia[64] = "";
    if (dev->is_nvidia) {
        snprintf(nvidia, sizeof nvidia, " -cl-nv-verbose");
        if (t[FP_CL_P_RG])
            snprintf(nvidia, sizeof nvidia, " -cl-nv-verbose -cl-nv-maxrregcount=%lld",
                     (long long)t[FP_CL_P_RG]);
    }
    snprintf(buf, len,
             "-cl-std=CL1.2 -DBR=%lld -DBC=%lld -DTM=%lld -DTN=%lld -DKC=%lld -DVC=%lld "
             "-DDV=%lld -DOM=%lld -DQR=%lld -DDQ=%lld -DPF=%lld -DUR=%lld -DWIDE=%d -DVEC=%d "
             "-DDTYPE=%d -DODTYPE=%d -DPAGED=%d%s",
             (long long)t[0], (long long)t[1], (long long)t[2], (long long)t[3], (long long)t[4],
             (long long)t[5], (long long)t[6], (long long)t[7], (long long)t[8],
             (long long)(t[FP_CL_P_QR] ? q_width(t, p->head_dim) : t[FP_CL_P_KC]), (long long)t[9],
             (long long)t[11], needs_wide_offsets(t, p), quad_loads(p), (int)p->dtype,
             (int)p->out_dtype, p->kv_layout == FLASHPORT_KV_PAGED, nvidia);
}

static fp_cl_launch_shape tiled_shape(const fp_cl_kernel_params *params, const fp_problem *p) {
    int64_t t[FP_CL_TILE_KEYS];
    tile_of(params, t);
    fp_cl_launch_shape shape;
    shape.threads = (size_t)work_items(t);
    shape.rows = (size_t)t[FP_CL_P_BR];
    shape.slices = (int)((p->head_dim + t[FP_CL_P_DV] - 1) / t[FP_CL_P_DV]);
    return shape;
}

const fp_cl_kernel fp_cl_kernel_tiled = {
    {"tiled",
     "online softmax; K/V blocks through local memory, register tiles of S and O, f32 "
     "accumulation (f16 via vload_half, bf16 via shifts, FP8 decoded); every forward feature; "
     "the backward pass (backward.c) of all but paged K/V and FP8",
     FP_PRECISION_NATIVE,
     FP_FEATURE_WINDOW | FP_FEATURE_SOFTCAP | FP_FEATURE_ALIBI | FP_FEATURE_BIAS |
         FP_FEATURE_SINKS | FP_FEATURE_VARLEN | FP_FEATURE_PAGED | FP_FEATURE_FP8 |
         FP_FEATURE_BACKWARD},
    fp_opencl_source_attention_tiled,
    "attention_tiled",
    tiled_plan,
    tiled_options,
    tiled_shape,
};
