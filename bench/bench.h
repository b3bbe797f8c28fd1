/*
 * flashport-bench: the pieces shared by its source files. A run is a list of shapes (from a
 * preset or the command line) times a list of kernel requests, timed on one context; each
 * (shape, kernel) pair becomes one bench_record, which the output code prints and writes.
 */
#ifndef FLASHPORT_BENCH_H
#define FLASHPORT_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "flashport.h"

/* Exit codes of the tool. */
enum {
    BENCH_EXIT_OK = 0,
    BENCH_EXIT_RUN_FAILED = 1,
    BENCH_EXIT_USAGE = 2,
    BENCH_EXIT_UNAVAILABLE = 3
};

/* bench_shape.bias: which bias a shape carries. */
enum { BENCH_BIAS_NONE, BENCH_BIAS_KEYS, BENCH_BIAS_QUERIES };

/* A shape of the run. The feature fields are off when zero, so that a shape written with only
 * the first fields is plain attention. */
typedef struct bench_shape {
    int64_t batch, heads_q, heads_kv, seq_q, seq_kv, head_dim;
    flashport_dtype dtype; /* FP8: O is bf16, descales per tensor */
    int causal;
    flashport_layout layout; /* of dense Q/K/V/O, and of the pages of a paged cache */
    int window;              /* 1: window_left and window_right apply (-1: that side unbounded) */
    int64_t window_left, window_right;
    float softcap;      /* > 0: logit softcap */
    int alibi;          /* 1: per-head ALiBi slopes 2^(-8(h+1)/Hq) */
    int bias;           /* an f32 bias (zero strides broadcast): BENCH_BIAS_KEYS [B, 1, 1, Nkv],
                         * a key-padding mask's shape; BENCH_BIAS_QUERIES [B, 1, Nq, Nkv] */
    int sinks;          /* 1: per-head f32 sink logits */
    int64_t page_size;  /* > 0: K and V in a paged cache of pages this size */
    int pages_in_order; /* 1: the paged cache's pages in table order (else shuffled) */
    int varlen;         /* 1: a packed batch; sequence b has Lq drawn from 1..seq_q and
                         * Lkv = Lq + seq_kv - seq_q keys */
    int kv_mixed;       /* 1: sequence b has Lkv drawn from 1..seq_kv (paged or varlen only) */
} bench_shape;

/* A shape made concrete: its descriptor and the host tables the descriptor needs, with the
 * lengths drawn and the pages shuffled from a seed. */
typedef struct bench_problem {
    flashport_attention_desc desc;
    int32_t *len_q, *len_kv;            /* [batch] rows of each sequence */
    int32_t *cu_q, *cu_kv;              /* varlen: [batch + 1] offsets */
    int32_t *seqlens_kv, *block_table;  /* paged: [batch], [batch, max_pages_per_seq] */
    float *alibi;                       /* [heads_q] */
    float *bias;                        /* bias shapes: [batch, seq_kv] or [batch, seq_q, seq_kv] */
    float *sinks;                       /* sinks shapes: [heads_q] */
    float descale[3];                   /* FP8: Q, K, V */
    int64_t tokens_q, tokens_kv;        /* rows of real data: the sums of the lengths */
    int64_t q_elems, kv_elems, o_elems; /* elements of one Q, of one of K and V, of O */
    double flops;                       /* bench_problem_create's count (bench_shape_help) */
    double bytes; /* what the call must move at least: Q, O, and each sequence's visible K/V */
} bench_problem;

/* Everything the command line decides. */
typedef struct bench_options {
    const char *backend; /* NULL: FLASHPORT_BACKEND, then auto */
    const char *kernel;  /* NULL: the planner; "all": every variant of the backend */
    const char *preset;  /* NULL: one shape, from the flags or --shape */
    bench_shape shape;   /* that shape (its dtype and layout override presets' when given) */
    int dtype_given;     /* --dtype was on the command line */
    int layout_given;    /* --layout was */
    int warmup, repeat;
    int queue;          /* calls queued back to back per timed sample */
    double max_seconds; /* > 0: fewer repeats when they would take longer than this */
    int threads;        /* 0: leave FLASHPORT_NUM_THREADS alone */
    int cpu_time;       /* time calls by process CPU time (CPU devices) */
    int check;          /* compare each output with the reference backend */
    int backward;       /* time the backward pass (FLOPs: 2.5x the forward's) */
    int deterministic;  /* with backward: desc.deterministic = 1 */
    double check_flops; /* most FLOPs the reference spends per shape on a check */
    int measure_peaks;
    int input_sets; /* 0: automatic (rotate when the inputs fit in cache) */
    uint64_t seed;
    const char *json_path, *csv_path;
} bench_options;

