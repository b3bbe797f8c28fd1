/*
 * The conformance manifest (written by conformance/generate.py) and each case's fixtures.
 */
#ifndef FC_MANIFEST_H
#define FC_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "flashport.h"

typedef struct fc_case {
    char name[64];
    flashport_dtype dtype;
    int64_t batch, heads_q, heads_kv, seq_q, seq_kv, head_dim;
    flashport_layout layout;
    int causal;
    float scale; /* 0: 1/sqrt(head_dim) */
    int64_t pad; /* unused elements after every row of head_dim in every tensor */
    double tol_factor;
} fc_case;

typedef struct fc_manifest {
    fc_case *cases;
    int n_cases;
} fc_manifest;

/* One case's data: inputs as the floats the library sees (already rounded to the dtype) and
 * the float64 expected outputs, all contiguous in the case's layout order. */
typedef struct fc_fixture {
    float *q, *k, *v;
    double *o, *lse;
    size_t n_q, n_kv, n_o, n_lse;
} fc_fixture;

/* Reads dir/manifest.txt. Returns 0 and a message on a missing, unreadable or malformed file. */
int fc_manifest_load(const char *dir, fc_manifest *m, char *msg, size_t msg_len);
void fc_manifest_free(fc_manifest *m);

/* Reads dir/<case>/{q,k,v,o,lse}.npy and checks their types and shapes against the case. */
int fc_fixture_load(const char *dir, const fc_case *c, fc_fixture *f, char *msg, size_t msg_len);
void fc_fixture_free(fc_fixture *f);

#endif /* FC_MANIFEST_H */
