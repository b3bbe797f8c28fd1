/* Micro-benchmarks for the device's ceilings (flashport_measure_peaks). */

/* Sixteen independent multiply-add chains per work-item hide the FMA latency; the result is
 * stored so that the compiler cannot drop the work. a is just below 1 so nothing overflows. */
__kernel void fma_chains(__global float *out, int iters, float a, float b) {
    const float seed = (float)get_global_id(0) * 1e-7f;
    float x[16];
    for (int c = 0; c < 16; c++) x[c] = seed + (float)c;
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int c = 0; c < 16; c++) x[c] = fma(x[c], a, b);
    }
    float sum = 0.0f;
    for (int c = 0; c < 16; c++) sum += x[c];
    out[get_global_id(0)] = sum;
}
