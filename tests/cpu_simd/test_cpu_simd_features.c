/*
 * cpu_simd's API v2 features on the kernel path named on the command line (portable, avx2 or
 * avx512), against the reference backend in the same process: every combination of sliding
 * window (causal included), softcap, ALiBi, additive bias, sinks, varlen, paged KV and FP8
 * inputs, each on random small problems (GQA, odd head dims, zero-length sequences, one or
 * several tiles and key blocks, every page layout and size, f16/bf16 data and outputs,
 * broadcast and -inf biases, descales per tensor and per block), then cases chosen for their
 * edges: rows that see no key (with and without sinks), rows whose keys the bias masks, NaN keys
 * and values inside and outside the window, a NaN sink, a saturated softcap, and other thread
 * counts. Every output element and LSE entry is checked; everything the call must not write
 * (gaps between rows, packed rows no sequence owns) must keep its poison.
 *
 * avx512bf16 and amxbf16, the paths of bf16 products, take bf16 data only and no FP8: on them
 * every problem has bf16 Q/K/V and O, every combination of the other features.
 *
 * A path the planner refuses exits 77 (ctest: skipped) with the planner's reason; test_cpu_simd
 * checks that such a refusal is right for this CPU (for the bf16 paths, this test does).
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "flashport.h"
#include "fp_half.h"

#define EXIT_SKIP 77

enum {
    F_WINDOW = 1 << 0,
    F_SOFTCAP = 1 << 1,
    F_ALIBI = 1 << 2,
    F_BIAS = 1 << 3,
    F_SINKS = 1 << 4,
    F_VARLEN = 1 << 5,
    F_PAGED = 1 << 6,
    F_FP8 = 1 << 7,
    F_ALL = (1 << 8) - 1
};
/* Set for avx512bf16 and amxbf16: every problem's data is bf16, none is FP8. */
static int bf16_only;
/* The dtype of the edge cases that need exact data: f32, or bf16 on the bf16 path. */
static flashport_dtype exact_dtype(void) { return bf16_only ? FLASHPORT_BF16 : FLASHPORT_F32; }

static const char *const feature_names[] = {"window", "softcap", "alibi", "bias",
                                            "sinks",  "varlen",  "paged", "fp8"};

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t next_u32(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}
static int64_t pick(int64_t lo, int64_t hi) {
    return lo + (int64_t)(next_u32() % (uint32_t)(hi - lo + 1));
}
static double uniform(double lo, double hi) { return lo + (hi - lo) * (next_u32() / 4294967296.0); }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* An FP8 code with its exponent in a moderate range (values about 2^-3 .. 2^3, and sometimes
 * subnormal or zero), never NaN or infinity. */
static uint8_t random_fp8(int e4m3) {
    const uint32_t sign = next_u32() & 1;
    const int subnormal = pick(0, 15) == 0;
    if (e4m3) {
        const uint32_t exp = subnormal ? 0 : (uint32_t)pick(4, 10), man = next_u32() & 7;
        return (uint8_t)(sign << 7 | exp << 3 | man);
    }
    const uint32_t exp = subnormal ? 0 : (uint32_t)pick(12, 18), man = next_u32() & 3;
    return (uint8_t)(sign << 7 | exp << 2 | man);
}

static void store(void *base, flashport_dtype dt, int64_t i, double x) {
    switch (dt) {
    case FLASHPORT_F32: ((float *)base)[i] = (float)x; break;
    case FLASHPORT_F16: ((uint16_t *)base)[i] = fp_f32_to_f16((float)x); break;
    case FLASHPORT_BF16: ((uint16_t *)base)[i] = fp_f32_to_bf16((float)x); break;
    case FLASHPORT_FP8_E4M3: ((uint8_t *)base)[i] = 0x7f; break; /* only NaN is stored as FP8 */
    case FLASHPORT_FP8_E5M2: ((uint8_t *)base)[i] = 0x7f; break;
    case FLASHPORT_F64: ((double *)base)[i] = x; break;
    }
}

static void fill(void *base, flashport_dtype dt, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        if (dt == FLASHPORT_FP8_E4M3 || dt == FLASHPORT_FP8_E5M2)
            ((uint8_t *)base)[i] = random_fp8(dt == FLASHPORT_FP8_E4M3);
        else
            store(base, dt, i, uniform(-1.0, 1.0));
    }
}

/* Everything a problem is made of: drawn at random by random_spec, adjusted by the edge cases. */
typedef struct spec {
    unsigned features;
    flashport_dtype dtype, out_dtype;
    int64_t batch, heads_q, heads_kv, seq_q, seq_kv, head_dim;
    flashport_layout layout;
    float scale;
    int row_gaps; /* packed rows with unused elements after each */
    int64_t page_size;
    flashport_layout page_layout;
    int64_t zero_kv_from; /* sequences from this one on have no keys (paged) */
    int causal;
    int64_t window_left, window_right;
    float softcap;
    flashport_alibi alibi;
    int bias_shape; /* 0 full, 1 [1,1,Nq,Nkv], 2 [B,1,1,Nkv], 3 keys-major */
    flashport_dtype bias_dtype;
    int bias_masked_batch; /* -1, or a batch whose bias is -inf everywhere */
    flashport_descale descale;
    int64_t descale_block;
    int nan_tensor; /* 0, or 'k' / 'v': a NaN in key nan_key of sequence 0, head 0 */
    int64_t nan_key;
    int nan_sink; /* head 0's sink is NaN */
    int nan_rows; /* 1: some outputs must come out NaN and some not; -1: none */
} spec;

