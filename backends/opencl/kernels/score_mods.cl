/*
 * The per-(query, key) part of API v2 (flashport.h), in its order: which keys a query sees
 * (window and causal, bottom-right aligned per sequence), the score from the dot product
 * (scale, then softcap, ALiBi and additive bias, each compiled in only by its build option
 * SOFTCAP, ALIBI, BIAS), and the sink that joins the denominator. Scores leave in the log2
 * domain (times log2(e)).
 */

#define MODS (SOFTCAP || ALIBI || BIAS)

/* Keys [lo, hi) that query i of a sequence with nq queries and nkv keys sees, for a window of
 * wl keys before and wr after the aligned diagonal (-1: unbounded). Bounds are clamped before
 * they meet the row index, so every sum stays within int. */
__attribute__((always_inline)) int2 visible_keys(int i, int nq, int nkv, int wl, int wr) {
    const int diag = i + (nkv - nq);
    const int lo = wl < 0 || wl >= diag ? 0 : diag - wl;
    const int last = wr < 0 || wr > nkv - 1 - diag ? nkv - 1 : diag + wr;
    return (int2)(lo, last < lo ? lo : last + 1);
}

#if MODS
/* What the modifiers of one row need: its ALiBi slope and distance origin, its bias row. */
typedef struct score_row {
    float inv_cap, cap; /* softcap */
    float slope;        /* ALiBi, of this (batch, head) */
    int diag;           /* the row's aligned diagonal: the ALiBi distance is |diag - key| */
    __global const bias_t *bias; /* this row's bias (BIAS) */
    long bias_sk;
} score_row;

/* The log2-domain score of a row against key j from scale * (q . k). Rows past the sequence's
 * queries and keys past its keys are the caller's to keep in bounds (their scores are never
 * used). */
__attribute__((always_inline)) float score_log2(const score_row *m, float s, int j) {
#if SOFTCAP
    s = m->cap * tanh(s * m->inv_cap);
#endif
#if ALIBI
    s = fma(-m->slope, (float)abs(m->diag - j), s);
#endif
#if BIAS
    s += LOAD_BIAS(m->bias, j * m->bias_sk);
#endif
    return s * M_LOG2E_F;
}
#endif

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
