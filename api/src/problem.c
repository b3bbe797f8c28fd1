/* The problem descriptor: defaults, validation (sizes, GQA, strides), extents, FLOPs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp_core.h"

FLASHPORT_API const char *flashport_dtype_name(flashport_dtype dtype) {
    switch (dtype) {
    case FLASHPORT_F32: return "f32";
    case FLASHPORT_F16: return "f16";
    case FLASHPORT_BF16: return "bf16";
    }
    return "unknown";
}

FLASHPORT_API size_t flashport_dtype_size(flashport_dtype dtype) {
    switch (dtype) {
    case FLASHPORT_F32: return 4;
    case FLASHPORT_F16:
    case FLASHPORT_BF16: return 2;
    }
    return 0;
}

static flashport_strides contiguous(flashport_layout layout, int64_t heads, int64_t seq,
                                    int64_t d) {
    flashport_strides s;
    if (layout == FLASHPORT_LAYOUT_BNHD) {
        s.head = d;
        s.seq = heads * d;
        s.batch = seq * heads * d;
    } else {
        s.seq = d;
        s.head = seq * d;
        s.batch = heads * seq * d;
    }
    return s;
}

FLASHPORT_API void flashport_problem_init(flashport_problem *p, flashport_dtype dtype,
                                          int64_t batch, int64_t heads_q, int64_t heads_kv,
                                          int64_t seq_q, int64_t seq_kv, int64_t head_dim,
                                          flashport_layout layout) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->dtype = dtype;
    p->batch = batch;
    p->heads_q = heads_q;
    p->heads_kv = heads_kv;
    p->seq_q = seq_q;
    p->seq_kv = seq_kv;
    p->head_dim = head_dim;
    p->q = p->o = contiguous(layout, heads_q, seq_q, head_dim);
    p->k = p->v = contiguous(layout, heads_kv, seq_kv, head_dim);
}

/* The three strided dimensions of one tensor plus the contiguous head dimension. */
typedef struct dims4 {
    int64_t n[4], s[4];
} dims4;

static dims4 tensor_dims(const flashport_problem *p, char t) {
    int kv = (t == 'k' || t == 'v');
    const flashport_strides *st = t == 'q' ? &p->q : t == 'k' ? &p->k : t == 'v' ? &p->v : &p->o;
    dims4 d = {{p->batch, kv ? p->heads_kv : p->heads_q, kv ? p->seq_kv : p->seq_q, p->head_dim},
               {st->batch, st->head, st->seq, 1}};
    return d;
}

/* Elements reached: 1 + sum (n_i - 1) * s_i, or -1 on overflow. */
static int64_t span(const dims4 *d) {
    int64_t total = 1;
    for (int i = 0; i < 4; i++) {
        int64_t term;
        if (__builtin_mul_overflow(d->n[i] - 1, d->s[i], &term)) return -1;
        if (__builtin_add_overflow(total, term, &total)) return -1;
    }
    return total;
}

/* Sufficient condition for no two elements sharing an address: ordered by stride, each stride
 * clears the span of all the smaller ones. Dimensions of extent 1 take no part. */
static int strides_disjoint(const dims4 *d) {
    int idx[4], m = 0;
    for (int i = 0; i < 4; i++)
        if (d->n[i] > 1) idx[m++] = i;
    for (int a = 1; a < m; a++)
        for (int b = a; b > 0 && d->s[idx[b]] < d->s[idx[b - 1]]; b--) {
            int t = idx[b];
            idx[b] = idx[b - 1];
            idx[b - 1] = t;
        }
    int64_t inner = 1;
    for (int a = 0; a < m; a++) {
        const int i = idx[a];
        if (d->s[i] < inner) return 0;
        int64_t term;
        if (__builtin_mul_overflow(d->n[i] - 1, d->s[i], &term)) return 0;
        if (__builtin_add_overflow(inner, term, &inner)) return 0;
    }
    return 1;
}

flashport_status fp_problem_check(const flashport_problem *p, const char *where) {
    if (!p) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "problem is NULL");
    if (flashport_dtype_size(p->dtype) == 0)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "unknown dtype %d", (int)p->dtype);
    const struct {
        const char *name;
        int64_t v;
    } sizes[] = {{"batch", p->batch},     {"heads_q", p->heads_q}, {"heads_kv", p->heads_kv},
                 {"seq_q", p->seq_q},     {"seq_kv", p->seq_kv},   {"head_dim", p->head_dim}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].v <= 0)
            return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "%s must be positive (got %lld)",
                            sizes[i].name, (long long)sizes[i].v);
    if (p->heads_q % p->heads_kv != 0)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                        "heads_q (%lld) must be a multiple of heads_kv (%lld)",
                        (long long)p->heads_q, (long long)p->heads_kv);
    if (!isfinite(p->scale))
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "scale must be finite");
    if (p->causal != 0 && p->causal != 1)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "causal must be 0 or 1 (got %d)",
                        p->causal);
    int64_t lse_elems;
    if (__builtin_mul_overflow(p->batch, p->heads_q, &lse_elems) ||
        __builtin_mul_overflow(lse_elems, p->seq_q, &lse_elems) ||
        __builtin_mul_overflow(lse_elems, (int64_t)sizeof(float), &lse_elems))
        return fp_error(FLASHPORT_ERROR_SIZE_OVERFLOW, where, "batch*heads_q*seq_q overflows");
    static const char names[4] = {'q', 'k', 'v', 'o'};
    for (int t = 0; t < 4; t++) {
        dims4 d = tensor_dims(p, names[t]);
        if (d.s[0] < 0 || d.s[1] < 0 || d.s[2] < 0)
            return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                            "%c strides must be non-negative (batch %lld, head %lld, seq %lld)",
                            names[t], (long long)d.s[0], (long long)d.s[1], (long long)d.s[2]);
        int64_t n = span(&d), bytes;
        if (n < 0 || __builtin_mul_overflow(n, (int64_t)flashport_dtype_size(p->dtype), &bytes))
            return fp_error(FLASHPORT_ERROR_SIZE_OVERFLOW, where,
                            "%c: the byte extent of its strides overflows", names[t]);
        if (!strides_disjoint(&d))
            return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                            "%c strides (batch %lld, head %lld, seq %lld) make elements overlap",
                            names[t], (long long)d.s[0], (long long)d.s[1], (long long)d.s[2]);
    }
    return FLASHPORT_OK;
}

FLASHPORT_API flashport_status flashport_problem_validate(const flashport_problem *p) {
    return fp_problem_check(p, "flashport_problem_validate");
}

FLASHPORT_API int64_t flashport_problem_extent(const flashport_problem *p, char tensor) {
    if (!p || (tensor != 'q' && tensor != 'k' && tensor != 'v' && tensor != 'o')) return 0;
    if (fp_problem_check(p, "flashport_problem_extent") != FLASHPORT_OK) return 0;
    dims4 d = tensor_dims(p, tensor);
    return span(&d);
}

FLASHPORT_API double flashport_problem_flops(const flashport_problem *p) {
    if (!p) return 0.0;
    double f = 4.0 * (double)p->batch * (double)p->heads_q * (double)p->seq_q *
               (double)p->seq_kv * (double)p->head_dim;
    return p->causal ? f / 2.0 : f;
}
