/*
 * The conformance manifest (written by conformance/generate.py) and each case's fixtures.
 */
#ifndef FC_MANIFEST_H
#define FC_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "flashport.h"
#include "tensor.h"

typedef struct fc_case {
    char name[64];
    flashport_dtype dtype;     /* of Q, K and V */
    flashport_dtype out_dtype; /* of O */
    int64_t batch, heads_q, heads_kv;
    int64_t seq_q, seq_kv; /* the longest sequences of a packed or paged case */
    int64_t head_dim;
    flashport_layout layout; /* also of packed tensors ([H,total,d] / [total,H,d]) and pages */
    int causal;
    int64_t window_left, window_right; /* -1: unbounded */
    float scale;                       /* 0: 1/sqrt(head_dim) */
    float softcap;                     /* 0: off */
    flashport_alibi alibi;
    int bias; /* 1: bias.npy, of bias_dtype, broadcast where bias_dims has '.' */
    flashport_dtype bias_dtype;
    char bias_dims[5]; /* "bhqk" with '.' for each broadcast dimension */
    int sinks;
    int q_varlen;
    int64_t total_q;
    flashport_kv_layout kv_layout;
    int64_t total_kv;
    int64_t num_pages, page_size, max_pages;
    flashport_descale descale;
    int64_t descale_block;
    int64_t pad; /* unused elements after every row of head_dim in Q, K, V and O */
    double tol_factor;
    int backward; /* 1: the backward pass, from dO and the expected O and LSE, on dQ, dK, dV */
} fc_case;

typedef struct fc_manifest {
    fc_case *cases;
    int n_cases;
} fc_manifest;

/* The arrays of one call, in the order of the buffers of flashport_attention_args. */
typedef enum fc_slot {
    FC_Q,
    FC_K,
    FC_V,
    FC_O,
    FC_LSE,
    FC_SINKS,
    FC_ALIBI,
    FC_BIAS,
    FC_CU_SEQLENS_Q,
    FC_CU_SEQLENS_KV,
    FC_SEQLENS_KV,
    FC_BLOCK_TABLE,
    FC_Q_DESCALE,
    FC_K_DESCALE,
    FC_V_DESCALE,
    FC_DO, /* backward cases: dO (an input, in out_dtype as inputs are stored) */
    FC_DQ, /* backward cases: the float64 expected gradients */
    FC_DK,
    FC_DV,
    FC_SLOTS
} fc_slot;

/* One case's data, each array contiguous in its file's order. Inputs are in the encoding the
 * library reads (Q, K, V in the dtype: f32, f16 or bf16 bits, FP8 bytes; dO in out_dtype; the
 * bias in its dtype; f32 slopes, sinks and descales; int32 tables); O, LSE and the gradients
 * hold the float64 expected values (O and LSE are the backward's inputs too). Slots the case
 * does not use are NULL with count 0. */
typedef struct fc_fixture {
    void *data[FC_SLOTS];
    size_t count[FC_SLOTS];
} fc_fixture;

/* The file of a slot ("block_table.npy"). */
const char *fc_slot_file(fc_slot s);

/* A stored tensor ("q", "k", "v" or "o") as (outer, heads, rows, head_dim): per batch
 * (dense), one packed row set (varlen; outer 1), or per page (paged K/V). */
tensor_shape fc_storage(const fc_case *c, char tensor);

/* Number of elements in the shape the case gives slot s (0 when the case does not use it). */
size_t fc_slot_count(const fc_case *c, fc_slot s);

/* Reads dir/manifest.txt. Returns 0 and a message on a missing, unreadable or malformed file. */
int fc_manifest_load(const char *dir, fc_manifest *m, char *msg, size_t msg_len);
void fc_manifest_free(fc_manifest *m);

/* Reads every .npy file case c uses from dir/<case>/, checking its type and shape against the
 * case (a missing file is an error naming it). */
int fc_fixture_load(const char *dir, const fc_case *c, fc_fixture *f, char *msg, size_t msg_len);
void fc_fixture_free(fc_fixture *f);

#endif /* FC_MANIFEST_H */
