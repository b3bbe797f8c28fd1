/* Micro-benchmarks for the device's ceilings (flashport_measure_peaks). */

/* Two float16 vectors of independent multiply-add chains (32 per work-item) hide the FMA
 * latency on GPUs, where they become scalar registers, and fill the SIMD registers of CPUs.
 * The result is stored so that the compiler cannot drop the work; a is just below 1 so
 * nothing overflows. */
__kernel void fma_chains(__global float *out, int iters, float a, float b) {
    const float seed = (float)get_global_id(0) * 1e-7f;
    float16 x = seed + (float16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    float16 y = x + 16.0f;
    for (int it = 0; it < iters; it++) {
        x = fma(x, (float16)a, (float16)b);
        y = fma(y, (float16)a, (float16)b);
    }
    float16 s = x + y;
    out[get_global_id(0)] = s.s0 + s.s1 + s.s2 + s.s3 + s.s4 + s.s5 + s.s6 + s.s7 + s.s8 + s.s9 +
                            s.sa + s.sb + s.sc + s.sd + s.se + s.sf;
}
