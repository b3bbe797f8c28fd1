#include "tiling.h"

#include <string.h>

#include "scratch.h"

/* The K and V rows of a ring's keys take at most this: every key a tile visits when they fit
 * (8160 keys of float32 rows at d = 64, 4064 at d = 128; 10890 and 5429 of the bf16 pair
 * layouts', 4822 of amxbf16's longer rows at d = 128), else one block. A ring larger than a
 * core's L2 is read from L3, as the source rows would be, and still saves each tile converting
 * them again: 4 MiB against 2 measured 4-10% faster on the float32 path and 16% on amxbf16
 * where the larger ring holds every key. */
#define RING_BYTES ((int64_t)4 << 20)

static int masked(const fp_problem *p) {
    return p->causal || p->window_left >= 0 || p->window_right >= 0;
}

void cs_tiling_choose(const fp_problem *p, int threads, const cs_kernel_ops *ops, cs_tiling *t) {
    const int64_t dq = round_up(p->head_dim, CS_DIM_STEP);
    /* Rows of the tile's operands are t->dq floats apart, past the head dimension's dq where the
     * P V product reads every other V row as a tile (pv_block): at a multiple of 128 floats those
     * rows' lines fall in a quarter of L1's sets, and 16 more floats made amxbf16 2-7% faster
     * at d = 128 (the other paths compute every column of a row: they keep dq). */
    t->dq = dq + (ops && ops->pv_block && dq % 128 == 0 ? 16 : 0);
    t->split = 0;
    /* Up to 96 rows: each converted K/V block then serves enough rows that converting it is
     * noise; Q and O of the tile (2 * rows * dq floats) stay within about 400 KiB of L2. */
    int64_t rows = min64(96, max64(CS_Q_PANEL, 65536 / dq));
    /* On the AMX tiles, once the keys a tile reads (bf16 K and every other V row: 4 d bytes a
     * key) pass 1 MiB they come back from L3 for every tile, and the tile loads wait on them:
     * tiles of 192 rows halve those reads (3-7% faster at N = 4096, d = 128, causal or not). */
    if (ops && ops->pv_block && p->seq_kv * 4 * p->head_dim > ((int64_t)1 << 20)) rows = 192;
    /* With a mask the tiles of a sequence cost more the more keys they see, and with fewer
     * than 4 of them per thread the scheduler, most expensive first, balances whole tiles
     * badly: tiles of one Q panel give it pieces of half the size. Not on the AMX tiles
     * (pv_block), which run best on tall tiles (the rule above): 48-row tiles ran slower
     * there. */
    if (masked(p) && threads > 1 && !(ops && ops->pv_block) &&
        p->batch * p->heads_q * p->seq_q < 4 * threads * rows)
        rows = CS_Q_PANEL;
    rows = rows / CS_Q_PANEL * CS_Q_PANEL;
    const int64_t group = p->heads_q / p->heads_kv;
    t->heads = (int)min64(group, rows);
    t->queries = (int)max64(1, min64(p->seq_q, rows / t->heads));
    t->threads = threads < 1 ? 1 : threads;
    t->rows = (int)round_up((int64_t)t->heads * t->queries, CS_Q_PANEL);
    /* Without a mask the tiles of a sequence cost the same, and unless their count divides
     * among the threads the last round leaves threads idle. Each sequence is then cut into m
     * equal shares, tiled on their own, m times the (batch, KV head, head chunk) items making a
     * multiple of the threads: each thread runs as many whole tiles and one shorter one, padded
     * by at most a register of rows (equal tiles of fewer queries would each be padded up to a
     * register of rows). A share's rows are a multiple of a register's. */
    t->share = (int)max64(1, p->seq_q);
    const int64_t per_q_tile = p->batch * p->heads_kv * ((group + t->heads - 1) / t->heads);
    if (!masked(p) && t->threads > 1) {
        const int64_t m = t->threads / gcd64(per_q_tile, t->threads);
        const int64_t step = CS_ROW_STEP / gcd64(CS_ROW_STEP, t->heads);
        if (m > 1) t->share = (int)max64(1, round_up((p->seq_q + m - 1) / m, step));
    }
    /* Blocks of K and V of about 64 KiB each (L2): longer blocks spread the per-block softmax
     * and rescaling over more products; measured best between 64 and 128 keys at d = 64..128. */
    int64_t keys = min64(128, max64(CS_KEY_STEP, 16384 / dq));
    keys = keys / CS_KEY_STEP * CS_KEY_STEP;
    t->keys = (int)min64(keys, max64(CS_KEY_STEP, round_up(p->seq_kv, CS_KEY_STEP)));
    /* A tile visits at most its positions plus both sides of the window, or every key; the
     * ring keeps CS_KEY_STEP free slots past them for a block's zero rows. The sides are
     * clamped to what the ring could hold before they are added (they may be INT64_MAX). */
    const int64_t most = RING_BYTES / cs_ring_key_bytes(ops, t->dq) - 2 * CS_KEY_STEP;
    const int64_t right = p->causal ? 0 : p->window_right;
    int64_t reach = p->seq_kv;
    if (p->window_left >= 0 && right >= 0)
        reach = min64(reach, t->queries + min64(p->window_left, most) + min64(right, most));
    t->ring = (int)(reach <= most ? max64(round_up(reach, CS_KEY_STEP), t->keys) + CS_KEY_STEP
                                  : t->keys + CS_KEY_STEP);
    /* Sequences of total_q rows cut into tiles: each share of a sequence adds at most one
     * partial tile. */
    const int64_t total_q = p->q_varlen ? p->total_q : p->batch * p->seq_q;
    t->max_tiles = total_q / t->queries + (total_q + p->batch * (t->share - 1)) / t->share;
}

_Static_assert(sizeof(cs_tiling) <= FP_PLAN_KERNEL_PARAMS_BYTES,
               "a plan holds the kernel parameters");

void cs_tiling_to_plan(const cs_tiling *t, fp_plan *plan) {
    memcpy(plan->kernel_params.bytes, t, sizeof *t);
}

void cs_tiling_from_plan(const fp_plan *plan, cs_tiling *t) {
    memcpy(t, plan->kernel_params.bytes, sizeof *t);
}
