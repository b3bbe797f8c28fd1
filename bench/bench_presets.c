/* The named shape lists of flashport-bench. */
#include <string.h>

#include "bench.h"

const char *const bench_ladder_kernels[] = {
    "naive_tiled",  "smem_tiled",      "register_tiled",  "wide_register_tile",
    "float4_loads", "transposed_smem", "double_buffered", "wmma_f16",
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
            "  decode   Nq=1, Nkv in {4096,32768,131072}, B=1, Hq=32, d=128, GQA (Hkv=8) then\n"
            "           MHA (Hkv=32) (dtype as fa-grid)\n"
            "  cpu      d in {64,128}, N in {512,1024,2048,4096}, causal off and on, B=H=1, f32\n"
            "  cpu-decode  decode on CPUs: B=1, d=128, Hq=32 with Hkv=8 (Nq in {1,4,16},\n"
            "           Nkv in {32768,131072}) and Hkv=32 (Nq in {1,4,16}, Nkv=32768)\n"
            "Feature presets (dtype as fa-grid unless said; d=128 unless said):\n"
            "  window   Mistral-like: B=1, Hq=32, Hkv=8, causal N in {8192,...,65536}, without\n"
            "           and with a 4096-key window (window=4095,0)\n"
            "  softcap  Gemma 2-like: Hq=16, Hkv=8, d=256, causal, softcap 50, B*N=16384,\n"
            "           N in {1024,...,8192}\n"
            "  alibi    Hq=Hkv=32, causal, per-head slopes, B*N=16384, N in {1024,...,8192}\n"
            "  paged    prefill into a paged cache of 16-row pages: B=8, Hq=32, Hkv=8, causal,\n"
            "           Nq=Nkv in {1024,4096}, and a 512-query chunk over Nkv=8192\n"
            "  varlen   16 packed sequences of lengths drawn from 1..8192 (--seed), hidden 2048\n"
            "           (d in {64,128}, H=2048/d), causal off and on\n"
            "  decode-paged  decode's shapes over a paged cache of 16-row pages, and B=32 at\n"
            "           Nkv=4096\n"
            "  serve    serving (dtype as fa-grid; Hq=32, Hkv=8, d=128, pages of 16 rows):\n"
            "           decode batches of B in {1,8,32,64} sequences with cache lengths\n"
            "           drawn from 1..32768 (kvmix), speculative decoding (B=8, Nq=4, causal,\n"
            "           lengths from 1..8192), chunked prefill (B=4, a 512-query causal chunk\n"
            "           over 8192 keys), and a sliding-window prefill (N=32768,\n"
            "           window=4095,0)\n"
            "  fp8      fp8_e4m3 inputs (O bf16), hidden 2048, d=128, B*N=16384,\n"
            "           N in {1024,...,8192}, causal off and on; --dtype bf16 runs the same\n"
            "           shapes unquantised\n");
}

static int put(bench_shape *shapes, int max, int n, bench_shape s) {
    if (shapes && n < max) shapes[n] = s;
    return n + 1;
}

static bench_shape make(int64_t b, int64_t hq, int64_t hkv, int64_t nq, int64_t nkv, int64_t d,
                        flashport_dtype dtype, int causal) {
    bench_shape s = {.batch = b,
                     .heads_q = hq,
                     .heads_kv = hkv,
                     .seq_q = nq,
                     .seq_kv = nkv,
                     .head_dim = d,
                     .dtype = dtype,
                     .causal = causal,
                     .layout = FLASHPORT_LAYOUT_BHND};
    return s;
}

static bench_shape windowed(bench_shape s, int64_t left, int64_t right) {
    s.window = 1;
    s.window_left = left;
    s.window_right = right;
    return s;
}

