/* flashport-bench's shapes: their text (printed by --list-shapes, read by --shape), and the
 * concrete problem of a shape: descriptor, drawn lengths, tables and FLOP count. */
#define _POSIX_C_SOURCE 200809L /* strtok_r */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

void bench_shape_text(const bench_shape *s, char *buf, size_t len) {
    size_t n = (size_t)snprintf(
        buf, len, "%s B=%lld Hq=%lld Hkv=%lld Nq=%lld Nkv=%lld d=%lld%s%s",
        flashport_dtype_name(s->dtype), (long long)s->batch, (long long)s->heads_q,
        (long long)s->heads_kv, (long long)s->seq_q, (long long)s->seq_kv, (long long)s->head_dim,
        s->causal ? " causal" : "", s->layout == FLASHPORT_LAYOUT_BNHD ? " bnhd" : "");
    if (s->window && n < len)
        n += (size_t)snprintf(buf + n, len - n, " window=%lld,%lld", (long long)s->window_left,
                              (long long)s->window_right);
    if (s->softcap > 0 && n < len)
        n += (size_t)snprintf(buf + n, len - n, " softcap=%g", s->softcap);
    if (s->alibi && n < len) n += (size_t)snprintf(buf + n, len - n, " alibi");
    if (s->bias && n < len)
        n += (size_t)snprintf(buf + n, len - n, s->bias == BENCH_BIAS_QUERIES ? " qbias" : " bias");
    if (s->sinks && n < len) n += (size_t)snprintf(buf + n, len - n, " sinks");
    if (s->page_size > 0 && n < len)
        n += (size_t)snprintf(buf + n, len - n, " page=%lld", (long long)s->page_size);
    if (s->pages_in_order && n < len) n += (size_t)snprintf(buf + n, len - n, " inorder");
    if (s->varlen && n < len) n += (size_t)snprintf(buf + n, len - n, " varlen");
    if (s->kv_mixed && n < len) snprintf(buf + n, len - n, " kvmix");
}

void bench_shape_help(FILE *out) {
    fprintf(out,
            "Shapes (--list-shapes prints them; --shape reads one back; sizes left out take the\n"
            "shape flags' defaults):\n"
            "  DTYPE B=n Hq=n Hkv=n Nq=n Nkv=n d=n [causal] [bhnd|bnhd] [window=L,R] [softcap=C]\n"
            "  [alibi] [bias|qbias] [sinks] [page=P [inorder]] [varlen] [kvmix]\n"
            "  window=L,R  key j visible to query i when i+a-L <= j <= i+a+R (a = Nkv - Nq;\n"
            "              -1: unbounded), so window=4095,0 is a causal 4096-key window\n"
            "  softcap=C   s = C tanh(s / C)\n"
            "  alibi       per-head slopes 2^(-8(h+1)/Hq)\n"
            "  bias        an additive f32 bias [B, 1, 1, Nkv] (a key-padding mask's shape,\n"
            "              broadcast by zero strides), finite values drawn from [-1, 0] (--seed)\n"
            "  qbias       the same over every query too, [B, 1, Nq, Nkv] (an attention mask's\n"
            "              shape, shared by the heads)\n"
            "  sinks       per-head f32 sink logits, drawn from [0, 1] (--seed)\n"
            "  page=P      K and V in a paged cache of P-row pages, handed out in a shuffled\n"
            "              order (--seed); the pages follow the layout\n"
            "  inorder     with page=P, the pages in table order, as a fresh cache hands them\n"
            "              out (separates the cost of paging from that of scattered pages)\n"
            "  varlen      a packed batch: sequence b has Lq drawn uniformly from 1..Nq (--seed)\n"
            "              and Lkv = Lq + Nkv - Nq keys (needs Nkv >= Nq); with page=P the keys\n"
            "              are paged and Q is packed\n"
            "  kvmix       sequence b has Lkv drawn uniformly from 1..Nkv (--seed): a serving\n"
            "              batch of mixed cache lengths (needs page=P or varlen)\n"
            "  fp8_e4m3 and fp8_e5m2 inputs are random finite bytes, descaled by 0.5 each, and O\n"
            "  is bf16.\n"
            "FLOPs: 4 d Hq per visible (query, key) pair as flashport_attention_desc_flops counts\n"
            "them (causal halves the square; windows count exactly), summed over the real\n"
            "sequences of varlen and paged shapes, so TFLOP/s is on real tokens.\n"
            "Bytes: what a call must move at least, Q and O once and each sequence's visible\n"
            "K and V rows once (a window's keys, not the cache's; with a bias, its entry of\n"
            "each such key); bandwidth_fraction is that over the median time, as a fraction\n"
            "of the measured copy bandwidth, and read_fraction (JSON) of the read-only\n"
            "bandwidth where the backend measures it (cpu_simd).\n");
}

