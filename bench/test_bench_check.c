/* Checks flashport-bench's helpers: how many input sets it rotates, the slice its accuracy check
 * compares, that bench_compare finds a perturbation inside the slice and ignores one outside it,
 * that its random inputs are standard normal, the concrete problems of feature shapes (lengths,
 * tables, FLOPs), and that --shape reads what --list-shapes prints. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static int failures;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            ++failures;                                                                            \
            fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                                  \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static bench_problem problem(const char *shape) {
    bench_shape s;
    bench_problem p;
    char why[256] = "";
    int ok = bench_shape_parse(shape, &s, why, sizeof why) &&
             bench_problem_create(&s, 1234, &p, why, sizeof why);
    EXPECT(ok, "%s: %s", shape, why);
    if (!ok) exit(1);
    return p;
}

static void slice_choice(void) {
    bench_problem p = problem("f32 B=2 Hq=8 Hkv=2 Nq=100 Nkv=120 d=16");
    bench_region r;
    bench_choose_region(&p, 1e12, &r);
    EXPECT(r.whole && r.batch == 2 && r.heads == 8 && r.row0 == 0 && r.rows == 100,
           "a cheap problem is whole");

    /* One KV group is 4 query heads; 4*120*16 FLOPs per row and head. */
    double per_row = 4.0 * 120 * 16;
    bench_choose_region(&p, per_row * 4 * 10, &r);
    EXPECT(!r.whole && r.batch == 1 && r.heads == 4 && r.row0 == 90 && r.rows == 10,
           "a budget of 10 rows of one group: batch %lld heads %lld rows %lld+%lld",
           (long long)r.batch, (long long)r.heads, (long long)r.row0, (long long)r.rows);
    bench_choose_region(&p, per_row * 0.5, &r);
    EXPECT(r.heads == 1 && r.rows == 1 && r.row0 == 99,
           "a tiny budget still checks one row of one head");
    bench_problem_destroy(&p);

    /* A packed batch: whole means every packed row; a slice is the first sequence's end. */
    p = problem("f32 B=3 Hq=2 Hkv=1 Nq=50 Nkv=50 d=8 varlen");
    bench_choose_region(&p, 1e12, &r);
    EXPECT(r.whole && r.batch == 1 && r.row0 == 0 && r.rows == p.tokens_q, "packed, whole");
    bench_choose_region(&p, 4.0 * p.len_kv[0] * 8 * 2, &r);
    EXPECT(!r.whole && r.heads == 2 && r.rows == 1 && r.row0 == p.len_q[0] - 1,
           "packed, the last row of the first sequence (row %lld of %d)", (long long)r.row0,
           p.len_q[0]);
    bench_problem_destroy(&p);
}

static void compare_finds_errors(const char *layout) {
    char text[96];
    snprintf(text, sizeof text, "f32 B=2 Hq=4 Hkv=2 Nq=30 Nkv=30 d=8 %s", layout);
    bench_problem bp = problem(text);
    const flashport_attention_desc *p = &bp.desc;
    int64_t n = bp.o_elems;
    float *ref = malloc((size_t)n * sizeof *ref), *out = malloc((size_t)n * sizeof *out);
    bench_fill_random(ref, FLASHPORT_F32, n, 7);
    memcpy(out, ref, (size_t)n * sizeof *out);

    bench_region r;
    bench_choose_region(&bp, 4.0 * 30 * 8 * 2 * 5, &r); /* 5 rows of heads 0-1 of batch 0 */
    EXPECT(r.heads == 2 && r.rows == 5, "slice of 2 heads x 5 rows");
    double max_abs, rel;
    bench_compare(p, &r, out, ref, &max_abs, &rel);
    EXPECT(max_abs == 0 && rel == 0, "identical outputs compare equal");

    /* Outside the slice: batch 1, and a row above the last five. */
    out[1 * p->o.batch + 3] += 1.0f;
    out[0 * p->o.batch + 1 * p->o.head + 24 * p->o.seq + 2] += 1.0f;
    bench_compare(p, &r, out, ref, &max_abs, &rel);
    EXPECT(max_abs == 0, "changes outside the slice are not counted (%g)", max_abs);

    /* Inside: head 1, row 27 (one of the last five), element 5. */
    out[1 * p->o.head + 27 * p->o.seq + 5] += 0.25f;
    bench_compare(p, &r, out, ref, &max_abs, &rel);
    EXPECT(fabs(max_abs - 0.25) < 1e-6 && rel > 0, "a change inside the slice is found (%g)",
           max_abs);

    out[0 * p->o.head + 29 * p->o.seq + 0] = NAN;
    bench_compare(p, &r, out, ref, &max_abs, &rel);
    EXPECT(isinf(max_abs), "a NaN where the reference is finite is an infinite error");
    free(ref);
    free(out);
    bench_problem_destroy(&bp);
}