static spec random_spec(unsigned f, int big) {
    /* 124: amxbf16 lays it out in rows longer than the head dimension's round-up (144). */
    static const int64_t dims[] = {1, 8, 13, 24, 40, 64, 72, 124, 128};
    static const int64_t pages[] = {1, 3, 16, 32};
    static const flashport_dtype floats[] = {FLASHPORT_F32, FLASHPORT_F16, FLASHPORT_BF16};
    spec s;
    memset(&s, 0, sizeof s);
    s.features = f;
    s.batch = pick(1, 3);
    s.heads_kv = pick(1, 2);
    s.heads_q = s.heads_kv * pick(1, 3);
    s.head_dim = dims[pick(0, 8)];
    s.seq_q = big ? pick(97, 200) : pick(1, 40);
    s.seq_kv = big ? pick(129, 400) : pick(1, 90);
    const int64_t kind = pick(0, 5);
    s.dtype = f & F_FP8  ? (kind % 2 ? FLASHPORT_FP8_E4M3 : FLASHPORT_FP8_E5M2)
              : kind < 3 ? floats[kind]
                         : FLASHPORT_F32;
    s.out_dtype = f & F_FP8 ? floats[pick(0, 2)] : s.dtype;
    if (bf16_only) s.dtype = s.out_dtype = FLASHPORT_BF16;
    s.layout = pick(0, 1) ? FLASHPORT_LAYOUT_BNHD : FLASHPORT_LAYOUT_BHND;
    s.scale = pick(0, 3) == 0 ? (float)uniform(0.05, 0.5) : 0.0f;
    s.row_gaps = (int)pick(0, 1);
    s.page_size = pages[pick(0, 3)];
    s.page_layout = pick(0, 1) ? FLASHPORT_LAYOUT_BNHD : FLASHPORT_LAYOUT_BHND;
    s.zero_kv_from = s.batch;
    s.window_left = s.window_right = -1;
    if (f & F_WINDOW) {
        const int64_t shape = pick(0, 3);
        s.window_left = shape == 1 ? -1 : pick(0, s.seq_kv + 2);
        s.window_right = shape == 2 ? -1 : pick(0, 8) == 0 ? pick(0, s.seq_kv) : pick(0, 6);
        if (shape == 3) { /* a causal sliding window */
            s.causal = 1;
            s.window_right = pick(0, 1) ? 0 : -1;
        }
    } else {
        s.causal = pick(0, 2) == 0;
    }
    s.softcap = f & F_SOFTCAP ? (float)uniform(1.0, 50.0) : 0.0f;
    s.alibi = !(f & F_ALIBI) ? FLASHPORT_ALIBI_NONE
              : pick(0, 1)   ? FLASHPORT_ALIBI_PER_HEAD
                             : FLASHPORT_ALIBI_PER_BATCH_HEAD;
    s.bias_shape = (int)pick(0, 3);
    s.bias_dtype = floats[pick(0, 2)];
    s.bias_masked_batch = -1;
    s.descale = !(f & F_FP8) ? FLASHPORT_DESCALE_NONE
                : pick(0, 1) ? FLASHPORT_DESCALE_TENSOR
                             : FLASHPORT_DESCALE_BLOCK;
    s.descale_block = s.descale == FLASHPORT_DESCALE_BLOCK ? pick(1, 7) : 0;
    return s;
}

/* One sequence's query and key counts and the packed rows they start at. */
typedef struct seq {
    int64_t nq, nkv, q0, k0;
} seq;

static seq seq_of(const flashport_attention_desc *d, const flashport_attention_host_args *a,
                  int64_t b) {
    seq s = {d->seq_q, d->seq_kv, 0, 0};
    if (d->q_varlen) {
        const int32_t *cu = (const int32_t *)a->cu_seqlens_q;
        s.q0 = cu[b];
        s.nq = cu[b + 1] - cu[b];
    }
    if (d->kv_layout == FLASHPORT_KV_VARLEN) {
        const int32_t *cu = (const int32_t *)a->cu_seqlens_kv;
        s.k0 = cu[b];
        s.nkv = cu[b + 1] - cu[b];
    } else if (d->kv_layout == FLASHPORT_KV_PAGED) {
        s.nkv = ((const int32_t *)a->seqlens_kv)[b];
    }
    return s;
}

/* Element index of query (or output) row i of head h of sequence b. */
static int64_t q_index(const flashport_strides *st, const seq *s, int64_t b, int64_t h, int64_t i) {
    return b * st->batch + h * st->head + (s->q0 + i) * st->seq;
}

/* Element index of key (or value) j of KV head h of sequence b. */
static int64_t kv_index(const flashport_attention_desc *d, const flashport_attention_host_args *a,
                        const flashport_strides *st, const seq *s, int64_t b, int64_t h,
                        int64_t j) {
    if (d->kv_layout == FLASHPORT_KV_PAGED) {
        const int32_t page =
            ((const int32_t *)a->block_table)[b * d->max_pages_per_seq + j / d->page_size];
        return page * st->batch + h * st->head + (j % d->page_size) * st->seq;
    }
    return b * st->batch + h * st->head + (s->k0 + j) * st->seq;
}

