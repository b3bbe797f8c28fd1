/*
 * Thin wrappers over the sm_90 asynchronous-copy machinery and the barriers around it (PTX
 * ISA, "mbarrier", "cp.async.bulk.tensor", "bar"): shared-memory barriers that count both
 * arriving threads and the bytes a TMA copy has still to deliver, the 4-d tiled TMA load that
 * signals one of them, the proxy fence that lets threads' own shared-memory writes reach
 * wgmma, and the named barriers that order warpgroups.
 *
 * Phases: a barrier completes a phase when its expected arrivals have arrived and its
 * transaction count is back to zero; a waiter names the parity of the phase it waits for
 * (0 for the first completion, then 1, 0, ...), so ring stage s of tile t waits for parity
 * (t / STAGES) & 1.
 */
#ifndef FP_HOPPER_TMA_MBARRIER_CUH
#define FP_HOPPER_TMA_MBARRIER_CUH

#include <cuda.h>
#include <stdint.h>

static __device__ __forceinline__ void fp_mbarrier_init(uint32_t bar, unsigned arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}

/* Makes initialised barriers visible to the async proxy (TMA) before any copy signals them;
 * a __syncthreads must follow before other threads use them. */
static __device__ __forceinline__ void fp_mbarrier_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* One arrival that also announces `bytes` more transaction bytes for the current phase. */
static __device__ __forceinline__ void fp_mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}

static __device__ __forceinline__ void fp_mbarrier_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/* Blocks until the phase of the given parity has completed. try_wait suspends the thread for a
 * system-dependent time before it reports "not yet", so the loop does not spin hot. The label
 * is local to the braces, so every inlined copy may carry it. */
static __device__ __forceinline__ void fp_mbarrier_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "LAB_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra LAB_WAIT;\n"
                 "}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

/* Copies the box of `map` at coordinates (c0 innermost .. c3) to shared memory at dst (aligned
 * as the map's swizzle needs: 1024 bytes for 128-byte swizzle) and completes its bytes on bar.
 * Elements outside the tensor arrive as zeros and still count towards the bytes. */
static __device__ __forceinline__ void
fp_tma_load_4d(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}

/* Fetches a tensor map (a kernel parameter) into the descriptor cache ahead of its first use. */
static __device__ __forceinline__ void fp_tma_prefetch_map(const CUtensorMap *map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

/* Zeroes 16 bytes of shared memory at addr (16-byte aligned) through the generic proxy. */
static __device__ __forceinline__ void fp_st_shared_zero16(uint32_t addr) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0u) : "memory");
}

/* One f32 to shared memory, and two adjacent ones (8-byte aligned) from it, through the
 * generic proxy; volatile, so that they stay on their side of the mbarrier arrive or wait that
 * orders them. */
static __device__ __forceinline__ void fp_st_shared_f32(uint32_t addr, float v) {
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
}
static __device__ __forceinline__ void fp_ld_shared_f32x2(uint32_t addr, float *a, float *b) {
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(*a), "=f"(*b) : "r"(addr) : "memory");
}

/* Orders this thread's earlier generic-proxy writes to shared memory before later async-proxy
 * accesses (wgmma, TMA) that a barrier orders after it. */
static __device__ __forceinline__ void fp_fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Named barriers (bar.sync / bar.arrive with an id and a thread count, both multiples of a
 * warp): sync waits until `threads` threads have reached barrier `id`, arrive counts this
 * thread's warp without waiting. Id 0 is __syncthreads'. */
static __device__ __forceinline__ void fp_named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/* Arrives only where `arrive` holds, by a predicate rather than a branch. */
static __device__ __forceinline__ void fp_named_barrier_arrive_if(bool arrive, int id,
                                                                  int threads) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p bar.arrive %1, %2;\n}\n" ::"r"((int)arrive),
        "r"(id), "r"(threads)
        : "memory");
}

#endif /* FP_HOPPER_TMA_MBARRIER_CUH */
