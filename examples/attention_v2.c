/* API v2: one decode step over a paged KV cache, with grouped-query heads, on host arrays.
 *
 *   attention_v2 [BACKEND]     (default: FLASHPORT_BACKEND, then auto)
 *
 * Two sequences of 37 and 100 cached keys live in 16-row pages handed out in no particular
 * order; each sequence brings one new query. Prints the backend and kernel, and checks one
 * output row against a direct computation. */
#include <flashport.h>
#include <math.h>
#include <stdio.h>

enum { B = 2, HQ = 8, HKV = 2, D = 64, PAGE = 16, MAX_PAGES = 7, NUM_PAGES = 10 };

/* Pages [NUM_PAGES, PAGE, HKV, D] (FLASHPORT_LAYOUT_BNHD), queries [B, 1, HQ, D]. */
static float k_cache[NUM_PAGES][PAGE][HKV][D], v_cache[NUM_PAGES][PAGE][HKV][D];
static float q[B][HQ][D], o[B][HQ][D], lse[B][HQ];

int main(int argc, char **argv) {
    /* Sequence 0 holds 37 keys in pages 4, 0, 7; sequence 1 holds 100 in pages 2, 9, 5, 1, 3,
     * 8, 6. Entries past a sequence's last page are never read. */
    const int32_t seqlens_kv[B] = {37, 100};
    const int32_t block_table[B][MAX_PAGES] = {{4, 0, 7, 0, 0, 0, 0}, {2, 9, 5, 1, 3, 8, 6}};
    for (int p = 0; p < NUM_PAGES; p++)
        for (int r = 0; r < PAGE; r++)
            for (int h = 0; h < HKV; h++)
                for (int c = 0; c < D; c++) {
                    k_cache[p][r][h][c] = sinf(0.37f * (float)(((p * PAGE + r) * HKV + h) * D + c));
                    v_cache[p][r][h][c] = cosf(0.11f * (float)(((p * PAGE + r) * HKV + h) * D + c));
                }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < HQ; h++)
            for (int c = 0; c < D; c++) q[b][h][c] = sinf(0.05f * (float)((b * HQ + h) * D + c) + 1.0f);

    flashport_context *ctx;
    if (flashport_context_create(argc > 1 ? argv[1] : NULL, &ctx) != FLASHPORT_OK) {
        fprintf(stderr, "%s\n", flashport_last_error());
        return 1;
    }
    /* The descriptor: dense Q with Nq = 1, K and V in the paged cache; the longest sequence
     * (seq_kv) is 100 keys. */
    flashport_attention_desc desc;
    flashport_attention_desc_init(&desc, FLASHPORT_F32, B, HQ, HKV, 1, 100, D, FLASHPORT_LAYOUT_BNHD);
    flashport_attention_desc_set_paged(&desc, NUM_PAGES, PAGE, MAX_PAGES, FLASHPORT_LAYOUT_BNHD);

    flashport_attention_host_args args = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    args.q = q;
    args.k = k_cache;
    args.v = v_cache;
    args.o = o;
    args.lse = lse;
    args.seqlens_kv = seqlens_kv;
    args.block_table = block_table;
    flashport_plan_info plan;
    flashport_status st = flashport_attention_plan(ctx, &desc, &plan);
    if (st == FLASHPORT_OK) st = flashport_attention_run_host(ctx, &desc, &args);
    if (st != FLASHPORT_OK) {
        fprintf(stderr, "%s: %s\n", flashport_status_string(st), flashport_last_error());
        flashport_context_destroy(ctx);
        return 1;
    }

    /* Sequence 1, query head 5 (KV head 5 / (HQ / HKV) = 1), computed directly. */
    const int b = 1, h = 5, kv = h / (HQ / HKV);
    double s[100], m = -INFINITY, sum = 0.0, worst = 0.0;
    for (int j = 0; j < seqlens_kv[b]; j++) {
        const float *key = k_cache[block_table[b][j / PAGE]][j % PAGE][kv];
        s[j] = 0.0;
        for (int c = 0; c < D; c++) s[j] += (double)q[b][h][c] * key[c];
        s[j] /= sqrt((double)D);
        m = fmax(m, s[j]);
    }
    for (int j = 0; j < seqlens_kv[b]; j++) sum += exp(s[j] - m);
    for (int c = 0; c < D; c++) {
        double want = 0.0;
        for (int j = 0; j < seqlens_kv[b]; j++)
            want += exp(s[j] - m) / sum * v_cache[block_table[b][j / PAGE]][j % PAGE][kv][c];
        worst = fmax(worst, fabs(want - o[b][h][c]));
    }
    const double lse_err = fabs(m + log(sum) - lse[b][h]);
    printf("%s, kernel %s: paged decode of %d and %d keys; sequence 1, head 5: max |O - direct| "
           "= %.2e, |LSE - direct| = %.2e\n",
           flashport_context_backend(ctx), plan.kernel, seqlens_kv[0], seqlens_kv[1], worst,
           lse_err);
    flashport_context_destroy(ctx);
    return worst < 1e-5 && lse_err < 1e-5 ? 0 : 1;
}