/* One problem and its host arrays. */
typedef struct problem {
    char name[200];
    flashport_attention_desc d;
    flashport_attention_host_args a;
    int64_t q_elems, kv_elems, o_elems, lse_elems;
    void *q, *k, *v, *bias;
    float *sinks, *slopes, *descales[3];
    int32_t *cu_q, *cu_kv, *lens, *table;
    double tolerance; /* relative L2 of O */
} problem;

static void free_problem(problem *p) {
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->bias);
    free(p->sinks);
    free(p->slopes);
    for (int i = 0; i < 3; ++i) free(p->descales[i]);
    free(p->cu_q);
    free(p->cu_kv);
    free(p->lens);
    free(p->table);
}

/* Random sequence lengths, the first one `longest` and some zero, after a few rows that no
 * sequence owns; *total adds a few more at the end. */
static int32_t *random_offsets(int64_t batch, int64_t longest, int64_t *total) {
    int32_t *cu = malloc(sizeof(int32_t) * (size_t)(batch + 1));
    cu[0] = (int32_t)pick(0, 2);
    for (int64_t b = 0; b < batch; ++b)
        cu[b + 1] = cu[b] + (int32_t)(b == 0 ? longest : pick(0, 5) == 0 ? 0 : pick(1, longest));
    *total = cu[batch] + pick(0, 3);
    return cu;
}

/* The elements a tensor's strides reach. */
static int64_t reach(const flashport_strides *st, int64_t outer, int64_t heads, int64_t rows,
                     int64_t dim) {
    if (outer == 0 || rows == 0) return 0;
    return (outer - 1) * st->batch + (heads - 1) * st->head + (rows - 1) * st->seq + dim;
}

