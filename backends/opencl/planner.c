/*
 * The one planning function of the OpenCL backend: which variant runs a problem and with which
 * tile shape. The shape comes from the device's properties (work-group limit, local memory,
 * device type) and the problem (head dim, query count), and can be overridden for tuning with
 * FLASHPORT_OPENCL_TILE="br=64,bc=64,tm=4,tn=4,kc=32,vc=32,dv=128" (any subset of the keys).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opencl_backend.h"

const fp_variant fp_cl_variants[] = {
    {"tiled",
     "online softmax; K/V blocks through local memory, register tiles of S and O, f32 "
     "accumulation (f16 via vload_half, bf16 via shifts)",
     FP_PRECISION_NATIVE},
};

static const char *const param_keys[7] = {"br", "bc", "tm", "tn", "kc", "vc", "dv"};

size_t fp_cl_tile_local_bytes(const int64_t *t) {
    int64_t ct = t[FP_CL_P_BC] / t[FP_CL_P_TN];
    int64_t qk = (t[FP_CL_P_BR] + t[FP_CL_P_BC]) * (t[FP_CL_P_KC] + 4);
    int64_t vv = (t[FP_CL_P_VC] + 4) * t[FP_CL_P_DV];
    int64_t floats = (qk > vv ? qk : vv) + t[FP_CL_P_BR] * (t[FP_CL_P_BC] + 4) +
                     2 * t[FP_CL_P_BR] * (ct + 1);
    return (size_t)floats * sizeof(float);
}

/* "" when the shape can run on the device, else why not. */
static void check_shape(const fp_cl_device_desc *dev, const int64_t *t, char *why, size_t len) {
    why[0] = '\0';
    for (int i = 0; i < 7; i++) {
        if (t[i] < 1 || t[i] > 1024) {
            snprintf(why, len, "tile %s=%lld is outside 1..1024", param_keys[i], (long long)t[i]);
            return;
        }
    }
    if (t[FP_CL_P_BR] % t[FP_CL_P_TM] || t[FP_CL_P_BC] % t[FP_CL_P_TN] ||
        t[FP_CL_P_BC] % t[FP_CL_P_VC] || t[FP_CL_P_DV] % (t[FP_CL_P_BC] / t[FP_CL_P_TN]) ||
        t[FP_CL_P_KC] % 4 || t[FP_CL_P_VC] % 4) {
        snprintf(why, len,
                 "tile shape needs tm | br, tn | bc, vc | bc, (bc/tn) | dv, and kc, vc multiples "
                 "of 4");
        return;
    }
    int64_t threads = (t[FP_CL_P_BR] / t[FP_CL_P_TM]) * (t[FP_CL_P_BC] / t[FP_CL_P_TN]);
    if ((size_t)threads > dev->max_work_group) {
        snprintf(why, len, "tile needs %lld work-items per group, the device allows %zu",
                 (long long)threads, dev->max_work_group);
        return;
    }
    size_t local = fp_cl_tile_local_bytes(t);
    if (local > dev->local_mem)
        snprintf(why, len, "tile needs %zu bytes of local memory, the device has %llu", local,
                 (unsigned long long)dev->local_mem);
}