typedef enum bench_status { BENCH_OK = 0, BENCH_UNSUPPORTED = 1, BENCH_FAILED = 2 } bench_status;

typedef struct bench_record {
    bench_shape shape;
    char kernel_requested[64]; /* "" when the planner chose */
    char kernel[64];           /* the variant that ran, from flashport_plan */
    flashport_precision precision;
    char description[256]; /* the variant's one-line description */
    bench_status status;
    char message[512]; /* plan reason when ok, else why unsupported or failed */
    size_t workspace_bytes;
    size_t input_bytes, output_bytes; /* one set of Q+K+V, and O */
    int input_sets;
    int64_t tokens_q, tokens_kv; /* rows of real data (varlen: the sums of the drawn lengths) */
    double flops;
    int repeats; /* timed calls actually made (--max-seconds may cut --repeat) */
    double ms_min, ms_median, ms_max;
    double tflops;         /* flops / median time */
    char ceiling_name[64]; /* "" when no ceiling applies */
    double ceiling_tflops; /* 0 when unknown */
    double pct_of_ceiling; /* < 0 when unknown */
    double bytes_moved;    /* bench_problem.bytes */
    /* bytes_moved per median time over the measured copy bandwidth; < 0 when unknown */
    double bandwidth_fraction;
    /* the same over the measured read-only bandwidth (the ceiling of a kernel that only
     * reads); < 0 when unknown */
    double read_fraction;
    int checked; /* max_abs_err / rel_l2_err are set */
    double max_abs_err, rel_l2_err;
    char checked_on[96];        /* which part of the output was compared */
    double speedup_vs_previous; /* ladder only; 0 when not applicable */
    long long peak_rss_bytes;   /* process peak so far (getrusage), after this run */
} bench_record;

/* What the run measured once: the device and its ceilings. */
typedef struct bench_env {
    const char *backend;
    flashport_device_info device;
    int have_peaks;
    flashport_peaks peaks;
    double read_gbps;      /* flashport_measure_read_bandwidth; 0 when not measured */
    char read_method[256]; /* how, when measured */
    int cpu_threads;       /* threads the CPU ceiling is multiplied by (CPU devices) */
    size_t cache_bytes;    /* L2 / LLC used to decide input rotation */
    char cache_source[64];
    char date[32]; /* UTC, ISO 8601 */
} bench_env;

/* ---- the device (bench_env.c) ---- */
int bench_env_init(flashport_context *ctx, const bench_options *opt, bench_env *env);
void bench_print_env(FILE *out, const bench_env *env);

/* ---- shapes (bench_shape.c) ---- */
/* "bf16 B=1 Hq=32 Hkv=8 Nq=1 Nkv=4096 d=128[ causal][ bnhd][ window=L,R][ softcap=C][ alibi]
 * [ bias| qbias][ sinks][ page=P][ varlen][ kvmix]" (compare_torch.py prints the same for the
 * shapes it has) */
void bench_shape_text(const bench_shape *s, char *buf, size_t len);
/* Reads bench_shape_text's notation (tokens in any order; sizes left out take the shape flags'
 * defaults). Returns 0 with the reason in why when the text is not a valid shape. */
int bench_shape_parse(const char *text, bench_shape *s, char *why, size_t why_len);
void bench_shape_help(FILE *out);
/* Draws the lengths and the page order from seed and builds the descriptor and tables. Fails
 * only when host memory runs out (why says so). */
int bench_problem_create(const bench_shape *s, uint64_t seed, bench_problem *p, char *why,
                         size_t why_len);
void bench_problem_destroy(bench_problem *p);

/* ---- presets (bench_presets.c) ---- */
/* Fills up to max shapes for the preset; returns how many (the count without writing when
 * shapes is NULL). dtype_default applies where the preset leaves the dtype open. */
int bench_preset_shapes(const char *name, flashport_dtype dtype_default, bench_shape *shapes,
                        int max);
/* Ladder kernels in the write-up's order. */
extern const char *const bench_ladder_kernels[];
extern const int bench_ladder_kernel_count;
void bench_preset_help(FILE *out);

/* ---- inputs (bench_inputs.c) ---- */
/* Device buffers of one shape: `sets` independent random Q/K/V sets (rotated between timed
 * calls so that they do not stay in cache), one O, and set 0 kept on the host for checks. */
