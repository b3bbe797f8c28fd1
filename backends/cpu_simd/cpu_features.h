/* What the CPU offers, from cpuid (x86) or the operating system (elsewhere). */
#ifndef CS_CPU_FEATURES_H
#define CS_CPU_FEATURES_H

typedef struct cs_cpu {
    int avx2, fma, f16c, avx512f; /* usable: the CPU has it and the OS saves its registers */
    /* 16-bit products, usable as above: AVX512BW (16-bit lanes), AVX512-BF16 (vdpbf16ps),
     * AVX512-FP16; AMX tiles with BF16 or FP16 products (the OS enables the tile state in XCR0;
     * a process still asks Linux for it before its first tile instruction). */
    int avx512bw, avx512_bf16, avx512_fp16, amx_bf16, amx_fp16;
    char vendor[64];
    char model[128];
} cs_cpu;

/* Detected once; the same answer for the life of the process. */
const cs_cpu *cs_cpu_get(void);

/* "avx2,fma,f16c,avx512f,..." (the usable ones, "none" when none) into buf. */
void cs_cpu_feature_list(const cs_cpu *cpu, char *buf, unsigned long len);

/* Asks Linux, once per process, for the AMX tile data state (arch_prctl ARCH_REQ_XCOMP_PERM):
 * the first tile instruction of a process that did not ask faults. 1 when granted; else 0 and
 * why. */
int cs_amx_permitted(const char **why);

/* "avx512_bf16=yes, avx512_fp16=no, amx_bf16=no, amx_fp16=no": each unit of 16-bit products,
 * present or not, so that an absent one is said to be absent. */
void cs_cpu_half_products(const cs_cpu *cpu, char *buf, unsigned long len);

#endif /* CS_CPU_FEATURES_H */
