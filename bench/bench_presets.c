/* The named shape lists of flashport-bench. */
#include <string.h>

#include "bench.h"

const char *const bench_ladder_kernels[] = {
    "naive_tiled",     "smem_tiled",      "register_tiled",  "wide_register_tile",
    "float4_loads",    "transposed_smem", "double_buffered", "wmma_f16",
};
const int bench_ladder_kernel_count =
    (int)(sizeof bench_ladder_kernels / sizeof bench_ladder_kernels[0]);

void bench_preset_help(FILE *out) {
    fprintf(out,
            "Presets (--dtype overrides a preset's dtype, --layout its layout):\n"
            "  seed     B=H=1, N=d=1024, f32: the write-up's shape\n"
            "  fa-grid  batch*N=16384, hidden 2048 (H=2048/d), d in {64,128,256},\n"
            "           N in {512,...,16384}, causal off and on; bf16 on GPU devices and f32 on\n"
            "           CPU devices unless --dtype is given\n"
            "  ladder   every CUDA ladder kernel (naive_tiled ... wmma_f16) on the seed shape and\n"
            "           on B=16, H=16, N=1024, d=128 (B*N=16384), f32; prints time, speedup over\n"
            "           the previous variant and max abs error against the reference backend\n"
            "  decode   Nq=1, Nkv in {4096,32768,131072}, B=1, Hq=32, Hkv=8, d=128 (dtype as\n"
            "           fa-grid)\n"
            "  cpu      d in {64,128}, N in {512,1024,2048,4096}, causal off and on, B=H=1, f32\n");
}

static int put(bench_shape *shapes, int max, int n, bench_shape s) {
    if (shapes && n < max) shapes[n] = s;
    return n + 1;
}

static bench_shape make(int64_t b, int64_t hq, int64_t hkv, int64_t nq, int64_t nkv, int64_t d,
                        flashport_dtype dtype, int causal) {
    bench_shape s = {b, hq, hkv, nq, nkv, d, dtype, causal, FLASHPORT_LAYOUT_BHND};
    return s;
}

int bench_preset_shapes(const char *name, flashport_dtype dtype_default, bench_shape *shapes,
                        int max) {
    int n = 0;
    if (strcmp(name, "seed") == 0) {
        n = put(shapes, max, n, make(1, 1, 1, 1024, 1024, 1024, FLASHPORT_F32, 0));
    } else if (strcmp(name, "ladder") == 0) {
        n = put(shapes, max, n, make(1, 1, 1, 1024, 1024, 1024, FLASHPORT_F32, 0));
        n = put(shapes, max, n, make(16, 16, 16, 1024, 1024, 128, FLASHPORT_F32, 0));
    } else if (strcmp(name, "fa-grid") == 0) {
        static const int64_t dims[] = {64, 128, 256};
        for (int c = 0; c <= 1; ++c)
            for (int di = 0; di < 3; ++di)
                for (int64_t seq = 512; seq <= 16384; seq *= 2) {
                    int64_t h = 2048 / dims[di];
                    n = put(shapes, max, n,
                            make(16384 / seq, h, h, seq, seq, dims[di], dtype_default, c));
                }
    } else if (strcmp(name, "decode") == 0) {
        static const int64_t kv[] = {4096, 32768, 131072};
        for (int i = 0; i < 3; ++i)
            n = put(shapes, max, n, make(1, 32, 8, 1, kv[i], 128, dtype_default, 0));
    } else if (strcmp(name, "cpu") == 0) {
        for (int c = 0; c <= 1; ++c)
            for (int64_t d = 64; d <= 128; d *= 2)
                for (int64_t seq = 512; seq <= 4096; seq *= 2)
                    n = put(shapes, max, n, make(1, 1, 1, seq, seq, d, FLASHPORT_F32, c));
    }
    return n;
}
