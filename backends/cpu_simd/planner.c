/* Which path runs a problem, with which tiles and threads, and why. */
#include <stdio.h>

#include "attention.h"
#include "backend.h"
#include "cpu_features.h"
#include "topology.h"

int cs_avx2_usable(int f16, const char **why) {
#if defined(CS_HAVE_AVX2_KERNELS)
    const cs_cpu *cpu = cs_cpu_get();
    if (!cpu->avx2) *why = "the CPU has no AVX2 (cpuid)";
    else if (!cpu->fma) *why = "the CPU has no FMA (cpuid)";
    else if (f16 && !cpu->f16c) *why = "the CPU has no F16C for f16 input (cpuid)";
    else {
        *why = f16 ? "cpuid: AVX2, FMA and F16C present" : "cpuid: AVX2 and FMA present";
        return 1;
    }
#else
    (void)f16;
    *why = "this build has no AVX2 kernels (not an x86-64 compiler with -mavx2 -mfma -mf16c)";
#endif
    return 0;
}

const cs_kernel_ops *cs_variant_ops(int variant) {
#if defined(CS_HAVE_AVX2_KERNELS)
    if (variant == CS_VARIANT_AVX2) return &cs_kernels_avx2;
#endif
    return variant == CS_VARIANT_PORTABLE ? &cs_kernels_portable : NULL;
}

flashport_status cs_plan(const flashport_problem *p, int forced, fp_plan *out) {
    const char *why_avx2;
    const int avx2 = cs_avx2_usable(p->dtype == FLASHPORT_F16, &why_avx2);
    if (forced == CS_VARIANT_AVX2 && !avx2) {
        snprintf(out->reason, sizeof out->reason, "avx2 cannot run here: %s", why_avx2);
        return cs_host->error(FLASHPORT_ERROR_UNSUPPORTED, CS_NAME, "plan: %s", out->reason);
    }
    if (forced >= CS_VARIANT_COUNT) {
        snprintf(out->reason, sizeof out->reason, "no variant %d", forced);
        return cs_host->error(FLASHPORT_ERROR_UNKNOWN_KERNEL, CS_NAME, "plan: %s", out->reason);
    }
    const char *why_threads;
    const int threads = cs_threads_default(&why_threads);
    cs_tiling t;
    cs_tiling_choose(p, threads, &t);

    out->variant = forced >= 0 ? forced : (avx2 ? CS_VARIANT_AVX2 : CS_VARIANT_PORTABLE);
    const char *why = forced >= 0 ? "forced" : avx2 ? why_avx2 : "AVX2 path not usable";
    snprintf(out->reason, sizeof out->reason,
             "%s (%s%s%s); tiles of %d rows (heads x queries = %d x %d) x %d keys; %d thread%s (%s)",
             out->variant == CS_VARIANT_AVX2 ? "avx2" : "portable", why,
             out->variant == CS_VARIANT_PORTABLE && !avx2 ? ": " : "",
             out->variant == CS_VARIANT_PORTABLE && !avx2 ? why_avx2 : "", t.rows, t.heads,
             t.queries, t.keys, t.threads, t.threads == 1 ? "" : "s", why_threads);
    out->workspace_bytes = cs_scratch_bytes(&t);
    cs_tiling_to_params(&t, out->param);
    cs_host->log(FP_LOG_DEBUG, CS_NAME, "plan: %s", out->reason);
    return FLASHPORT_OK;
}
