/* Checks flashport-bench's helpers: how many input sets it rotates, the slice its accuracy check
 * compares, that bench_compare finds a perturbation inside the slice and ignores one outside it,
 * and that its random inputs are standard normal. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static int failures;

#define EXPECT(cond, ...)                                                  \
    do {                                                                   \
        if (!(cond)) {                                                     \
            ++failures;                                                    \
            fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);          \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

static void slice_choice(void) {
    flashport_problem p;
    flashport_problem_init(&p, FLASHPORT_F32, 2, 8, 2, 100, 120, 16, FLASHPORT_LAYOUT_BHND);
    bench_region r;
    bench_choose_region(&p, 1e12, &r);
    EXPECT(r.whole && r.batch == 2 && r.heads == 8 && r.rows == 100, "a cheap problem is whole");

    /* One KV group is 4 query heads; 4*120*16 FLOPs per row and head. */
    double per_row = 4.0 * 120 * 16;
    bench_choose_region(&p, per_row * 4 * 10, &r);
    EXPECT(!r.whole && r.batch == 1 && r.heads == 4 && r.rows == 10,
           "a budget of 10 rows of one group: batch %lld heads %lld rows %lld", (long long)r.batch,
           (long long)r.heads, (long long)r.rows);
    bench_choose_region(&p, per_row * 0.5, &r);
    EXPECT(r.heads == 1 && r.rows == 1, "a tiny budget still checks one row of one head");
}

static void compare_finds_errors(flashport_layout layout) {
    flashport_problem p;
    flashport_problem_init(&p, FLASHPORT_F32, 2, 4, 2, 30, 30, 8, layout);
    int64_t n = flashport_problem_extent(&p, 'o');
    float *ref = malloc((size_t)n * sizeof *ref), *out = malloc((size_t)n * sizeof *out);
    bench_fill_random(ref, FLASHPORT_F32, n, 7);
    memcpy(out, ref, (size_t)n * sizeof *out);

    bench_region r;
    bench_choose_region(&p, 4.0 * 30 * 8 * 2 * 5, &r); /* 5 rows of heads 0-1 of batch 0 */
    EXPECT(r.heads == 2 && r.rows == 5, "slice of 2 heads x 5 rows");
    double max_abs, rel;
    bench_compare(&p, &r, out, ref, &max_abs, &rel);
    EXPECT(max_abs == 0 && rel == 0, "identical outputs compare equal");

    /* Outside the slice: batch 1, and a row above the last five. */
    out[1 * p.o.batch + 3] += 1.0f;
    out[0 * p.o.batch + 1 * p.o.head + 24 * p.o.seq + 2] += 1.0f;
    bench_compare(&p, &r, out, ref, &max_abs, &rel);
    EXPECT(max_abs == 0, "changes outside the slice are not counted (%g)", max_abs);

    /* Inside: head 1, row 27 (one of the last five), element 5. */
    out[1 * p.o.head + 27 * p.o.seq + 5] += 0.25f;
    bench_compare(&p, &r, out, ref, &max_abs, &rel);
    EXPECT(fabs(max_abs - 0.25) < 1e-6 && rel > 0, "a change inside the slice is found (%g)",
           max_abs);

    out[0 * p.o.head + 29 * p.o.seq + 0] = NAN;
    bench_compare(&p, &r, out, ref, &max_abs, &rel);
    EXPECT(isinf(max_abs), "a NaN where the reference is finite is an infinite error");
    free(ref);
    free(out);
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
    EXPECT(fabsf(bench_load(h, FLASHPORT_BF16, 0) - x[0]) < 1e-2f, "bf16 inputs round the same draws");
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
    compare_finds_errors(FLASHPORT_LAYOUT_BHND);
    compare_finds_errors(FLASHPORT_LAYOUT_BNHD);
    random_inputs_are_normal();
    if (failures) fprintf(stderr, "%d failure(s)\n", failures);
    else printf("OK\n");
    return failures ? 1 : 0;
}
