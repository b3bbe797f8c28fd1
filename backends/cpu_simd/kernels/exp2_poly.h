/*
 * Coefficients of 2^f on f in [-1/2, 1/2]: the Taylor series of e^(f ln 2) to degree 7,
 * c_k = (ln 2)^k / k!. The first omitted term is below 6e-9 relative, so after rounding in
 * Horner's scheme the result is within a few ulp of 2^f. Shared by every path so that they
 * agree to the last bits on the exponential.
 */
#ifndef CS_EXP2_POLY_H
#define CS_EXP2_POLY_H

#define CS_EXP2_C1 0.6931471805599453f
#define CS_EXP2_C2 0.2402265069591007f
#define CS_EXP2_C3 0.055504108664821576f
#define CS_EXP2_C4 0.009618129107628477f
#define CS_EXP2_C5 0.0013333558146428441f
#define CS_EXP2_C6 0.00015403530393381606f
#define CS_EXP2_C7 1.5252733804059838e-05f

/* Below this, 2^x is flushed to exactly 0: keeps the result a normal float and makes
 * exp2(-inf) (masked scores) a true zero. */
#define CS_EXP2_MIN (-126.0f)

#endif /* CS_EXP2_POLY_H */