/* The concrete problems of feature shapes: lengths, tables, sizes and FLOPs. */
static void problems(void) {
    bench_problem p = problem("bf16 B=6 Hq=4 Hkv=2 Nq=40 Nkv=55 d=8 causal varlen");
    int64_t sum_q = 0, sum_kv = 0, max_q = 0;
    double flops = 0;
    for (int b = 0; b < 6; b++) {
        EXPECT(p.len_q[b] >= 1 && p.len_q[b] <= 40 && p.len_kv[b] == p.len_q[b] + 15,
               "sequence %d: Lq %d in 1..40, Lkv = Lq + 15 (%d)", b, p.len_q[b], p.len_kv[b]);
        EXPECT(p.cu_q[b + 1] - p.cu_q[b] == p.len_q[b] &&
                   p.cu_kv[b + 1] - p.cu_kv[b] == p.len_kv[b],
               "cu_seqlens hold the lengths");
        sum_q += p.len_q[b];
        sum_kv += p.len_kv[b];
        if (p.len_q[b] > max_q) max_q = p.len_q[b];
        /* causal with Lkv = Lq + 15: row i sees i + 16 keys (flashport_attention_desc_flops
         * counts non-square causal problems exactly) */
        flops += 4.0 * 4 * 8 * (p.len_q[b] * 15.0 + p.len_q[b] * (p.len_q[b] + 1) / 2.0);
    }
    EXPECT(p.tokens_q == sum_q && p.tokens_kv == sum_kv && p.desc.total_q == sum_q &&
               p.desc.total_kv == sum_kv && p.desc.seq_q == max_q && p.desc.q_varlen &&
               p.desc.kv_layout == FLASHPORT_KV_VARLEN,
           "packed descriptor: totals and the longest sequence");
    EXPECT(p.q_elems == sum_q * 4 * 8 && p.kv_elems == sum_kv * 2 * 8, "packed sizes");
    EXPECT(fabs(p.flops - flops) <= 1e-9 * flops, "varlen FLOPs on real tokens: %g vs %g", p.flops,
           flops);
    EXPECT(flashport_attention_desc_validate(&p.desc) == FLASHPORT_OK, "valid: %s",
           flashport_last_error());
    bench_problem_destroy(&p);

    /* A paged cache: every page used once, in a shuffled order. */
    p = problem("f16 B=3 Hq=2 Hkv=1 Nq=1 Nkv=50 d=8 page=16 bnhd");
    const int64_t pages = 3 * 4;
    int seen[12] = {0}, shuffled = 0;
    for (int b = 0; b < 3; b++)
        for (int j = 0; j < 4; j++) {
            int32_t page = p.block_table[b * 4 + j];
            EXPECT(page >= 0 && page < pages, "page %d in range", page);
            if (page >= 0 && page < pages) seen[page]++;
            shuffled |= page != b * 4 + j;
        }
    for (int i = 0; i < pages; i++) EXPECT(seen[i] == 1, "page %d used once (%d)", i, seen[i]);
    EXPECT(shuffled, "pages handed out out of order");
    EXPECT(p.desc.kv_layout == FLASHPORT_KV_PAGED && p.desc.num_pages == pages &&
               p.desc.page_size == 16 && p.desc.max_pages_per_seq == 4 && p.desc.seq_kv == 50 &&
               p.seqlens_kv[2] == 50 && p.kv_elems == pages * 16 * 8,
           "paged descriptor");
    EXPECT(p.desc.k.seq == 8 && p.desc.k.batch == 16 * 8, "bnhd pages are [P, page, Hkv, d]");
    EXPECT(fabs(p.flops - 3 * 4.0 * 2 * 8 * 50) < 1e-6, "decode FLOPs: %g", p.flops);
    EXPECT(flashport_attention_desc_validate(&p.desc) == FLASHPORT_OK, "valid: %s",
           flashport_last_error());
    bench_problem_destroy(&p);

    /* inorder: the same cache with page j of sequence b at b * 4 + j. */
    p = problem("f16 B=3 Hq=2 Hkv=1 Nq=1 Nkv=50 d=8 page=16 inorder");
    int in_order = 1;
    for (int b = 0; b < 3; b++)
        for (int j = 0; j < 4; j++) in_order &= p.block_table[b * 4 + j] == b * 4 + j;
    EXPECT(in_order && p.desc.num_pages == pages, "inorder pages in table order");
    bench_problem_destroy(&p);

    /* A window counts its visible pairs exactly; ALiBi slopes are 2^(-8(h+1)/Hq). */
    p = problem("f32 B=1 Hq=4 Hkv=4 Nq=10 Nkv=10 d=2 causal window=3,0 alibi");
    double pairs = 0;
    for (int i = 0; i < 10; i++) pairs += i < 3 ? i + 1 : 4;
    EXPECT(fabs(p.flops - 4.0 * 4 * 2 * pairs) < 1e-9, "window FLOPs: %g", p.flops);
    EXPECT(p.desc.alibi == FLASHPORT_ALIBI_PER_HEAD && p.alibi[0] == 0.25f &&
               p.alibi[3] == 1.0f / 256.0f,
           "ALiBi slopes");
    bench_problem_destroy(&p);

    /* FP8: bf16 output, one descale each. */
    p = problem("fp8_e5m2 B=1 Hq=1 Hkv=1 Nq=4 Nkv=4 d=8");
    EXPECT(p.desc.out_dtype == FLASHPORT_BF16 && p.desc.descale == FLASHPORT_DESCALE_TENSOR &&
               p.descale[0] == 0.5f,
           "FP8 descriptor");
    bench_problem_destroy(&p);
}

