/*
 * tanh(x) = x P(x^2) / Q(x^2) for |x| <= CS_TANH_CLAMP, P and Q of degree 4, fitted for the
 * least maximum relative error (2e-8 in exact arithmetic; within about 5 ulp evaluated in
 * float32 by Horner's scheme). Past the clamp tanh is 1 in float32. A rational function costs
 * about half the FMAs of tanh through the exponential (with its range reduction and the
 * expm1-style care near 0), and the softcap evaluates one per score. Shared by every path.
 */
#ifndef CS_TANH_RATIONAL_H
#define CS_TANH_RATIONAL_H

#define CS_TANH_CLAMP 9.0f

#define CS_TANH_P0 1.0f
#define CS_TANH_P1 1.338101923e-01f
#define CS_TANH_P2 3.495579818e-03f
#define CS_TANH_P3 2.060892621e-05f
#define CS_TANH_P4 1.335441091e-08f

#define CS_TANH_Q0 1.0f
#define CS_TANH_Q1 4.671433568e-01f
#define CS_TANH_Q2 2.587695234e-02f
#define CS_TANH_Q3 3.285620478e-04f
#define CS_TANH_Q4 7.776462780e-07f

#endif /* CS_TANH_RATIONAL_H */
