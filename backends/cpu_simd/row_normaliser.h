/*
 * How a query row's running max and sum (base 2, as the softmax kernel keeps them) become its
 * output factor and LSE, sinks included: shared by the forward's tile path (attention.c) and
 * the decode path's merge (decode.c).
 */
#ifndef CS_ROW_NORMALISER_H
#define CS_ROW_NORMALISER_H

#include <math.h>

#define CS_LOG2E 1.44269504088896340736
#define CS_LN2   0.69314718055994530942

/* A row's output factor and LSE from its running max m and sum l (base 2, as the softmax keeps
 * them) and its sink (natural log; -inf without one). The normaliser is the sum plus, with a
 * sink, exp(sink), both taken relative to the larger of the max and the sink, in double so
 * that a sink far above every score neither overflows nor loses the sum. A NaN max or sink
 * makes the row NaN; with no mass at all (no visible key, or only -inf scores, and no sink) the
 * factor is 0 (O is 0 times the accumulator) and LSE is -inf. */
static inline void cs_row_normaliser(double m, double l, double sink_ln, float *mul, float *lse) {
    const double sink = CS_LOG2E * sink_ln;
    const double top = sink > m || isnan(sink) ? sink : m;
    const double denom = top == -INFINITY ? 0.0 : l * exp2(m - top) + exp2(sink - top);
    *mul = denom == 0.0 ? 0.0f : (float)(exp2(m - top) / denom);
    *lse = denom == 0.0 ? -INFINITY : (float)((top + log2(denom)) * CS_LN2);
}

#endif /* CS_ROW_NORMALISER_H */
