/*
 * A CPU emulation of the part of CUDA the portable ladder kernels use, so their source runs in
 * tests on machines without a GPU. Force-included (-include) ahead of the kernel sources: it
 * takes the place of vendors/cuda.h (whose include guard it defines) and provides every
 * vendor name that header would.
 *
 * Each GPU thread is a fiber. Warps run one at a time, each as far as the next block barrier,
 * in an order the test picks (forward, reverse or shuffled): shared memory that is reused
 * without a barrier between warps then gives wrong results instead of passing by luck.
 * Shuffles synchronise only their warp, as on the hardware. __shared__ arrays become function
 * statics, which is sound because blocks run one after another.
 */
#ifndef FP_SIMT_EMULATION_H
#define FP_SIMT_EMULATION_H
#define FP_VENDORS_CUDA_H /* vendors/cuda.h is replaced by this header */

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <tuple>

#include "fp_half.h"

#define FP_GPU_BACKEND_NAME    "cuda"
#define FP_GPU_VENDOR          "NVIDIA"
#define FP_GPU_API_PREFIX      "cuda"
#define FP_WARP_SIZE           32
#define FP_KERNEL_ENTRY        const
#define FP_MATRIX_KERNEL       "tensor_core_mma"
#define FP_MATRIX_SPLIT_KERNEL "tensor_core_mma_split_kv"
#define FP_MATRIX_KERNEL_ROWS  128
#define FP_MATRIX_BACKWARD_KERNEL "backward_mma"
#define FP_MATRIX_BACKWARD_KIND   "f16/bf16 backward on tensor cores (mma.sync m16n8k16)"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

typedef void *gpuStream_t;
typedef int gpuError_t;
#define gpuSuccess 0
static inline gpuError_t gpuGetLastError(void) { return gpuSuccess; }

struct gpuHalf {
    uint16_t bits;
};
struct gpuBFloat16 {
    uint16_t bits;
};
static inline float gpuHalfToFloat(gpuHalf h) { return fp_f16_to_f32(h.bits); }
static inline gpuHalf gpuFloatToHalf(float f) { return gpuHalf{fp_f32_to_f16(f)}; }
static inline float gpuBFloat16ToFloat(gpuBFloat16 h) { return fp_bf16_to_f32(h.bits); }
static inline gpuBFloat16 gpuFloatToBFloat16(float f) { return gpuBFloat16{fp_f32_to_bf16(f)}; }

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

enum fp_emu_order { FP_EMU_FORWARD, FP_EMU_REVERSE, FP_EMU_SHUFFLED };
void fp_emu_set_order(fp_emu_order order);
int fp_emu_errors(void); /* barrier or shuffle divergence seen so far */

uint3 &fp_emu_thread_idx(void);
extern uint3 fp_emu_block_idx;
extern dim3 fp_emu_block_dim, fp_emu_grid_dim;
#define threadIdx (fp_emu_thread_idx())
#define blockIdx  fp_emu_block_idx
#define blockDim  fp_emu_block_dim
#define gridDim   fp_emu_grid_dim

void fp_emu_syncthreads(void);
float fp_emu_shfl_xor(float v, int lane_mask, int width);
#define __syncthreads()                      fp_emu_syncthreads()
#define FP_SHFL_XOR(value, lane_mask, width) fp_emu_shfl_xor((value), (lane_mask), (width))

static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

/* Runs body once per thread of every block of the grid. */
void fp_emu_launch(dim3 grid, dim3 block, const std::function<void()> &body);

/* `kernel FP_GPU_LAUNCH(grid, block, smem, stream)(args...)` becomes
 * `kernel | fp_emu_config(grid, block)(args...)`: the arguments are captured, and the
 * operator runs the kernel on them in the emulator. */
template <typename... A> struct fp_emu_pending {
    dim3 grid, block;
    std::tuple<A...> args;
};
struct fp_emu_config {
    dim3 grid, block;
    fp_emu_config(dim3 g, dim3 b) : grid(g), block(b) {}
    template <typename... A> fp_emu_pending<A...> operator()(A... a) const {
        return fp_emu_pending<A...>{grid, block, std::make_tuple(a...)};
    }
};
template <typename... P, typename... A>
void operator|(void (*kernel)(P...), const fp_emu_pending<A...> &launch) {
    fp_emu_launch(launch.grid, launch.block, [&] { std::apply(kernel, launch.args); });
}
#define FP_GPU_LAUNCH(grid, block, smem, stream) | fp_emu_config((grid), (block))

#endif /* FP_SIMT_EMULATION_H */
