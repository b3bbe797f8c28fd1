/* syscall: beyond C11 and POSIX. */
#define _GNU_SOURCE
#include "cpu_features.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define CS_X86 1
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#define CS_ARCH_REQ_XCOMP_PERM 0x1023 /* asm/prctl.h */
#define CS_XFEATURE_XTILEDATA  18
#endif

static cs_cpu g_cpu;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void trim(char *s) {
    size_t start = 0, len = strlen(s);
    while (s[start] == ' ') ++start;
    while (len > start && (s[len - 1] == ' ' || s[len - 1] == '\n')) --len;
    memmove(s, s + start, len - start);
    s[len - start] = '\0';
}

/* Linux fallback for the model name where cpuid has no brand string (or is not x86). */
static void model_from_proc(char *out, size_t len) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0 || strncmp(line, "Model", 5) == 0) {
            const char *colon = strchr(line, ':');
            if (colon) {
                snprintf(out, len, "%s", colon + 1);
                trim(out);
                break;
            }
        }
    }
    fclose(f);
}

#if defined(CS_X86)
/* XCR0 through xgetbv, written as raw bytes so that this file needs no -mxsave. */
static unsigned long long read_xcr0(void) {
    unsigned int lo, hi;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static void detect_x86(cs_cpu *cpu) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return;
    const unsigned int max_leaf = a;
    char vendor[13];
    memcpy(vendor, &b, 4);
    memcpy(vendor + 4, &d, 4);
    memcpy(vendor + 8, &c, 4);
    vendor[12] = '\0';
    if (strcmp(vendor, "GenuineIntel") == 0)
        snprintf(cpu->vendor, sizeof cpu->vendor, "Intel");
    else if (strcmp(vendor, "AuthenticAMD") == 0)
        snprintf(cpu->vendor, sizeof cpu->vendor, "AMD");
    else
        snprintf(cpu->vendor, sizeof cpu->vendor, "%s", vendor);

    __get_cpuid(1, &a, &b, &c, &d);
    const int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    const int fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    /* The OS must save the YMM (and for AVX-512 the ZMM/opmask) state, or using them faults. */
    const unsigned long long xcr0 = osxsave ? read_xcr0() : 0;
    const int ymm_ok = avx && (xcr0 & 0x6) == 0x6;
    const int zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0;
    /* XTILECFG and XTILEDATA (XCR0 bits 17 and 18): the OS can save the AMX tiles. */
    const int tiles_ok = (xcr0 & 0x60000) == 0x60000;
    int avx2 = 0, avx512f = 0, bw = 0, fp16 = 0, amx_tile = 0, amx_bf16 = 0;
    int bf16 = 0, amx_fp16 = 0;
    if (max_leaf >= 7) {
        __get_cpuid_count(7, 0, &a, &b, &c, &d);
        const unsigned int subleaves = a;
        avx2 = (b >> 5) & 1;
        avx512f = (b >> 16) & 1;
        bw = (b >> 30) & 1;
        amx_bf16 = (d >> 22) & 1;
        fp16 = (d >> 23) & 1;
        amx_tile = (d >> 24) & 1;
        if (subleaves >= 1) {
            __get_cpuid_count(7, 1, &a, &b, &c, &d);
            bf16 = (a >> 5) & 1;
            amx_fp16 = (a >> 21) & 1;
        }
    }
    cpu->avx2 = ymm_ok && avx2;
    cpu->fma = ymm_ok && fma;
    cpu->f16c = ymm_ok && f16c;
    cpu->avx512f = zmm_ok && avx512f;
    cpu->avx512bw = cpu->avx512f && bw;
    cpu->avx512_bf16 = cpu->avx512bw && bf16;
    cpu->avx512_fp16 = cpu->avx512bw && fp16;
    cpu->amx_bf16 = tiles_ok && amx_tile && amx_bf16;
    cpu->amx_fp16 = tiles_ok && amx_tile && amx_fp16;

    __get_cpuid(0x80000000, &a, &b, &c, &d);
    if (a >= 0x80000004) {
        unsigned int brand[12];
        for (unsigned int i = 0; i < 3; ++i)
            __get_cpuid(0x80000002 + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2],
                        &brand[4 * i + 3]);
        memcpy(cpu->model, brand, 48);
        cpu->model[48] = '\0';
        trim(cpu->model);
    }
}
#endif

static void detect(void) {
    memset(&g_cpu, 0, sizeof g_cpu);
#if defined(CS_X86)
    detect_x86(&g_cpu);
#endif
    if (!g_cpu.model[0]) model_from_proc(g_cpu.model, sizeof g_cpu.model);
    if (!g_cpu.model[0]) snprintf(g_cpu.model, sizeof g_cpu.model, "unknown CPU");
    if (!g_cpu.vendor[0]) snprintf(g_cpu.vendor, sizeof g_cpu.vendor, "unknown");
}

const cs_cpu *cs_cpu_get(void) {
    pthread_once(&g_once, detect);
    return &g_cpu;
}

void cs_cpu_feature_list(const cs_cpu *cpu, char *buf, unsigned long len) {
    snprintf(buf, len, "%s%s%s%s%s%s%s%s%s", cpu->avx2 ? "avx2," : "", cpu->fma ? "fma," : "",
             cpu->f16c ? "f16c," : "", cpu->avx512f ? "avx512f," : "",
             cpu->avx512bw ? "avx512bw," : "", cpu->avx512_bf16 ? "avx512_bf16," : "",
             cpu->avx512_fp16 ? "avx512_fp16," : "", cpu->amx_bf16 ? "amx_bf16," : "",
             cpu->amx_fp16 ? "amx_fp16," : "");
    size_t n = strlen(buf);
    if (n)
        buf[n - 1] = '\0';
    else
        snprintf(buf, len, "none");
}

void cs_cpu_half_products(const cs_cpu *cpu, char *buf, unsigned long len) {
    snprintf(buf, len, "avx512_bf16=%s, avx512_fp16=%s, amx_bf16=%s, amx_fp16=%s",
             cpu->avx512_bf16 ? "yes" : "no", cpu->avx512_fp16 ? "yes" : "no",
             cpu->amx_bf16 ? "yes" : "no", cpu->amx_fp16 ? "yes" : "no");
}

static int g_amx_granted;
static const char *g_amx_why = "not asked";
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;

static void ask_amx(void) {
    if (!cs_cpu_get()->amx_bf16) {
        g_amx_why = "no AMX-BF16 tiles, or the OS does not enable their state (cpuid, XCR0)";
        return;
    }
#if defined(CS_ARCH_REQ_XCOMP_PERM)
    if (syscall(SYS_arch_prctl, CS_ARCH_REQ_XCOMP_PERM, CS_XFEATURE_XTILEDATA) != 0) {
        g_amx_why = "Linux refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM)";
        return;
    }
    g_amx_granted = 1;
    g_amx_why = "cpuid: AMX-BF16 present; Linux granted the tile state";
#else
    g_amx_why = "AMX tiles are requested from Linux on x86-64 only";
#endif
}

int cs_amx_permitted(const char **why) {
    pthread_once(&g_amx_once, ask_amx);
    *why = g_amx_why;
    return g_amx_granted;
}