/* ---- parsing ---- */

static int parse_int(const char *v, int64_t *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end) return 0;
    *out = x;
    return 1;
}

int bench_shape_parse(const char *text, bench_shape *s, char *why, size_t why_len) {
    bench_shape r;
    memset(&r, 0, sizeof r);
    r.batch = r.heads_q = 1;
    r.heads_kv = r.seq_kv = -1; /* default: Hq, Nq */
    r.seq_q = 1024;
    r.head_dim = 128;
    r.dtype = FLASHPORT_F32;
    r.layout = FLASHPORT_LAYOUT_BHND;
    char buf[512];
    if (strlen(text) >= sizeof buf) {
        snprintf(why, why_len, "the shape text is longer than %zu characters", sizeof buf - 1);
        return 0;
    }
    strcpy(buf, text);
    static const flashport_dtype dtypes[] = {FLASHPORT_F32, FLASHPORT_F16, FLASHPORT_BF16,
                                             FLASHPORT_FP8_E4M3, FLASHPORT_FP8_E5M2};
    for (char *save = NULL, *tok = strtok_r(buf, " \t", &save); tok;
         tok = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(tok, '=');
        const char *val = eq ? eq + 1 : NULL;
        if (eq) *eq = '\0';
        int ok = 1, known = 1;
        if (!val) {
            int dt = -1;
            for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
                if (strcmp(tok, flashport_dtype_name(dtypes[i])) == 0) dt = (int)i;
            if (dt >= 0)
                r.dtype = dtypes[dt];
            else if (strcmp(tok, "causal") == 0)
                r.causal = 1;
            else if (strcmp(tok, "bhnd") == 0)
                r.layout = FLASHPORT_LAYOUT_BHND;
            else if (strcmp(tok, "bnhd") == 0)
                r.layout = FLASHPORT_LAYOUT_BNHD;
            else if (strcmp(tok, "alibi") == 0)
                r.alibi = 1;
            else if (strcmp(tok, "bias") == 0)
                r.bias = BENCH_BIAS_KEYS;
            else if (strcmp(tok, "qbias") == 0)
                r.bias = BENCH_BIAS_QUERIES;
            else if (strcmp(tok, "sinks") == 0)
                r.sinks = 1;
            else if (strcmp(tok, "varlen") == 0)
                r.varlen = 1;
            else if (strcmp(tok, "kvmix") == 0)
                r.kv_mixed = 1;
            else if (strcmp(tok, "inorder") == 0)
                r.pages_in_order = 1;
            else
                known = 0;
        } else if (strcmp(tok, "B") == 0)
            ok = parse_int(val, &r.batch);
        else if (strcmp(tok, "Hq") == 0)
            ok = parse_int(val, &r.heads_q);
        else if (strcmp(tok, "Hkv") == 0)
            ok = parse_int(val, &r.heads_kv);
        else if (strcmp(tok, "Nq") == 0)
            ok = parse_int(val, &r.seq_q);
        else if (strcmp(tok, "Nkv") == 0)
            ok = parse_int(val, &r.seq_kv);
        else if (strcmp(tok, "d") == 0)
            ok = parse_int(val, &r.head_dim);
        else if (strcmp(tok, "page") == 0)
            ok = parse_int(val, &r.page_size) && r.page_size >= 1;
        else if (strcmp(tok, "window") == 0) {
            int64_t w[2] = {-1, -1};
            ok = cli_parse_ints(val, w, 2) && w[0] >= -1 && w[1] >= -1;
            r.window = 1;
            r.window_left = w[0];
            r.window_right = w[1];
        } else if (strcmp(tok, "softcap") == 0) {
            char *end;
            double c = strtod(val, &end);
            ok = end != val && !*end && c > 0 && c < 3.4e38;
            r.softcap = (float)c;
        } else
            known = 0;
        if (!known) {
            snprintf(why, why_len, "'%s%s%s' is not a dtype, size, flag or feature (see --help)",
                     tok, val ? "=" : "", val ? val : "");
            return 0;
        }
        if (!ok) {
            snprintf(why, why_len, "%s=%s is out of range or malformed", tok, val);
            return 0;
        }
    }
    if (r.heads_kv == -1) r.heads_kv = r.heads_q;
    if (r.seq_kv == -1) r.seq_kv = r.seq_q;
    if (r.batch < 1 || r.heads_q < 1 || r.heads_kv < 1 || r.seq_q < 1 || r.seq_kv < 1 ||
        r.head_dim < 1) {
        snprintf(why, why_len, "sizes must be at least 1");
        return 0;
    }
    if (r.heads_q % r.heads_kv != 0) {
        snprintf(why, why_len, "Hq %lld is not a multiple of Hkv %lld", (long long)r.heads_q,
                 (long long)r.heads_kv);
        return 0;
    }
    if (r.kv_mixed && !r.varlen && r.page_size == 0) {
        snprintf(why, why_len, "kvmix needs page=P or varlen (dense K/V has one length)");
        return 0;
    }
    if (r.pages_in_order && r.page_size == 0) {
        snprintf(why, why_len, "inorder needs page=P (it orders a paged cache's pages)");
        return 0;
    }
    if (r.varlen && r.seq_kv < r.seq_q) {
        snprintf(why, why_len, "varlen needs Nkv >= Nq (each sequence has Lq + Nkv - Nq keys)");
        return 0;
    }
    *s = r;
    return 1;
}