/* --shape reads what --list-shapes prints, and refuses anything else. */
static void shape_text(void) {
    const char *texts[] = {"bf16 B=1 Hq=32 Hkv=8 Nq=1 Nkv=4096 d=128",
                           "f16 B=2 Hq=4 Hkv=2 Nq=40 Nkv=56 d=24 causal bnhd",
                           "f32 B=1 Hq=32 Hkv=8 Nq=8192 Nkv=8192 d=128 causal window=4095,0",
                           "fp8_e4m3 B=16 Hq=16 Hkv=8 Nq=1024 Nkv=1024 d=256 causal softcap=50 "
                           "alibi page=16 varlen",
                           "bf16 B=8 Hq=32 Hkv=8 Nq=4096 Nkv=4096 d=128 causal page=16 inorder"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        bench_shape s;
        char why[256] = "", back[256] = "";
        EXPECT(bench_shape_parse(texts[i], &s, why, sizeof why), "%s: %s", texts[i], why);
        bench_shape_text(&s, back, sizeof back);
        EXPECT(strcmp(back, texts[i]) == 0, "round trip: '%s' -> '%s'", texts[i], back);
    }
    bench_shape s;
    char why[256];
    EXPECT(bench_shape_parse("Nq=64", &s, why, sizeof why) && s.batch == 1 && s.heads_q == 1 &&
               s.heads_kv == 1 && s.seq_kv == 64 && s.head_dim == 128 && s.dtype == FLASHPORT_F32,
           "defaults of the shape flags");
    const char *bad[] = {"f32 B=0", "Hq=3 Hkv=2",         "window=4", "window=-2,0", "softcap=0",
                         "page=0",  "Nq=10 Nkv=5 varlen", "f64",      "B=x",         "colour=red",
                         "inorder"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        EXPECT(!bench_shape_parse(bad[i], &s, why, sizeof why), "'%s' is refused", bad[i]);
}

static void random_inputs_are_normal(void) {
    enum { N = 100001 };
    float *x = malloc(N * sizeof *x);
    bench_fill_random(x, FLASHPORT_F32, N, 42);
    double sum = 0, sum2 = 0;
    int zeros = 0;
    for (int i = 0; i < N; ++i) {
        sum += x[i];
        sum2 += (double)x[i] * x[i];
        zeros += x[i] == 0.0f;
    }
    double mean = sum / N, var = sum2 / N - mean * mean;
    EXPECT(fabs(mean) < 0.02 && fabs(var - 1.0) < 0.03 && zeros == 0,
           "N(0,1) inputs: mean %g variance %g zeros %d", mean, var, zeros);
    uint16_t h[3];
    bench_fill_random(h, FLASHPORT_BF16, 3, 42);
    EXPECT(fabsf(bench_load(h, FLASHPORT_BF16, 0) - x[0]) < 1e-2f,
           "bf16 inputs round the same draws");
    free(x);
}

static void input_rotation(void) {
    const size_t mib = (size_t)1 << 20;
    EXPECT(bench_choose_sets(200 * mib, 50 * mib) == 1, "inputs of 4x the cache are not rotated");
    EXPECT(bench_choose_sets(12 * mib, 50 * mib) == 9, "12 MiB sets cover twice a 50 MiB cache");
    EXPECT(bench_choose_sets(1024, 50 * mib) == 64, "at most 64 sets");
    EXPECT(bench_choose_sets(100 * mib, 300 * mib) == 5, "at most 512 MiB of sets");
    EXPECT(bench_choose_sets(190 * mib, 50 * mib) == 2, "a set just under 4x the cache: 2 sets");
}

int main(void) {
    input_rotation();
    slice_choice();
    compare_finds_errors("bhnd");
    compare_finds_errors("bnhd");
    problems();
    shape_text();
    random_inputs_are_normal();
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    else
        printf("OK\n");
    return failures ? 1 : 0;
}