static void build(const spec *s, problem *p) {
    memset(p, 0, sizeof *p);
    const unsigned f = s->features;
    const int64_t batch = s->batch, hq = s->heads_q, hkv = s->heads_kv, dim = s->head_dim;
    const int64_t nq = s->seq_q, nkv = s->seq_kv;
    flashport_attention_desc *d = &p->d;
    flashport_attention_desc_init(d, s->dtype, batch, hq, hkv, nq, nkv, dim, s->layout);
    p->a.struct_size = sizeof p->a;
    d->out_dtype = s->out_dtype;
    d->scale = s->scale;
    int64_t total_q = 0, total_kv = 0;
    if (f & F_VARLEN) {
        p->cu_q = random_offsets(batch, nq, &total_q);
        if (f & F_PAGED) {
            flashport_attention_desc_set_varlen(d, total_q, nq, 0, 0);
        } else {
            p->cu_kv = random_offsets(batch, nkv, &total_kv);
            flashport_attention_desc_set_varlen(d, total_q, nq, total_kv, nkv);
        }
        if (s->row_gaps) {
            d->q.seq = d->o.seq = hq * dim + 3;
            if (d->kv_layout == FLASHPORT_KV_VARLEN) d->k.seq = d->v.seq = hkv * dim + 5;
        }
    }
    if (f & F_PAGED) {
        const int64_t page = s->page_size, per_seq = ceil_div(nkv, page);
        const int64_t pages = batch * per_seq + pick(0, 3);
        flashport_attention_desc_set_paged(d, pages, page, per_seq, s->page_layout);
        d->seq_kv = nkv;
        p->lens = malloc(sizeof(int32_t) * (size_t)batch);
        p->table = malloc(sizeof(int32_t) * (size_t)(batch * per_seq));
        int32_t *order = malloc(sizeof(int32_t) * (size_t)pages);
        for (int64_t i = 0; i < pages; ++i) order[i] = (int32_t)i;
        for (int64_t i = pages - 1; i > 0; --i) { /* pages in any order */
            const int64_t j = pick(0, i);
            const int32_t t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int64_t i = 0; i < pages; ++i) /* the pool's last page holds the first keys */
            if (order[i] == pages - 1) {
                order[i] = order[0];
                order[0] = (int32_t)(pages - 1);
            }
        for (int64_t b = 0; b < batch; ++b) {
            p->lens[b] = (int32_t)(b >= s->zero_kv_from ? 0 : b == 0 ? nkv : pick(0, nkv));
            for (int64_t j = 0; j < per_seq; ++j) /* entries past a sequence are never read */
                p->table[b * per_seq + j] =
                    j < ceil_div(p->lens[b], page) ? order[b * per_seq + j] : -7;
        }
        free(order);
    }
    d->causal = s->causal;
    d->window_left = s->window_left;
    d->window_right = s->window_right;
    d->softcap = s->softcap;
    d->alibi = s->alibi;
    if (s->alibi != FLASHPORT_ALIBI_NONE) {
        const int64_t n = hq * (s->alibi == FLASHPORT_ALIBI_PER_BATCH_HEAD ? batch : 1);
        p->slopes = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; ++i) p->slopes[i] = (float)ldexp(1.0, -(int)pick(0, 8));
        p->a.alibi_slopes = p->slopes;
    }
    if (f & F_BIAS) {
        flashport_bias_desc *bd = &d->bias;
        bd->enabled = 1;
        bd->dtype = s->bias_dtype;
        switch (s->bias_shape) {
        case 0: bd->batch = hq * nq * nkv, bd->head = nq * nkv, bd->query = nkv, bd->key = 1; break;
        case 1: bd->query = nkv, bd->key = 1; break;
        case 2: bd->batch = nkv, bd->key = 1; break;
        default: bd->batch = hq * nkv * nq, bd->head = nkv * nq, bd->query = 1, bd->key = nq; break;
        }
        const int64_t n = 1 + (batch - 1) * bd->batch + (hq - 1) * bd->head + (nq - 1) * bd->query +
                          (nkv - 1) * bd->key;
        p->bias = malloc(flashport_dtype_size(bd->dtype) * (size_t)n);
        for (int64_t i = 0; i < n; ++i)
            store(p->bias, bd->dtype, i, pick(0, 19) == 0 ? -INFINITY : uniform(-2.0, 2.0));
        if (s->bias_masked_batch >= 0)
            for (int64_t j = 0; j < nkv; ++j)
                store(p->bias, bd->dtype, s->bias_masked_batch * bd->batch + j, -INFINITY);
        p->a.bias = p->bias;
    }
    if (f & F_SINKS) {
        d->sinks = 1;
        p->sinks = malloc(sizeof(float) * (size_t)hq);
        for (int64_t h = 0; h < hq; ++h)
            p->sinks[h] = (float)(pick(0, 4) == 0 ? uniform(5.0, 30.0) : uniform(-3.0, 3.0));
        if (s->nan_sink) p->sinks[0] = NAN;
        p->a.sinks = p->sinks;
    }
    d->descale = s->descale;
    d->descale_block = s->descale_block;
    if (s->descale != FLASHPORT_DESCALE_NONE)
        for (int t = 0; t < 3; ++t) {
            const int64_t heads = t == 0 ? hq : hkv, len = t == 0 ? d->seq_q : d->seq_kv;
            const int64_t n = s->descale == FLASHPORT_DESCALE_TENSOR
                                  ? 1
                                  : batch * heads * ceil_div(len, s->descale_block);
            p->descales[t] = malloc(sizeof(float) * (size_t)n);
            for (int64_t i = 0; i < n; ++i) p->descales[t][i] = (float)uniform(0.25, 2.0);
        }
    p->a.q_descale = p->descales[0];
    p->a.k_descale = p->descales[1];
    p->a.v_descale = p->descales[2];

    const int paged = d->kv_layout == FLASHPORT_KV_PAGED,
              packed_kv = d->kv_layout == FLASHPORT_KV_VARLEN;
    p->q_elems = reach(&d->q, d->q_varlen ? 1 : batch, hq, d->q_varlen ? total_q : nq, dim);
    p->o_elems = p->q_elems;
    p->kv_elems = reach(&d->k,
                        paged       ? d->num_pages
                        : packed_kv ? 1
                                    : batch,
                        hkv,
                        paged       ? d->page_size
                        : packed_kv ? total_kv
                                    : nkv,
                        dim);
    p->lse_elems = hq * (d->q_varlen ? total_q : batch * nq);
    const size_t es = flashport_dtype_size(s->dtype);
    p->q = malloc(es * (size_t)(p->q_elems + 1));
    p->k = malloc(es * (size_t)(p->kv_elems + 1));
    p->v = malloc(es * (size_t)(p->kv_elems + 1));
    fill(p->q, s->dtype, p->q_elems);
    fill(p->k, s->dtype, p->kv_elems);
    fill(p->v, s->dtype, p->kv_elems);
    p->a.q = p->q;
    p->a.k = p->k;
    p->a.v = p->v;
    p->a.cu_seqlens_q = p->cu_q;
    p->a.cu_seqlens_kv = p->cu_kv;
    p->a.seqlens_kv = p->lens;
    p->a.block_table = p->table;
    if (s->nan_tensor) {
        const seq sq = seq_of(d, &p->a, 0);
        const flashport_strides *st = s->nan_tensor == 'k' ? &d->k : &d->v;
        store(s->nan_tensor == 'k' ? p->k : p->v, s->dtype,
              kv_index(d, &p->a, st, &sq, 0, 0, s->nan_key), NAN);
    }

    const flashport_dtype coarse = s->out_dtype == FLASHPORT_F32 ? s->dtype : s->out_dtype;
    p->tolerance = coarse == FLASHPORT_BF16 ? 1e-2 : coarse == FLASHPORT_F16 ? 2e-3 : 1e-5;
    int used = snprintf(
        p->name, sizeof p->name, "%s->%s B=%lld Hq=%lld Hkv=%lld Nq=%lld Nkv=%lld d=%lld",
        flashport_dtype_name(s->dtype), flashport_dtype_name(s->out_dtype), (long long)batch,
        (long long)hq, (long long)hkv, (long long)nq, (long long)nkv, (long long)dim);
    for (int i = 0; i < 8; ++i) {
        if (!(f & (1u << i))) continue;
        used += snprintf(p->name + used, sizeof p->name - (size_t)used, " %s", feature_names[i]);
        if (1u << i == F_WINDOW)
            used += snprintf(p->name + used, sizeof p->name - (size_t)used, "(%lld,%lld)",
                             (long long)s->window_left, (long long)s->window_right);
        if (1u << i == F_PAGED)
            used += snprintf(p->name + used, sizeof p->name - (size_t)used, "(%lld)",
                             (long long)s->page_size);
    }
    if (s->causal) snprintf(p->name + used, sizeof p->name - (size_t)used, " causal");
}

/* ---- one run against the reference ---- */