/* ---- the concrete problem ---- */

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void bench_problem_destroy(bench_problem *p) {
    free(p->len_q);
    free(p->len_kv);
    free(p->cu_q);
    free(p->cu_kv);
    free(p->seqlens_kv);
    free(p->block_table);
    free(p->alibi);
    free(p->bias);
    free(p->sinks);
    memset(p, 0, sizeof *p);
}

/* FLOPs of one dense sequence as the library counts them (0 for an empty one). */
static double sequence_flops(const bench_shape *s, int64_t lq, int64_t lkv) {
    flashport_attention_desc d;
    flashport_attention_desc_init(&d, FLASHPORT_F32, 1, s->heads_q, s->heads_kv, lq, lkv,
                                  s->head_dim, FLASHPORT_LAYOUT_BHND);
    d.causal = s->causal;
    if (s->window) {
        d.window_left = s->window_left;
        d.window_right = s->window_right;
    }
    return flashport_attention_desc_flops(&d);
}

/* Key rows of one sequence that some query sees: all of them, unless a left window bound
 * leaves the older ones unseen. */
static int64_t visible_kv_rows(const bench_shape *s, int64_t lq, int64_t lkv) {
    if (!s->window || s->window_left < 0) return lkv;
    const int64_t w = s->window_left + lq + (s->window_right > 0 ? s->window_right : 0);
    return w < lkv ? w : lkv;
}