/* Applies FLASHPORT_OPENCL_TILE; returns 0 and says why when it does not parse. */
static int apply_override(const char *text, int64_t *t, char *why, size_t len) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *item = strtok(buf, ", "); item; item = strtok(NULL, ", ")) {
        char original[64];
        snprintf(original, sizeof original, "%s", item);
        char *eq = strchr(item, '=');
        int found = 0;
        if (eq) {
            *eq = '\0';
            for (int i = 0; i < 7; i++) {
                if (strcmp(item, param_keys[i]) == 0) {
                    char *end = NULL;
                    long value = strtol(eq + 1, &end, 10);
                    if (end == eq + 1 || *end != '\0') break;
                    t[i] = value;
                    found = 1;
                }
            }
        }
        if (!found) {
            snprintf(why, len,
                     "FLASHPORT_OPENCL_TILE: cannot read \"%s\" (expected key=value items with "
                     "keys br, bc, tm, tn, kc, vc, dv)",
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

static void default_shape(const fp_cl_device_desc *dev, const flashport_problem *p, int64_t *t) {
    int gpu_like = (dev->type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) != 0;
    /* GPUs: 64x64 blocks with 4x4 register tiles, 256 work-items, each with 16 scores and up
     * to 32 output accumulators in registers. CPUs (PoCL) run the work-items of a group as
     * loops between barriers, where fewer, larger work-items (8x8 tiles, 64 per group) run
     * several times faster. */
    t[FP_CL_P_BR] = 64;
    t[FP_CL_P_BC] = 64;
    t[FP_CL_P_TM] = gpu_like ? 4 : 8;
    t[FP_CL_P_TN] = gpu_like ? 4 : 8;
    if (p->seq_q <= 16) { /* decode-like: a 16-row tile */
        t[FP_CL_P_BR] = 16;
        t[FP_CL_P_TM] = gpu_like ? 1 : 2;
    }
    t[FP_CL_P_KC] = round_up_pow2(p->head_dim, 8, 32);
    t[FP_CL_P_VC] = t[FP_CL_P_BC] < 32 ? t[FP_CL_P_BC] : 32;
    /* Output columns per group: the head dim rounded up, at most 128 on GPUs and 256 on CPUs
     * (wider heads are split into slices that each recompute the scores, which keeps the
     * accumulators in registers). */
    t[FP_CL_P_DV] = round_up_pow2(p->head_dim, 16, gpu_like ? 128 : 256);

    /* Small devices: halve the blocks until the shape fits the work-group and local limits. */
    char why[128];
    for (check_shape(dev, t, why, sizeof why); why[0] && t[FP_CL_P_BC] > 16;
         check_shape(dev, t, why, sizeof why)) {
        t[FP_CL_P_BC] /= 2;
        if (t[FP_CL_P_VC] > t[FP_CL_P_BC]) t[FP_CL_P_VC] = t[FP_CL_P_BC];
        if (t[FP_CL_P_BR] > 16) t[FP_CL_P_BR] /= 2;
        if (t[FP_CL_P_TM] > t[FP_CL_P_BR]) t[FP_CL_P_TM] = t[FP_CL_P_BR];
    }
}

flashport_status fp_cl_plan(fp_cl_dev *dev, const flashport_problem *p, int forced, fp_plan *out) {
    (void)forced; /* one variant: forced or not, it is "tiled" */
    memset(out, 0, sizeof *out);
    out->variant = FP_CL_VARIANT_TILED;
    int64_t *t = out->param;
    default_shape(dev->desc, p, t);
    const char *override = getenv("FLASHPORT_OPENCL_TILE");
    char why[200];
    if (override && *override && !apply_override(override, t, why, sizeof why)) {
        snprintf(out->reason, sizeof out->reason, "%s", why);
        return fp_cl_host->error(FLASHPORT_ERROR_INVALID_ARGUMENT, FP_CL_NAME, "%s", why);
    }
    check_shape(dev->desc, t, why, sizeof why);
    if (why[0]) {
        snprintf(out->reason, sizeof out->reason, "%s%s", override && *override ?
                 "FLASHPORT_OPENCL_TILE: " : "", why);
        return fp_cl_host->error(FLASHPORT_ERROR_UNSUPPORTED, FP_CL_NAME, "%s", out->reason);
    }
    int64_t slices = (p->head_dim + t[FP_CL_P_DV] - 1) / t[FP_CL_P_DV];
    snprintf(out->reason, sizeof out->reason,
             "tiled: br=%lld bc=%lld tm=%lld tn=%lld kc=%lld vc=%lld dv=%lld (%s%s), %zu B local, "
             "%lld output slice%s",
             (long long)t[0], (long long)t[1], (long long)t[2], (long long)t[3], (long long)t[4],
             (long long)t[5], (long long)t[6],
             (dev->desc->type & CL_DEVICE_TYPE_CPU) ? "CPU shape" : "GPU shape",
             override && *override ? ", FLASHPORT_OPENCL_TILE" : "", fp_cl_tile_local_bytes(t),
             (long long)slices, slices == 1 ? "" : "s");
    out->workspace_bytes = 0;
    return FLASHPORT_OK;
}

void fp_cl_attention_options(const fp_plan *plan, flashport_dtype dtype, char *buf, size_t len) {
    const int64_t *t = plan->param;
    snprintf(buf, len, "-cl-std=CL1.2 -DBR=%lld -DBC=%lld -DTM=%lld -DTN=%lld -DKC=%lld -DVC=%lld "
             "-DDV=%lld -DDTYPE=%d",
             (long long)t[0], (long long)t[1], (long long)t[2], (long long)t[3], (long long)t[4],
             (long long)t[5], (long long)t[6], (int)dtype);
}
