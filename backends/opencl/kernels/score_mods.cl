/*
 * The per-(query, key) part of API v2 (flashport.h), in its order: which keys a query sees
 * (window and causal, bottom-right aligned per sequence), the score from the dot product
 * (scale, then softcap, ALiBi and additive bias), and the sink that joins the denominator.
 * Modified scores leave in the log2 domain (times log2(e)).
 *
 * The modifiers are runtime arguments, not build options: each combination of them would be
 * another program to build (seconds each on a CPU driver), while a problem without any pays one
 * uniform branch per block of keys.
 */

#define ALIBI_PER_BATCH_HEAD 2 /* flashport_alibi: slopes [batch, heads_q] */

/* Keys [lo, hi) that query i of a sequence with nq queries and nkv keys sees, for a window of
 * wl keys before and wr after the aligned diagonal (-1: unbounded). Bounds are clamped before
 * they meet the row index, so every sum stays within int. */
__attribute__((always_inline)) int2 visible_keys(int i, int nq, int nkv, int wl, int wr) {
    const int diag = i + (nkv - nq);
    const int lo = wl < 0 || wl >= diag ? 0 : diag - wl;
    const int last = wr < 0 || wr > nkv - 1 - diag ? nkv - 1 : diag + wr;
    return (int2)(lo, last < lo ? lo : last + 1);
}

/* The modifiers of one (batch, query head). */
typedef struct score_mods {
    float scale;                /* |scale| (Q carries its sign) */
    float cap, inv_cap;         /* softcap, when cap > 0 */
    int alibi;                  /* ALiBi on */
    float slope;                /* its slope for this (batch, head) */
    int bias_dtype;             /* -1: no bias; else flashport_dtype 0..2 */
    __global const uchar *bias; /* the bias tensor */
    long bias_head;             /* element offset of this (batch, head) in it */
    long bias_sq, bias_sk;      /* its query and key strides */
} score_mods;

/* The modifiers of batch b, query head h, from the kernel arguments (feature_args.h). Kernels
 * gather them where they are used, inside the key loop, rather than holding them in registers
 * across it for problems that have none. */
__attribute__((always_inline)) score_mods score_mods_of(float scale_abs, float softcap, int alibi,
                                                        __global const float *slopes,
                                                        int bias_dtype, __global const uchar *bias,
                                                        long bias_sb, long bias_sh, long bias_sq,
                                                        long bias_sk, int b, int h, int heads_q) {
    score_mods m;
    m.scale = scale_abs;
    m.cap = softcap;
    m.inv_cap = softcap > 0.0f ? 1.0f / softcap : 0.0f;
    m.alibi = alibi != 0;
    m.slope = alibi ? slopes[(alibi == ALIBI_PER_BATCH_HEAD ? (long)b * heads_q : 0) + h] : 0.0f;
    m.bias_dtype = bias_dtype;
    m.bias = bias;
    m.bias_head = b * bias_sb + h * bias_sh;
    m.bias_sq = bias_sq;
    m.bias_sk = bias_sk;
    return m;
}

/* Element i of a bias of flashport_dtype dt. */
__attribute__((always_inline)) float load_bias(__global const uchar *p, int dt, long i) {
    if (dt == 1) return vload_half((size_t)i, (__global const half *)p);
    if (dt == 2) return as_float((uint)((__global const ushort *)p)[i] << 16);
    return ((__global const float *)p)[i];
}

/* The log2-domain score of query `row` (aligned diagonal diag) against key j, from q . k.
 * The caller keeps row and j within the sequence (scores outside it are never used). */
__attribute__((always_inline)) float score_log2(const score_mods *m, float dot, int row, int diag,
                                                int j) {
    float s = m->scale * dot;
    if (m->cap > 0.0f) s = m->cap * tanh(s * m->inv_cap);
    if (m->alibi) s = fma(-m->slope, (float)abs(diag - j), s);
    if (m->bias_dtype >= 0)
        s += load_bias(m->bias, m->bias_dtype, m->bias_head + row * m->bias_sq + j * m->bias_sk);
    return s * M_LOG2E_F;
}

/* The derivative of the score with respect to u = scale * q . k, from the dot product as
 * score_log2 takes it: 1, or 1 - tanh^2(u / cap) under a softcap (the backward pass's chain
 * rule; ALiBi and the bias do not depend on q or k). */
__attribute__((always_inline)) float score_slope(const score_mods *m, float dot) {
    if (m->cap <= 0.0f) return 1.0f;
    const float t = tanh(m->scale * dot * m->inv_cap);
    return 1.0f - t * t;
}

/* Folds the sink logit (natural log) into a row's final maximum m (log2 domain, -inf when no
 * key was seen) and sum l. *o_factor receives what the row's output accumulator is multiplied
 * by besides 1/l. A NaN sink makes the row NaN; a row that saw no key keeps O = 0 and gets
 * LSE = sink. */
__attribute__((always_inline)) void add_sink(float sink, float *m, float *l, float *o_factor) {
    const float s2 = sink * M_LOG2E_F;
    const float top = fmax(*m, s2); /* fmax ignores NaN: a NaN sink reaches l below */
    const float base = top == -INFINITY ? 0.0f : top;
    *o_factor = exp2(*m - base);
    *l = fma(*l, *o_factor, exp2(s2 - base));
    *m = base;
}