/* The outputs of one run: O in out_dtype and the LSE, poisoned before the call. */
typedef struct outputs {
    unsigned char *o;
    float *lse;
} outputs;

#define POISON_BYTE 0x7b
#define POISON_LSE  12345.0f

static flashport_status run(flashport_context *ctx, const problem *p, const char *kernel,
                            outputs *out) {
    const size_t es = flashport_dtype_size(p->d.out_dtype);
    out->o = malloc(es * (size_t)(p->o_elems + 1));
    out->lse = malloc(sizeof(float) * (size_t)(p->lse_elems + 1));
    memset(out->o, POISON_BYTE, es * (size_t)(p->o_elems + 1));
    for (int64_t r = 0; r <= p->lse_elems; ++r) out->lse[r] = POISON_LSE;
    flashport_attention_desc d = p->d;
    d.kernel = kernel;
    flashport_attention_host_args a = p->a;
    a.o = out->o;
    a.lse = out->lse;
    return flashport_attention_run_host(ctx, &d, &a);
}

static void free_outputs(outputs *out) {
    free(out->o);
    free(out->lse);
}

static double load_out(const void *base, flashport_dtype dt, int64_t i) {
    if (dt == FLASHPORT_F32) return ((const float *)base)[i];
    const uint16_t h = ((const uint16_t *)base)[i];
    return dt == FLASHPORT_F16 ? fp_f16_to_f32(h) : fp_bf16_to_f32(h);
}

/* Which O elements and LSE entries the call writes: the rows of every sequence. */
static void written_sets(const problem *p, char *o, char *lse) {
    const flashport_attention_desc *d = &p->d;
    for (int64_t b = 0; b < d->batch; ++b) {
        const seq s = seq_of(d, &p->a, b);
        for (int64_t h = 0; h < d->heads_q; ++h)
            for (int64_t i = 0; i < s.nq; ++i) {
                memset(o + q_index(&d->o, &s, b, h, i), 1, (size_t)d->head_dim);
                lse[d->q_varlen ? h * d->total_q + s.q0 + i : (b * d->heads_q + h) * d->seq_q + i] =
                    1;
            }
    }
}

/* Runs the problem on the reference and on one kernel and compares; returns the number of
 * failed checks. */
static int compare(flashport_context *ctx, flashport_context *ref, const problem *p,
                   const char *kernel, int nan_rows, int verbose) {
    outputs got, want;
    const char *name = kernel ? kernel : "planner's choice";
    const flashport_status st_ref = run(ref, p, NULL, &want), st = run(ctx, p, kernel, &got);
    if (st_ref != FLASHPORT_OK || st != FLASHPORT_OK) {
        printf("FAIL %s [%s]: %s: %s\n", p->name, st ? name : "reference",
               flashport_status_string(st ? st : st_ref), flashport_last_error());
        free_outputs(&got);
        free_outputs(&want);
        return 1;
    }
    const flashport_dtype dt = p->d.out_dtype;
    const size_t es = flashport_dtype_size(dt);
    char *o_written = calloc((size_t)p->o_elems + 1, 1),
         *lse_written = calloc((size_t)p->lse_elems + 1, 1);
    written_sets(p, o_written, lse_written);
    double err2 = 0.0, ref2 = 0.0, max_abs = 0.0, max_ref = 0.0, max_lse = 0.0;
    int64_t nan_mismatch = 0, nan_elems = 0, finite_elems = 0, poison = 0, bad_lse = 0,
            zero_rows_wrong = 0;
    for (int64_t i = 0; i < p->o_elems; ++i) {
        if (!o_written[i]) {
            for (size_t byte = 0; byte < es; ++byte)
                poison += got.o[(size_t)i * es + byte] != POISON_BYTE;
            continue;
        }
        const double g = load_out(got.o, dt, i), w = load_out(want.o, dt, i);
        if (isnan(w) || isnan(g)) {
            nan_mismatch += isnan(w) != isnan(g);
            nan_elems += isnan(w);
            continue;
        }
        ++finite_elems;
        if (w == 0.0 && g != 0.0) ++zero_rows_wrong; /* O of a row with no key is exactly 0 */
        if (fabs(w) > max_ref) max_ref = fabs(w);
        err2 += (g - w) * (g - w);
        ref2 += w * w;
        if (fabs(g - w) > max_abs) max_abs = fabs(g - w);
    }
    for (int64_t r = 0; r < p->lse_elems; ++r) {
        const double g = got.lse[r], w = want.lse[r];
        if (!lse_written[r]) {
            poison += g != POISON_LSE;
            continue;
        }
        if (isnan(w) || isnan(g) || isinf(w) || isinf(g)) {
            if (!(isnan(w) && isnan(g)) && w != g) {
                if (verbose && bad_lse < 3)
                    printf("  lse %lld: got %g want %g\n", (long long)r, g, w);
                ++bad_lse;
            }
        } else if (fabs(g - w) / fmax(1.0, fabs(w)) > max_lse) {
            max_lse = fabs(g - w) / fmax(1.0, fabs(w));
        }
    }
    free(o_written);
    free(lse_written);
    free_outputs(&got);
    free_outputs(&want);
    const double rel = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
    /* The NaN cases must leave some elements finite, or they would not test containment. */
    const int nan_wrong =
        nan_rows > 0 ? nan_elems == 0 || finite_elems == 0 : nan_rows < 0 && nan_elems > 0;
    const int failures = (rel > p->tolerance) + (max_abs > 10 * p->tolerance * fmax(1.0, max_ref)) +
                         (max_lse > 1e-4) + (nan_mismatch != 0) + (poison != 0) + (bad_lse != 0) +
                         (zero_rows_wrong != 0) + nan_wrong;
    if (failures || verbose)
        printf("%s %s [%s]: rel_l2 %.2e (tol %.0e) max_abs %.2e lse %.2e nan_elems %lld "
               "nan_mismatch %lld bad_lse %lld zero_rows_wrong %lld poison_changed %lld\n",
               failures ? "FAIL" : "ok  ", p->name, name, rel, p->tolerance, max_abs, max_lse,
               (long long)nan_elems, (long long)nan_mismatch, (long long)bad_lse,
               (long long)zero_rows_wrong, (long long)poison);
    return failures;
}

