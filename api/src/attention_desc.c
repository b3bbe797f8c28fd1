/*
 * The API v2 descriptor: defaults, loading a caller's (possibly older or newer) struct, field
 * validation, normalisation for the backends, features, and the size of every buffer a call
 * takes. The v1 flashport_problem converts into it, so one validator serves both APIs.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "fp_core.h"

FLASHPORT_API void flashport_attention_desc_init(flashport_attention_desc *d, flashport_dtype dtype,
                                                 int64_t batch, int64_t heads_q, int64_t heads_kv,
                                                 int64_t seq_q, int64_t seq_kv, int64_t head_dim,
                                                 flashport_layout layout) {
    if (!d) return;
    flashport_problem p;
    flashport_problem_init(&p, dtype, batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, layout);
    fp_problem_from_v1(&p, d);
    d->out_dtype =
        dtype == FLASHPORT_FP8_E4M3 || dtype == FLASHPORT_FP8_E5M2 ? FLASHPORT_BF16 : dtype;
    d->descale = dtype == FLASHPORT_FP8_E4M3 || dtype == FLASHPORT_FP8_E5M2
                     ? FLASHPORT_DESCALE_TENSOR
                     : FLASHPORT_DESCALE_NONE;
}

FLASHPORT_API void flashport_attention_desc_set_varlen(flashport_attention_desc *d, int64_t total_q,
                                                       int64_t max_seqlen_q, int64_t total_kv,
                                                       int64_t max_seqlen_kv) {
    if (!d) return;
    d->q_varlen = 1;
    d->total_q = total_q;
    d->seq_q = max_seqlen_q;
    d->q = d->o = (flashport_strides){0, d->head_dim, fp_mul_sat(d->heads_q, d->head_dim)};
    if (total_kv > 0) {
        d->kv_layout = FLASHPORT_KV_VARLEN;
        d->total_kv = total_kv;
        d->seq_kv = max_seqlen_kv;
        d->k = d->v = (flashport_strides){0, d->head_dim, fp_mul_sat(d->heads_kv, d->head_dim)};
    }
}

FLASHPORT_API void flashport_attention_desc_set_paged(flashport_attention_desc *d,
                                                      int64_t num_pages, int64_t page_size,
                                                      int64_t max_pages_per_seq,
                                                      flashport_layout layout) {
    if (!d) return;
    d->kv_layout = FLASHPORT_KV_PAGED;
    d->num_pages = num_pages;
    d->page_size = page_size;
    d->max_pages_per_seq = max_pages_per_seq;
    d->total_kv = 0;
    const int64_t hd = fp_mul_sat(d->heads_kv, d->head_dim), page = fp_mul_sat(page_size, hd);
    if (layout == FLASHPORT_LAYOUT_BNHD)
        d->k = (flashport_strides){page, d->head_dim, hd};
    else
        d->k = (flashport_strides){page, fp_mul_sat(page_size, d->head_dim), d->head_dim};
    d->v = d->k;
    const int64_t cap = fp_mul_sat(page_size, max_pages_per_seq);
    if (d->seq_kv <= 0 || d->seq_kv > cap) d->seq_kv = cap;
}

void fp_problem_from_v1(const flashport_problem *p, fp_problem *out) {
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->dtype = out->out_dtype = p->dtype;
    out->batch = p->batch;
    out->heads_q = p->heads_q;
    out->heads_kv = p->heads_kv;
    out->seq_q = p->seq_q;
    out->seq_kv = p->seq_kv;
    out->head_dim = p->head_dim;
    out->q = p->q;
    out->k = p->k;
    out->v = p->v;
    out->o = p->o;
    out->scale = p->scale;
    out->causal = p->causal;
    out->window_left = out->window_right = -1;
    out->kernel = p->kernel;
}

flashport_status fp_desc_load(const flashport_attention_desc *d, fp_problem *out,
                              const char *where) {
    if (!d) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "descriptor is NULL");
    if (d->struct_size < sizeof *out) {
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                        "desc.struct_size is %zu; flashport_attention_desc_init sets it (%zu in "
                        "this version, the first)",
                        d->struct_size, sizeof *out);
    }
    /* A newer caller's struct: the fields this library does not know must be zero ("off"),
     * or the call would silently ignore what they ask for. */
    const unsigned char *tail = (const unsigned char *)d + sizeof *out;
    for (size_t i = 0; i < d->struct_size - sizeof *out; i++)
        if (tail[i])
            return fp_error(FLASHPORT_ERROR_UNSUPPORTED, where,
                            "desc.struct_size is %zu and a field past byte %zu is set: it asks "
                            "for a feature this library (%s) does not know",
                            d->struct_size, sizeof *out, flashport_version_string());
    memcpy(out, d, sizeof *out);
    out->struct_size = sizeof *out;
    return FLASHPORT_OK;
}

