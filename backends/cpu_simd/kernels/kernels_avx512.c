/*
 * AVX-512F micro-kernels: simd_kernels.h over the vector operations of simd_avx512.h. This file
 * alone is compiled with -mavx512f; the planner only selects it after cpuid and XCR0 said the CPU
 * has AVX-512F and the OS saves the ZMM and mask registers.
 */
#define SIMD_NAME     avx512
#define SIMD_NAME_STR "avx512"

#include "simd_avx512.h"

#include "simd_kernels.h"