/* Builds the problem of a spec, compares and frees it; returns the number of failed checks. */
static int check(flashport_context *ctx, flashport_context *ref, const spec *s, const char *kernel,
                 int verbose) {
    problem p;
    build(s, &p);
    const int failures = compare(ctx, ref, &p, kernel, s->nan_rows, verbose);
    free_problem(&p);
    return failures;
}

/* ---- cases chosen for their edges ---- */

static int edge_cases(flashport_context *ctx, flashport_context *ref, const char *kernel) {
    int failures = 0;
    spec s;
    /* Rows that see no key: a window behind the diagonal with Nq > Nkv leaves the first rows
     * without keys (O = 0, LSE = -inf or the sink), with one and with several tiles. */
    for (int big = 0; big <= 1; ++big)
        for (unsigned extra = 0; extra <= F_SINKS; extra += F_SINKS) {
            s = random_spec(F_WINDOW | extra, big);
            s.seq_q = big ? 300 : 60;
            s.seq_kv = big ? 150 : 20;
            s.causal = 0;
            s.window_left = 2;
            s.window_right = 0;
            failures += check(ctx, ref, &s, kernel, 1);
        }
    /* Window sides as wide as INT64_MAX see every key, with Nq above and below Nkv: they are
     * clamped before they meet a row's diagonal. */
    for (int big = 0; big <= 1; ++big) {
        s = random_spec(F_WINDOW, big);
        s.causal = 0;
        s.window_left = s.window_right = INT64_MAX;
        failures += check(ctx, ref, &s, kernel, 1);
    }
    /* Sequences without keys, packed and paged. */
    s = random_spec(F_VARLEN | F_PAGED | F_SINKS, 0);
    s.batch = 3;
    s.zero_kv_from = 1;
    failures += check(ctx, ref, &s, kernel, 1);
    /* A batch whose bias masks every key: O = 0 and LSE = -inf (or the sink). */
    for (unsigned extra = 0; extra <= F_SINKS; extra += F_SINKS) {
        s = random_spec(F_BIAS | F_SOFTCAP | extra, 0);
        s.batch = 2;
        s.bias_shape = 2;
        s.bias_masked_batch = 1;
        failures += check(ctx, ref, &s, kernel, 1);
    }
    /* A NaN key makes the rows that see it NaN, a NaN value their column of O, no others,
     * inside a window and across blocks; hidden from every row by the window, it must reach
     * none. */
    for (int t = 0; t < 2; ++t)
        for (int hidden = 0; hidden <= 1; ++hidden) {
            s = random_spec(F_WINDOW | F_ALIBI, 1);
            s.dtype = s.out_dtype = exact_dtype();
            s.seq_q = 200;
            s.seq_kv = 300;
            s.causal = 0;
            s.window_left = 40;
            s.window_right = 3;
            s.nan_tensor = t ? 'v' : 'k';
            s.nan_key = hidden ? 50 : 170; /* 50 is behind the window of every row */
            s.nan_rows = hidden ? -1 : 1;
            failures += check(ctx, ref, &s, kernel, 1);
        }
    /* A NaN sink makes its head's rows NaN, those without keys included. */
    s = random_spec(F_SINKS | F_WINDOW, 0);
    s.heads_kv = 1;
    s.heads_q = 2;
    s.nan_sink = 1;
    s.nan_rows = 1;
    failures += check(ctx, ref, &s, kernel, 1);
    /* Float32 keys past what the K/V ring holds (4064 at d = 128) are read where they lie, a
     * block at a time; blocks that cross a page (of 200 rows) or end a sequence off a whole
     * step go through the ring. */
    if (!bf16_only) {
        static const unsigned in_place[] = {0,
                                            F_WINDOW,
                                            F_PAGED,
                                            F_VARLEN | F_BIAS,
                                            F_SOFTCAP | F_ALIBI,
                                            F_PAGED | F_VARLEN | F_SINKS};
        for (size_t i = 0; i < sizeof in_place / sizeof in_place[0]; ++i) {
            s = random_spec(in_place[i], 0);
            s.dtype = s.out_dtype = FLASHPORT_F32;
            s.heads_kv = 1; /* rows of head_dim floats in either layout */
            s.heads_q = pick(1, 3);
            s.head_dim = 128;
            s.row_gaps = 0;
            s.seq_q = pick(17, 40);
            s.seq_kv = pick(4100, 4300);
            s.page_size = 200;
            if (in_place[i] & F_WINDOW) {
                s.causal = 0;
                s.window_left = pick(4080, s.seq_kv);
                s.window_right = pick(0, 1) ? 0 : -1;
            }
            failures += check(ctx, ref, &s, kernel, 1);
        }
    }
    /* Saturated softcap: raw logits far past the cap. */
    s = random_spec(F_SOFTCAP | F_WINDOW, 1);
    s.dtype = s.out_dtype = exact_dtype();
    s.softcap = 5.0f;
    s.scale = 3.0f;
    failures += check(ctx, ref, &s, kernel, 1);
    /* Other thread counts give the same results: work items are whole tiles. */
    const char *thread_counts[] = {"1", "3", NULL};
    for (const char **n = thread_counts; *n; ++n) {
        setenv("FLASHPORT_NUM_THREADS", *n, 1);
        printf("FLASHPORT_NUM_THREADS=%s\n", *n);
        for (unsigned f = F_WINDOW | F_VARLEN; f <= F_ALL; f += 37) {
            s = random_spec(bf16_only ? f & ~(unsigned)F_FP8 : f, 1);
            failures += check(ctx, ref, &s, kernel, 1);
        }
    }
    unsetenv("FLASHPORT_NUM_THREADS");
    return failures;
}