static int is_fp8(flashport_dtype t) { return t == FLASHPORT_FP8_E4M3 || t == FLASHPORT_FP8_E5M2; }
static int is_float(flashport_dtype t) {
    return t == FLASHPORT_F32 || t == FLASHPORT_F16 || t == FLASHPORT_BF16;
}
/* An input dtype that is its own output dtype. */
static int is_plain(flashport_dtype t) { return is_float(t) || t == FLASHPORT_F64; }

/* ---- tensor geometry ---- */

/* The three strided dimensions of one tensor plus the contiguous head dimension. */
typedef struct dims4 {
    int64_t n[4], s[4];
} dims4;

static dims4 tensor_dims(const fp_problem *p, char t) {
    const int kv = (t == 'k' || t == 'v');
    const flashport_strides *st = t == 'q' ? &p->q : t == 'k' ? &p->k : t == 'v' ? &p->v : &p->o;
    dims4 d = {{p->batch, kv ? p->heads_kv : p->heads_q, kv ? p->seq_kv : p->seq_q, p->head_dim},
               {st->batch, st->head, st->seq, 1}};
    if (!kv && p->q_varlen) {
        d.n[0] = 1;
        d.n[2] = p->total_q;
    } else if (kv && p->kv_layout == FLASHPORT_KV_VARLEN) {
        d.n[0] = 1;
        d.n[2] = p->total_kv;
    } else if (kv && p->kv_layout == FLASHPORT_KV_PAGED) {
        d.n[0] = p->num_pages;
        d.n[2] = p->page_size;
    }
    return d;
}