static bench_shape paged(bench_shape s, int64_t page_size) {
    s.page_size = page_size;
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
        static const int64_t kv[] = {4096, 32768, 131072}, hkv[] = {8, 32};
        for (int h = 0; h < 2; ++h)
            for (int i = 0; i < 3; ++i)
                n = put(shapes, max, n, make(1, 32, hkv[h], 1, kv[i], 128, dtype_default, 0));
    } else if (strcmp(name, "cpu") == 0) {
        for (int c = 0; c <= 1; ++c)
            for (int64_t d = 64; d <= 128; d *= 2)
                for (int64_t seq = 512; seq <= 4096; seq *= 2)
                    n = put(shapes, max, n, make(1, 1, 1, seq, seq, d, FLASHPORT_F32, c));
    } else if (strcmp(name, "cpu-decode") == 0) {
        static const int64_t nq[] = {1, 4, 16};
        for (int i = 0; i < 3; ++i)
            for (int64_t kv = 32768; kv <= 131072; kv *= 4)
                n = put(shapes, max, n, make(1, 32, 8, nq[i], kv, 128, dtype_default, 0));
        for (int i = 0; i < 3; ++i)
            n = put(shapes, max, n, make(1, 32, 32, nq[i], 32768, 128, dtype_default, 0));
    } else if (strcmp(name, "window") == 0) {
        for (int64_t seq = 8192; seq <= 65536; seq *= 2) {
            bench_shape s = make(1, 32, 8, seq, seq, 128, dtype_default, 1);
            n = put(shapes, max, n, s);
            n = put(shapes, max, n, windowed(s, 4095, 0));
        }
    } else if (strcmp(name, "softcap") == 0) {
        for (int64_t seq = 1024; seq <= 8192; seq *= 2) {
            bench_shape s = make(16384 / seq, 16, 8, seq, seq, 256, dtype_default, 1);
            s.softcap = 50.0f;
            n = put(shapes, max, n, s);
        }
    } else if (strcmp(name, "alibi") == 0) {
        for (int64_t seq = 1024; seq <= 8192; seq *= 2) {
            bench_shape s = make(16384 / seq, 32, 32, seq, seq, 128, dtype_default, 1);
            s.alibi = 1;
            n = put(shapes, max, n, s);
        }
    } else if (strcmp(name, "paged") == 0) {
        n = put(shapes, max, n, paged(make(8, 32, 8, 1024, 1024, 128, dtype_default, 1), 16));
        n = put(shapes, max, n, paged(make(8, 32, 8, 4096, 4096, 128, dtype_default, 1), 16));
        n = put(shapes, max, n, paged(make(8, 32, 8, 512, 8192, 128, dtype_default, 1), 16));
    } else if (strcmp(name, "varlen") == 0) {
        for (int c = 0; c <= 1; ++c)
            for (int64_t d = 64; d <= 128; d *= 2) {
                bench_shape s = make(16, 2048 / d, 2048 / d, 8192, 8192, d, dtype_default, c);
                s.varlen = 1;
                n = put(shapes, max, n, s);
            }
    } else if (strcmp(name, "decode-paged") == 0) {
        static const int64_t kv[] = {4096, 32768, 131072};
        for (int i = 0; i < 3; ++i)
            n = put(shapes, max, n, paged(make(1, 32, 8, 1, kv[i], 128, dtype_default, 0), 16));
        n = put(shapes, max, n, paged(make(32, 32, 8, 1, 4096, 128, dtype_default, 0), 16));
    } else if (strcmp(name, "serve") == 0) {
        static const int64_t batches[] = {1, 8, 32, 64};
        for (int i = 0; i < 4; ++i) {
            bench_shape s = paged(make(batches[i], 32, 8, 1, 32768, 128, dtype_default, 0), 16);
            s.kv_mixed = 1;
            n = put(shapes, max, n, s);
        }
        bench_shape spec = paged(make(8, 32, 8, 4, 8192, 128, dtype_default, 1), 16);
        spec.kv_mixed = 1;
        n = put(shapes, max, n, spec);
        n = put(shapes, max, n, paged(make(4, 32, 8, 512, 8192, 128, dtype_default, 1), 16));
        n = put(shapes, max, n,
                windowed(make(1, 32, 8, 32768, 32768, 128, dtype_default, 1), 4095, 0));
    } else if (strcmp(name, "fp8") == 0) {
        for (int c = 0; c <= 1; ++c)
            for (int64_t seq = 1024; seq <= 8192; seq *= 2)
                n = put(shapes, max, n,
                        make(16384 / seq, 16, 16, seq, seq, 128, FLASHPORT_FP8_E4M3, c));
    }
    return n;
}