/* ---- decode: a few query positions against many keys ---- */

/* A problem for cpu_simd's decode path: 1 to 16 query positions, MHA or GQA, a short or long
 * key sequence (several splits of the keys), pages of 1, 16 or 64 rows or of a size that does
 * not divide the keys; the features as random_spec draws them. */
static spec decode_spec(unsigned f) {
    static const int64_t pages[] = {1, 16, 64};
    spec s = random_spec(bf16_only ? f & ~(unsigned)F_FP8 : f, 0);
    s.seq_q = pick(1, 16);
    s.heads_kv = pick(1, 2);
    s.heads_q = s.heads_kv * (pick(0, 1) ? 1 : pick(2, 4));
    s.seq_kv = pick(0, 3) == 0 ? pick(1, 200) : pick(600, 2500);
    if (pick(0, 3) < 3) {
        s.page_size = pages[pick(0, 2)];
    } else {
        s.page_size = 48;
        if (s.seq_kv % 48 == 0) ++s.seq_kv;
    }
    if (f & F_WINDOW && s.window_left > s.seq_kv + 2) s.window_left = pick(0, s.seq_kv + 2);
    return s;
}

/* Whether the plan of the problem is the decode path's, on the variant named `label` (the
 * plan's reason starts with the variant's name). */
static int planned_decode(flashport_context *ctx, const problem *p, const char *kernel,
                          const char *label) {
    flashport_attention_desc d = p->d;
    d.kernel = kernel;
    flashport_plan_info info;
    return flashport_attention_plan(ctx, &d, &info) == FLASHPORT_OK &&
           strncmp(info.reason, label, strlen(label)) == 0 && info.reason[strlen(label)] == ' ' &&
           strstr(info.reason, "; decode (") != NULL;
}

/* Runs the problem with 1 and with 2 threads: the splits of the keys and their merge do not
 * depend on the thread count, so O and LSE must be the same bits. Returns the failed checks. */
static int same_bits_across_threads(flashport_context *ctx, const problem *p, const char *kernel,
                                    const char *label) {
    outputs one, two;
    setenv("FLASHPORT_NUM_THREADS", "1", 1);
    const flashport_status st1 = run(ctx, p, kernel, &one);
    setenv("FLASHPORT_NUM_THREADS", "2", 1);
    const flashport_status st2 = run(ctx, p, kernel, &two);
    unsetenv("FLASHPORT_NUM_THREADS");
    const size_t o_bytes = flashport_dtype_size(p->d.out_dtype) * (size_t)(p->o_elems + 1);
    const int failed = st1 != FLASHPORT_OK || st2 != FLASHPORT_OK ||
                       memcmp(one.o, two.o, o_bytes) != 0 ||
                       memcmp(one.lse, two.lse, sizeof(float) * (size_t)(p->lse_elems + 1)) != 0;
    if (failed)
        printf("FAIL %s [%s]: 1 and 2 threads differ (%s)\n", p->name, label,
               st1 || st2 ? flashport_last_error() : "different bits");
    free_outputs(&one);
    free_outputs(&two);
    return failed;
}

/* Random decode problems with every feature, each checked against the reference, planned on
 * the decode path of variant `label` (unless it has a bias, which goes to the tile path, or
 * amx_rows > 0 and it has that many query rows a KV head, which the planner gives to amxbf16)
 * and, for one in four, the same bits with 1 and 2 threads. kernel: the variant forced, or
 * NULL for the planner's choice. */
static int decode_cases(flashport_context *ctx, flashport_context *ref, const char *kernel,
                        const char *label, int amx_rows) {
    int failures = 0, cases = 0, decoded = 0;
    for (unsigned f = 0; f <= F_ALL; f += 3)
        for (int round = 0; round < 2; ++round) {
            const spec s = decode_spec(f);
            problem p;
            build(&s, &p);
            const int on_decode = planned_decode(ctx, &p, kernel, label);
            const int to_tiles = amx_rows && s.heads_q / s.heads_kv * s.seq_q >= amx_rows;
            if (on_decode != (!(f & F_BIAS) && !to_tiles)) {
                printf("FAIL %s [%s]: planned %s the decode path\n", p.name, label,
                       on_decode ? "on" : "off");
                ++failures;
            }
            decoded += on_decode;
            failures += compare(ctx, ref, &p, kernel, s.nan_rows, 0);
            if (cases % 4 == 0) failures += same_bits_across_threads(ctx, &p, kernel, label);
            free_problem(&p);
            ++cases;
        }
    printf("%d random decode cases (%d on the decode path), %d failed checks\n", cases, decoded,
           failures);
    return failures;
}