/* Elements reached: 1 + sum (n_i - 1) * s_i (0 when a dimension is empty), or -1 on overflow. */
static int64_t span(const int64_t *n, const int64_t *s, int dims) {
    int64_t total = 1;
    for (int i = 0; i < dims; i++) {
        if (n[i] == 0) return 0;
        int64_t term;
        if (__builtin_mul_overflow(n[i] - 1, s[i], &term)) return -1;
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

/* For a >= 0; a + b - 1 would overflow for b near INT64_MAX (UBSan, found by fuzz_desc). */
static int64_t ceil_div(int64_t a, int64_t b) { return b > 0 ? a / b + (a % b != 0) : 0; }

/* ---- validation ---- */

#define BAD(...) fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, __VA_ARGS__)

static flashport_status check_flag(int v, const char *field, const char *where) {
    if (v != 0 && v != 1) return BAD("%s must be 0 or 1 (got %d)", field, v);
    return FLASHPORT_OK;
}

static flashport_status check_sizes(const fp_problem *p, const char *where) {
    const int packed_q = p->q_varlen, ragged_kv = p->kv_layout != FLASHPORT_KV_DENSE;
    const struct {
        const char *name;
        int64_t v, min;
    } sizes[] = {{"batch", p->batch, 1},
                 {"heads_q", p->heads_q, 1},
                 {"heads_kv", p->heads_kv, 1},
                 {"seq_q", p->seq_q, packed_q ? 0 : 1},
                 {"seq_kv", p->seq_kv, ragged_kv ? 0 : 1},
                 {"head_dim", p->head_dim, 1}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].v < sizes[i].min)
            return BAD("%s must be %s (got %lld)", sizes[i].name,
                       sizes[i].min ? "positive" : "non-negative", (long long)sizes[i].v);
    if (p->heads_q % p->heads_kv != 0)
        return BAD("heads_q (%lld) must be a multiple of heads_kv (%lld)", (long long)p->heads_q,
                   (long long)p->heads_kv);
    return FLASHPORT_OK;
}

static flashport_status check_dtypes(const fp_problem *p, const char *where) {
    if (!is_plain(p->dtype) && !is_fp8(p->dtype)) return BAD("unknown dtype %d", (int)p->dtype);
    if (is_fp8(p->dtype)) {
        if (!is_float(p->out_dtype))
            return BAD("out_dtype must be f32, f16 or bf16 for %s inputs (got %d)",
                       flashport_dtype_name(p->dtype), (int)p->out_dtype);
        if (p->descale != FLASHPORT_DESCALE_TENSOR && p->descale != FLASHPORT_DESCALE_BLOCK)
            return BAD("descale must be FLASHPORT_DESCALE_TENSOR or _BLOCK for %s inputs (got %d)",
                       flashport_dtype_name(p->dtype), (int)p->descale);
        if (p->descale == FLASHPORT_DESCALE_BLOCK && p->descale_block < 1)
            return BAD("descale_block must be positive with FLASHPORT_DESCALE_BLOCK (got %lld)",
                       (long long)p->descale_block);
        if (p->descale == FLASHPORT_DESCALE_TENSOR && p->descale_block != 0)
            return BAD("descale_block is for FLASHPORT_DESCALE_BLOCK only (got %lld)",
                       (long long)p->descale_block);
    } else {
        if (p->out_dtype != p->dtype)
            return BAD("out_dtype (%s) must equal dtype (%s) unless the inputs are FP8",
                       flashport_dtype_name(p->out_dtype), flashport_dtype_name(p->dtype));
        if (p->descale != FLASHPORT_DESCALE_NONE || p->descale_block != 0)
            return BAD("descale and descale_block are for FP8 inputs only (dtype %s)",
                       flashport_dtype_name(p->dtype));
    }
    return FLASHPORT_OK;
}

static flashport_status check_modifiers(const fp_problem *p, const char *where) {
    flashport_status st;
    if (!isfinite(p->scale)) return BAD("scale must be finite");
    if ((st = check_flag(p->causal, "causal", where))) return st;
    if (p->window_left < -1)
        return BAD("window_left must be -1 or >= 0 (got %lld)", (long long)p->window_left);
    if (p->window_right < -1)
        return BAD("window_right must be -1 or >= 0 (got %lld)", (long long)p->window_right);
    if (p->causal && p->window_right > 0)
        return BAD("causal is window_right = 0; window_right %lld contradicts it",
                   (long long)p->window_right);
    if (!(p->softcap >= 0.0f) || !isfinite(p->softcap))
        return BAD("softcap must be 0 (off) or a finite positive value");
    if (p->alibi != FLASHPORT_ALIBI_NONE && p->alibi != FLASHPORT_ALIBI_PER_HEAD &&
        p->alibi != FLASHPORT_ALIBI_PER_BATCH_HEAD)
        return BAD("alibi must be FLASHPORT_ALIBI_NONE, _PER_HEAD or _PER_BATCH_HEAD (got %d)",
                   (int)p->alibi);
    const flashport_bias_desc *b = &p->bias;
    if ((st = check_flag(b->enabled, "bias.enabled", where))) return st;
    if (b->enabled) {
        if (p->dtype == FLASHPORT_F64 ? b->dtype != FLASHPORT_F32 && b->dtype != FLASHPORT_F64
                                      : !is_float(b->dtype))
            return BAD("bias.dtype must be f32, f16 or bf16 (f32 or f64 for f64 inputs; got %d)",
                       (int)b->dtype);
        if (b->batch < 0 || b->head < 0 || b->query < 0 || b->key < 0)
            return BAD("bias strides must be non-negative (batch %lld, head %lld, query %lld, key "
                       "%lld)",
                       (long long)b->batch, (long long)b->head, (long long)b->query,
                       (long long)b->key);
    } else if (b->dtype || b->batch || b->head || b->query || b->key) {
        return BAD("bias.enabled is 0 but bias.dtype or its strides are set");
    }
    if ((st = check_flag(p->sinks, "sinks", where))) return st;
    if ((st = check_flag(p->deterministic, "deterministic", where))) return st;
    return FLASHPORT_OK;
}

static flashport_status check_layout(const fp_problem *p, const char *where) {
    flashport_status st;
    if ((st = check_flag(p->q_varlen, "q_varlen", where))) return st;
    if (p->q_varlen) {
        if (p->total_q < 0)
            return BAD("total_q must be non-negative (got %lld)", (long long)p->total_q);
        if (p->q.batch != 0 || p->o.batch != 0)
            return BAD("q.batch and o.batch must be 0 with q_varlen (rows are addressed by "
                       "cu_seqlens_q and the seq stride)");
        if (p->kv_layout == FLASHPORT_KV_DENSE)
            return BAD("q_varlen needs kv_layout FLASHPORT_KV_VARLEN or FLASHPORT_KV_PAGED");
    } else if (p->total_q != 0) {
        return BAD("total_q is for q_varlen only (got %lld)", (long long)p->total_q);
    }
    const int paged = p->kv_layout == FLASHPORT_KV_PAGED;
    switch (p->kv_layout) {
    case FLASHPORT_KV_DENSE: break;
    case FLASHPORT_KV_VARLEN:
        if (!p->q_varlen) return BAD("kv_layout FLASHPORT_KV_VARLEN needs q_varlen = 1");
        if (p->total_kv < 0)
            return BAD("total_kv must be non-negative (got %lld)", (long long)p->total_kv);
        if (p->k.batch != 0 || p->v.batch != 0)
            return BAD("k.batch and v.batch must be 0 with FLASHPORT_KV_VARLEN");
        break;
    case FLASHPORT_KV_PAGED:
        if (p->num_pages < 1 || p->page_size < 1 || p->max_pages_per_seq < 1)
            return BAD("num_pages, page_size and max_pages_per_seq must be positive for a paged "
                       "cache (got %lld, %lld, %lld)",
                       (long long)p->num_pages, (long long)p->page_size,
                       (long long)p->max_pages_per_seq);
        int64_t cap;
        if (__builtin_mul_overflow(p->page_size, p->max_pages_per_seq, &cap))
            return fp_error(FLASHPORT_ERROR_SIZE_OVERFLOW, where,
                            "page_size * max_pages_per_seq overflows");
        if (p->seq_kv > cap)
            return BAD("seq_kv (%lld) exceeds max_pages_per_seq * page_size (%lld)",
                       (long long)p->seq_kv, (long long)cap);
        break;
    default: return BAD("unknown kv_layout %d", (int)p->kv_layout);
    }
    if (p->kv_layout != FLASHPORT_KV_VARLEN && p->total_kv != 0)
        return BAD("total_kv is for kv_layout FLASHPORT_KV_VARLEN only (got %lld)",
                   (long long)p->total_kv);
    if (!paged && (p->num_pages || p->page_size || p->max_pages_per_seq))
        return BAD("num_pages, page_size and max_pages_per_seq are for a paged cache only");
    return FLASHPORT_OK;
}

static flashport_status check_strides(const fp_problem *p, const char *where) {
    static const char names[4] = {'q', 'k', 'v', 'o'};
    for (int t = 0; t < 4; t++) {
        dims4 d = tensor_dims(p, names[t]);
        if (d.s[0] < 0 || d.s[1] < 0 || d.s[2] < 0)
            return BAD("%c strides must be non-negative (batch %lld, head %lld, seq %lld)",
                       names[t], (long long)d.s[0], (long long)d.s[1], (long long)d.s[2]);
        int64_t n = span(d.n, d.s, 4), bytes;
        if (n < 0 || __builtin_mul_overflow(n, (int64_t)8, &bytes))
            return fp_error(FLASHPORT_ERROR_SIZE_OVERFLOW, where,
                            "%c: the byte extent of its strides overflows", names[t]);
        if (!strides_disjoint(&d))
            return BAD("%c strides (batch %lld, head %lld, seq %lld) make elements overlap",
                       names[t], (long long)d.s[0], (long long)d.s[1], (long long)d.s[2]);
    }
    /* The other buffers are sized by products no stride bounds (batch * max_pages_per_seq for
     * the block table, the descale blocks, the LSE rows, the bias extent), and the core and the
     * backends index them with those products. The backward pass uses every slot. */
    for (int s = 0; s < FP_SLOT_COUNT; s++)
        if (fp_slot_need(p, FP_OP_BACKWARD, (fp_slot)s).overflow)
            return fp_error(FLASHPORT_ERROR_SIZE_OVERFLOW, where,
                            "args.%s: the byte size the descriptor gives it overflows",
                            fp_slot_name((fp_slot)s));
    return FLASHPORT_OK;
}

flashport_status fp_desc_check(const fp_problem *p, const char *where) {
    flashport_status st;
    if ((st = check_dtypes(p, where))) return st;
    if ((st = check_sizes(p, where))) return st;
    if ((st = check_modifiers(p, where))) return st;
    if ((st = check_layout(p, where))) return st;
    return check_strides(p, where);
}

#undef BAD

void fp_desc_normalise(fp_problem *p) {
    if (p->scale == 0.0f) p->scale = (float)(1.0 / sqrt((double)p->head_dim));
    const int64_t right = p->causal ? 0 : p->window_right;
    p->causal = p->window_left < 0 && right == 0;
    p->window_right = p->causal ? -1 : right;
}

FLASHPORT_API flashport_status
flashport_attention_desc_validate(const flashport_attention_desc *d) {
    static const char *where = "flashport_attention_desc_validate";
    fp_problem p;
    flashport_status st = fp_desc_load(d, &p, where);
    return st ? st : fp_desc_check(&p, where);
}

static __int128 clamp128(__int128 x, __int128 lo, __int128 hi) {
    return x < lo ? lo : x > hi ? hi : x;
}

/* Pairs (i, j) of the nq x nkv grid with j - i <= c, summed in closed form: rows i < lo see no
 * key, rows lo <= i < hi see i + c + 1, the rest all nkv. With int64 sizes (varlen maxima
 * included) and |c| < 2^65, no term reaches 2^127. */
static __int128 pairs_up_to(int64_t nq, int64_t nkv, __int128 c) {
    const __int128 k = c + 1, m = nq, n = nkv;
    const __int128 lo = clamp128(1 - k, 0, m), hi = clamp128(n - k, lo, m), rows = hi - lo;
    /* (rows) * (first + last) / 2, halving whichever factor is even. */
    const __int128 ends = lo + hi - 1 + 2 * k;
    const __int128 ramp = rows % 2 == 0 ? rows / 2 * ends : ends / 2 * rows;
    return ramp + (m - hi) * n;
}

FLASHPORT_API double flashport_attention_desc_flops(const flashport_attention_desc *d) {
    fp_problem p;
    if (fp_desc_load(d, &p, "flashport_attention_desc_flops") ||
        fp_desc_check(&p, "flashport_attention_desc_flops"))
        return 0.0;
    fp_desc_normalise(&p);
    const double per_pair = 4.0 * (double)p.batch * (double)p.heads_q * (double)p.head_dim;
    /* Square causal: the FlashAttention papers' N^2 / 2, so figures compare with theirs. */
    if (p.causal && p.seq_q == p.seq_kv) return per_pair * (double)p.seq_q * (double)p.seq_kv / 2.0;
    /* Row i sees keys a + i - window_left .. a + i + right (a = Nkv - Nq; causal is right = 0):
     * the pairs with j - i <= a + right, less those with j - i < a - left. In closed form,
     * without a loop over the rows (as long as seq_q) or an int64 sum that overflows for huge
     * windows. */
    const int64_t right = p.causal ? 0 : p.window_right;
    const __int128 a = (__int128)p.seq_kv - p.seq_q;
    const __int128 all = (__int128)p.seq_q * p.seq_kv;
    const __int128 up_to = right < 0 ? all : pairs_up_to(p.seq_q, p.seq_kv, a + right);
    const __int128 below =
        p.window_left < 0 ? 0 : pairs_up_to(p.seq_q, p.seq_kv, a - p.window_left - 1);
    return per_pair * (double)(up_to - below);
}

/* ---- features ---- */

/* ---- buffers ---- */

/* a * b * c, or -1 when it overflows (the factors are non-negative). */
static int64_t product(int64_t a, int64_t b, int64_t c) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r) || __builtin_mul_overflow(r, c, &r)) return -1;
    return r;
}