int bench_problem_create(const bench_shape *s, uint64_t seed, bench_problem *p, char *why,
                         size_t why_len) {
    memset(p, 0, sizeof *p);
    const int64_t b = s->batch, paged = s->page_size > 0;
    const size_t nb = (size_t)b;
    p->len_q = malloc(nb * sizeof *p->len_q);
    p->len_kv = malloc(nb * sizeof *p->len_kv);
    p->alibi = malloc((size_t)s->heads_q * sizeof *p->alibi);
    if (!p->len_q || !p->len_kv || !p->alibi) goto oom;

    /* Lengths: drawn for a packed batch (seed ^ a constant, so that they differ from the
     * inputs' draws of the same seed), else every sequence has Nq and Nkv rows. */
    uint64_t state = seed ^ 0x5eed1e57ull;
    int64_t max_q = 0, max_kv = 0;
    for (int64_t i = 0; i < b; i++) {
        const int64_t lq =
            s->varlen ? 1 + (int64_t)(splitmix64(&state) % (uint64_t)s->seq_q) : s->seq_q;
        p->len_q[i] = (int32_t)lq;
        p->len_kv[i] =
            (int32_t)(s->kv_mixed ? 1 + (int64_t)(splitmix64(&state) % (uint64_t)s->seq_kv)
                      : s->varlen ? lq + s->seq_kv - s->seq_q
                                  : s->seq_kv);
        p->tokens_q += p->len_q[i];
        p->tokens_kv += p->len_kv[i];
        if (p->len_q[i] > max_q) max_q = p->len_q[i];
        if (p->len_kv[i] > max_kv) max_kv = p->len_kv[i];
    }

    flashport_attention_desc *d = &p->desc;
    flashport_attention_desc_init(d, s->dtype, b, s->heads_q, s->heads_kv, s->seq_q, s->seq_kv,
                                  s->head_dim, s->layout);
    d->causal = s->causal;
    if (s->window) {
        d->window_left = s->window_left;
        d->window_right = s->window_right;
    }
    d->softcap = s->softcap;
    if (s->alibi) d->alibi = FLASHPORT_ALIBI_PER_HEAD;
    for (int64_t h = 0; h < s->heads_q; h++)
        p->alibi[h] = (float)exp2(-8.0 * (double)(h + 1) / (double)s->heads_q);
    p->descale[0] = p->descale[1] = p->descale[2] = 0.5f;
    if (s->bias) {
        /* Sequence b's bias spans the longest sequence's queries and keys; shorter ones read
         * its start. */
        const int64_t rows = s->bias == BENCH_BIAS_QUERIES ? max_q : 1, n = b * rows * max_kv;
        p->bias = malloc((size_t)n * sizeof *p->bias);
        if (!p->bias) goto oom;
        for (int64_t i = 0; i < n; i++)
            p->bias[i] = -(float)((double)(splitmix64(&state) >> 11) * 0x1p-53);
        d->bias.enabled = 1;
        d->bias.dtype = FLASHPORT_F32;
        d->bias.batch = rows * max_kv;
        d->bias.head = 0;
        d->bias.query = rows > 1 ? max_kv : 0;
        d->bias.key = 1;
    }
    if (s->sinks) {
        p->sinks = malloc((size_t)s->heads_q * sizeof *p->sinks);
        if (!p->sinks) goto oom;
        for (int64_t h = 0; h < s->heads_q; h++)
            p->sinks[h] = (float)((double)(splitmix64(&state) >> 11) * 0x1p-53);
        d->sinks = 1;
    }

    if (s->varlen) {
        p->cu_q = malloc((nb + 1) * sizeof *p->cu_q);
        if (!p->cu_q) goto oom;
        p->cu_q[0] = 0;
        for (int64_t i = 0; i < b; i++) p->cu_q[i + 1] = p->cu_q[i] + p->len_q[i];
        flashport_attention_desc_set_varlen(d, p->tokens_q, max_q, paged ? 0 : p->tokens_kv,
                                            max_kv);
        if (!paged) {
            p->cu_kv = malloc((nb + 1) * sizeof *p->cu_kv);
            if (!p->cu_kv) goto oom;
            p->cu_kv[0] = 0;
            for (int64_t i = 0; i < b; i++) p->cu_kv[i + 1] = p->cu_kv[i] + p->len_kv[i];
        }
    }
    if (paged) {
        /* Pages handed out in a shuffled order, as a cache that has served other requests
         * would, or in order with inorder; table entries past a sequence's pages stay 0
         * (never read). */
        const int64_t ps = s->page_size, max_pages = (max_kv + ps - 1) / ps;
        int64_t num_pages = 0;
        for (int64_t i = 0; i < b; i++) num_pages += (p->len_kv[i] + ps - 1) / ps;
        int32_t *order = malloc((size_t)num_pages * sizeof *order);
        p->seqlens_kv = malloc(nb * sizeof *p->seqlens_kv);
        p->block_table = calloc(nb * (size_t)max_pages, sizeof *p->block_table);
        if (!order || !p->seqlens_kv || !p->block_table) {
            free(order);
            goto oom;
        }
        for (int64_t i = 0; i < num_pages; i++) order[i] = (int32_t)i;
        for (int64_t i = num_pages - 1; i > 0 && !s->pages_in_order; i--) {
            const int64_t j = (int64_t)(splitmix64(&state) % (uint64_t)(i + 1));
            const int32_t t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        int64_t next = 0;
        for (int64_t i = 0; i < b; i++) {
            p->seqlens_kv[i] = p->len_kv[i];
            for (int64_t j = 0; j < (p->len_kv[i] + ps - 1) / ps; j++)
                p->block_table[i * max_pages + j] = order[next++];
        }
        free(order);
        flashport_attention_desc_set_paged(d, num_pages, ps, max_pages, s->layout);
        d->seq_kv = max_kv;
    }

    const int64_t q_rows = s->varlen ? p->tokens_q : b * s->seq_q;
    p->q_elems = p->o_elems = q_rows * s->heads_q * s->head_dim;
    p->kv_elems = (paged       ? d->num_pages * d->page_size
                   : s->varlen ? p->tokens_kv
                               : b * s->seq_kv) *
                  s->heads_kv * s->head_dim;
    if (!s->varlen && !paged) {
        p->flops = flashport_attention_desc_flops(d);
    } else {
        for (int64_t i = 0; i < b; i++) p->flops += sequence_flops(s, p->len_q[i], p->len_kv[i]);
    }
    const double in = (double)flashport_dtype_size(s->dtype), row = (double)s->head_dim;
    double kv_rows = 0;
    for (int64_t i = 0; i < b; i++)
        kv_rows += (double)visible_kv_rows(s, p->len_q[i], p->len_kv[i]);
    p->bytes = (double)p->tokens_q * (double)s->heads_q * row *
                   (in + (double)flashport_dtype_size(d->out_dtype)) +
               2.0 * kv_rows * (double)s->heads_kv * row * in;
    /* One f32 a visible key, or a visible pair (FLOPs count 4 d Hq a pair). */
    if (s->bias == BENCH_BIAS_KEYS) p->bytes += kv_rows * (double)sizeof(float);
    if (s->bias == BENCH_BIAS_QUERIES)
        p->bytes += p->flops / (4.0 * (double)s->head_dim * (double)s->heads_q) * sizeof(float);
    return 1;
oom:
    bench_problem_destroy(p);
    snprintf(why, why_len, "host allocation for the tables of a batch of %lld failed",
             (long long)b);
    return 0;
}