/* Whether the planner takes the kernel here; else the reason. */
static int runnable(flashport_context *ctx, const char *kernel, char *why, size_t len) {
    flashport_attention_desc d;
    flashport_attention_desc_init(&d, bf16_only ? FLASHPORT_BF16 : FLASHPORT_FP8_E5M2, 1, 1, 1, 4,
                                  4, 8, FLASHPORT_LAYOUT_BHND);
    d.out_dtype = bf16_only ? FLASHPORT_BF16 : FLASHPORT_F16;
    d.kernel = kernel;
    flashport_plan_info info;
    const flashport_status st = flashport_attention_plan(ctx, &d, &info);
    snprintf(why, len, "%s", info.reason);
    return st == FLASHPORT_OK;
}

/* Whether this build has the avx512bf16 path and the compiler's own cpuid says the CPU runs it
 * (the planner also asks the OS about ZMM state, which every OS with AVX-512 saves). */
static int bf16_built_and_present(void) {
#if defined(CS_TEST_BUILT_AVX512BF16)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
#else
    return 0;
#endif
}

/* AMX-BF16 and AMX-TILE in cpuid leaf 7 (EDX bits 22 and 24); whether the OS enables the tile
 * state is the planner's to say. */
static int amx_in_cpuid(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (d >> 22 & 1) && (d >> 24 & 1);
#else
    return 0;
#endif
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3 ||
        (strcmp(argv[1], "portable") != 0 && strcmp(argv[1], "avx2") != 0 &&
         strcmp(argv[1], "avx512") != 0 && strcmp(argv[1], "avx512bf16") != 0 &&
         strcmp(argv[1], "amxbf16") != 0) ||
        (argc == 3 && strcmp(argv[2], "decode") != 0)) {
        fprintf(stderr, "usage: %s portable|avx2|avx512|avx512bf16|amxbf16 [decode]\n", argv[0]);
        return 2;
    }
    const char *kernel = argv[1];
    const int amx = strcmp(kernel, "amxbf16") == 0;
    bf16_only = amx || strcmp(kernel, "avx512bf16") == 0;
    flashport_context *ctx = NULL;
    if (flashport_context_create("cpu_simd", &ctx) != FLASHPORT_OK) {
        printf("FAIL: cannot open cpu_simd: %s\n", flashport_last_error());
        return 1;
    }
    char why[512];
    if (!runnable(ctx, kernel, why, sizeof why)) {
        printf("SKIP: %s cannot run here: %s\n", kernel, why);
        flashport_context_destroy(ctx);
        if (!amx && bf16_only && bf16_built_and_present()) {
            printf("FAIL: the compiler's cpuid reports avx512bf16 and avx512bw, and this build "
                   "has the path\n");
            return 1;
        }
        if (amx && amx_in_cpuid() && !strstr(why, "Linux") && !strstr(why, "XCR0") &&
            !strstr(why, "build")) {
            printf("FAIL: cpuid reports AMX-BF16, and the reason is not the OS's or the build's\n");
            return 1;
        }
        return EXIT_SKIP;
    }
    flashport_context *ref = NULL;
    if (flashport_context_create("reference", &ref) != FLASHPORT_OK) {
        printf("FAIL: cannot open the reference backend: %s\n", flashport_last_error());
        flashport_context_destroy(ctx);
        return 1;
    }
    int failures = 0, cases = 0;
    if (argc == 3) {
        /* Forced, avx512bf16 takes the tile path; the planner sends bf16 decodes to its decode
         * path (scores on vdpbf16ps) by itself. */
        const int planner_picks = strcmp(kernel, "avx512bf16") == 0;
        /* The planner's CS_AMX_DECODE_MIN_ROWS, where it may take amxbf16. */
        char why_amx[512];
        const int amx_rows =
            planner_picks && runnable(ctx, "amxbf16", why_amx, sizeof why_amx) ? 16 : 0;
        failures = decode_cases(ctx, ref, planner_picks ? NULL : kernel, kernel, amx_rows);
        flashport_context_destroy(ref);
        flashport_context_destroy(ctx);
        printf("%s: %d failed checks\n", failures ? "FAILED" : "PASSED", failures);
        return failures ? 1 : 0;
    }
    /* Every combination of features twice, small; every third one once more with several
     * tiles and key blocks (the reference's double loops dominate the test's time). */
    for (unsigned f = 0; f <= F_ALL; ++f)
        for (int round = 0; round < (f % 3 == 0 ? 3 : 2) && !(bf16_only && f & F_FP8); ++round) {
            const spec s = random_spec(f, round == 2);
            failures += check(ctx, ref, &s, kernel, 0);
            ++cases;
        }
    printf("%d random cases (every combination of 8 features), %d failed checks\n", cases,
           failures);
    failures += edge_cases(ctx, ref, kernel);
    flashport_context_destroy(ref);
    flashport_context_destroy(ctx);
    printf("%s: %d failed checks\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