fp_slot_use fp_slot_need(const fp_problem *p, fp_op op, fp_slot slot) {
    fp_slot_use u = {FP_SLOT_UNUSED, 0, 0, 0};
    const int64_t in = (int64_t)flashport_dtype_size(p->dtype);
    const int64_t out = (int64_t)flashport_dtype_size(p->out_dtype);
    const int bwd = op == FP_OP_BACKWARD;
    int64_t elems = 0, esize = 4;
    dims4 d;
    switch (slot) {
    case FP_SLOT_Q:
    case FP_SLOT_K:
    case FP_SLOT_V:
    case FP_SLOT_O:
    case FP_SLOT_DO:
        d = tensor_dims(p, "qkvoo"[slot == FP_SLOT_DO ? 4 : slot]);
        elems = span(d.n, d.s, 4);
        esize = slot <= FP_SLOT_V ? in : out;
        u.use = FP_SLOT_REQUIRED;
        u.output = slot == FP_SLOT_O && !bwd;
        if (slot == FP_SLOT_DO && !bwd) u.use = FP_SLOT_UNUSED;
        break;
    case FP_SLOT_DQ:
    case FP_SLOT_DK:
    case FP_SLOT_DV:
        if (!bwd) break;
        d = tensor_dims(p, "qkv"[slot - FP_SLOT_DQ]);
        elems = span(d.n, d.s, 4);
        esize = out;
        u.use = FP_SLOT_REQUIRED;
        u.output = 1;
        break;
    case FP_SLOT_LSE:
        elems = p->q_varlen ? product(p->heads_q, p->total_q, 1)
                            : product(p->batch, p->heads_q, p->seq_q);
        u.use = bwd ? FP_SLOT_REQUIRED : FP_SLOT_OPTIONAL;
        u.output = !bwd;
        break;
    case FP_SLOT_SINKS:
        if (p->sinks) u.use = FP_SLOT_REQUIRED, elems = p->heads_q;
        break;
    case FP_SLOT_ALIBI:
        if (p->alibi != FLASHPORT_ALIBI_NONE)
            u.use = FP_SLOT_REQUIRED,
            elems =
                product(p->heads_q, p->alibi == FLASHPORT_ALIBI_PER_BATCH_HEAD ? p->batch : 1, 1);
        break;
    case FP_SLOT_BIAS:
        if (p->bias.enabled) {
            const int64_t n[4] = {p->batch, p->heads_q, p->seq_q, p->seq_kv};
            const int64_t s[4] = {p->bias.batch, p->bias.head, p->bias.query, p->bias.key};
            u.use = FP_SLOT_REQUIRED;
            elems = span(n, s, 4);
            esize = (int64_t)flashport_dtype_size(p->bias.dtype);
        }
        break;
    case FP_SLOT_CU_SEQLENS_Q:
    case FP_SLOT_CU_SEQLENS_KV:
        /* batch + 1 offsets; -1 (overflow) for batch = INT64_MAX (UBSan, found by fuzz_desc). */
        if (slot == FP_SLOT_CU_SEQLENS_Q ? p->q_varlen : p->kv_layout == FLASHPORT_KV_VARLEN)
            u.use = FP_SLOT_REQUIRED, elems = p->batch < INT64_MAX ? p->batch + 1 : -1;
        break;
    case FP_SLOT_SEQLENS_KV:
        if (p->kv_layout == FLASHPORT_KV_PAGED) u.use = FP_SLOT_REQUIRED, elems = p->batch;
        break;
    case FP_SLOT_BLOCK_TABLE:
        if (p->kv_layout == FLASHPORT_KV_PAGED)
            u.use = FP_SLOT_REQUIRED, elems = product(p->batch, p->max_pages_per_seq, 1);
        break;
    case FP_SLOT_Q_DESCALE:
    case FP_SLOT_K_DESCALE:
    case FP_SLOT_V_DESCALE:
        if (p->descale == FLASHPORT_DESCALE_TENSOR) u.use = FP_SLOT_REQUIRED, elems = 1;
        if (p->descale == FLASHPORT_DESCALE_BLOCK) {
            const int q = slot == FP_SLOT_Q_DESCALE;
            u.use = FP_SLOT_REQUIRED;
            elems = product(p->batch, q ? p->heads_q : p->heads_kv,
                            ceil_div(q ? p->seq_q : p->seq_kv, p->descale_block));
        }
        break;
    default: break;
    }
    int64_t bytes = 0;
    u.overflow = elems < 0 || __builtin_mul_overflow(elems, esize, &bytes);
    u.bytes = u.overflow ? 0 : (uint64_t)bytes;
    return u;
}

const char *fp_slot_name(fp_slot slot) {
    static const char *const names[FP_SLOT_COUNT] = {"q",
                                                     "k",
                                                     "v",
                                                     "o",
                                                     "lse",
                                                     "sinks",
                                                     "alibi_slopes",
                                                     "bias",
                                                     "cu_seqlens_q",
                                                     "cu_seqlens_kv",
                                                     "seqlens_kv",
                                                     "block_table",
                                                     "q_descale",
                                                     "k_descale",
                                                     "v_descale",
                                                     "d_o",
                                                     "d_q",
                                                     "d_k",
                                                     "d_v"};
    return slot < FP_SLOT_COUNT ? names[slot] : "?";
}