typedef struct bench_inputs {
    int sets;
    flashport_buffer **q, **k, **v;
    flashport_buffer *o;
    flashport_buffer *lse, *d_o, *d_q, *d_k, *d_v; /* backward only: the forward's LSE, dO, grads */
    flashport_buffer *cu_q, *cu_kv, *seqlens_kv, *block_table, *alibi, *bias, *sinks, *descale[3];
    void *host_q, *host_k, *host_v; /* set 0, in the shape's dtype */
    size_t q_bytes, k_bytes, v_bytes, o_bytes;
} bench_inputs;

/* Fills n values of dtype with standard-normal numbers from seed (host memory). FP8: random
 * finite bytes of magnitude 0.25 to 7.5, since the tools never quantise. */
void bench_fill_random(void *dst, flashport_dtype dtype, int64_t n, uint64_t seed);
/* Reads element i of an f32, f16 or bf16 array as float (outputs are never FP8). */
float bench_load(const void *src, flashport_dtype dtype, int64_t i);
/* Number of input sets to rotate: 1 when one set already exceeds 4x the cache, else enough sets
 * to cover twice the cache, at most 64 and at most 512 MiB in all. */
int bench_choose_sets(size_t set_bytes, size_t cache_bytes);
/* Allocates and uploads; on failure returns the status with flashport_last_error() set or a
 * message in why, and leaves nothing allocated. */
flashport_status bench_inputs_create(flashport_context *ctx, const bench_problem *p, int sets,
                                     uint64_t seed, bench_inputs *in, char *why, size_t why_len);
void bench_inputs_destroy(bench_inputs *in);
/* The buffers of input set `set` as the arguments of a call (of the backward pass, with its
 * buffers, when bench_inputs_add_backward made them). */
void bench_inputs_args(const bench_inputs *in, int set, flashport_attention_args *args);
/* The backward pass's buffers: a random dO, the gradients, and the LSE, with O and LSE filled by
 * a forward call on input set 0 (the only set: the backward reads that set's O and LSE). */
flashport_status bench_inputs_add_backward(flashport_context *ctx, const bench_problem *p,
                                           uint64_t seed, bench_inputs *in, char *why,
                                           size_t why_len);

/* ---- checks against the reference backend (bench_check.c) ---- */
/* The part of the output that is compared: the batch's first `batch` entries (of a packed
 * batch: its first sequence), query heads [0, heads) (one KV group at most), and query rows
 * row0 .. row0 + rows - 1 of each, the last rows of the sequence (bottom-right alignment keeps
 * their masks and ALiBi distances). Chosen so that the reference does at most budget_flops; the
 * whole output when that is enough. */
typedef struct bench_region {
    int64_t batch, heads, row0, rows;
    int whole;
    char text[96];
} bench_region;

void bench_choose_region(const bench_problem *p, double budget_flops, bench_region *r);
/* Runs the reference context on the region, reading set 0 of in from the host; ref_o receives
 * an O-sized host array (o_bytes) with the region filled. Fills why on failure. */
flashport_status bench_reference_output(flashport_context *ref, const bench_problem *p,
                                        const bench_inputs *in, const bench_region *r, void **ref_o,
                                        char *why, size_t why_len);
/* Max abs and relative L2 error of out against ref over the region (non-finite where the
 * reference is finite counts as an infinite error). */
void bench_compare(const flashport_attention_desc *d, const bench_region *r, const void *out,
                   const void *ref, double *max_abs, double *rel_l2);

/* ---- one measurement (bench_measure.c) ---- */
/* Plans, times and (when ref_o is not NULL) checks one (shape, kernel) pair on ctx, with the
 * shape's inputs already on the device; kernel NULL lets the planner choose. Fills rec and
 * returns its status. */
bench_status bench_measure(flashport_context *ctx, const bench_env *env, const bench_options *opt,
                           const bench_shape *shape, const bench_problem *p, const bench_inputs *in,
                           const char *kernel, const void *ref_o, const bench_region *region,
                           bench_record *rec);

/* ---- output (bench_output.c) ---- */
const char *bench_status_name(bench_status s);
const char *bench_layout_name(flashport_layout l);
void bench_print_header(FILE *out, int ladder);
void bench_print_record(FILE *out, const bench_record *r, int ladder);
int bench_write_json(const char *path, const bench_env *env, const bench_options *opt,
                     const bench_record *recs, int n);
int bench_write_csv(const char *path, const bench_env *env, const bench_record *recs, int n);

#endif /* FLASHPORT_BENCH_H */
