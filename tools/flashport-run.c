/*
 * flashport-run: attention on .npy files, through the v2 API (flashport_attention_desc and
 * flashport_attention_run_host), with a flag for every feature of the descriptor.
 *
 *   flashport-run --q Q.npy --k K.npy --v V.npy --out O.npy [--lse LSE.npy] [--causal]
 *                 [--window L,R] [--softcap C] [--alibi S.npy] [--bias B.npy] [--sinks S.npy]
 *                 [--cu-seqlens-q CU.npy --cu-seqlens-kv CU.npy]
 *                 [--block-table T.npy --seqlens-kv L.npy]
 *                 [--dtype T] [--out-dtype T] [--q-descale X] [--k-descale X] [--v-descale X]
 *                 [--descale-block N] [--scale S] [--layout bhnd|bnhd] [--backend SPEC]
 *                 [--kernel NAME] [--json]
 *   flashport-run --backward --q Q.npy --k K.npy --v V.npy --do dO.npy --dq dQ.npy --dk dK.npy
 *                 --dv dV.npy [--deterministic] [--out O.npy] [--lse LSE.npy] [the same flags]
 *
 * The help epilogue below is the reference for shapes, dtypes and exit codes.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "flashport.h"
#include "npy.h"
#include "tensor.h"

static const char *const tool = "flashport-run";
static const char *const layout_names[] = {"bhnd", "bnhd", NULL};
/* In flashport_dtype order, so that a choice's index is the enum value. */
static const char *const dtype_names[] = {"f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2", NULL};
static const char *const out_dtype_names[] = {"f32", "f16", "bf16", NULL};

/* A table's content is out of range: the library's FLASHPORT_ERROR_BAD_TABLE. Specific to this
 * tool, so it is not among the shared CLI_EXIT_* codes. */
enum { RUN_EXIT_BAD_TABLE = 5 };

static const char help_epilogue[] =
    "Dense tensors are rank 4 in the layout's order: bhnd = [batch, heads, seq, head_dim],\n"
    "bnhd = [batch, seq, heads, head_dim]. K and V have the same shape; their heads divide Q's\n"
    "heads (grouped-query attention) and their length may differ from Q's (bottom-right\n"
    "alignment: the last query meets the last key).\n"
    "\n"
    "Q, K and V are float32 or float16 files, rounded to --dtype before the call (default: f16\n"
    "when all three are float16, else f32). For --dtype fp8_e4m3 or fp8_e5m2 they are uint8\n"
    "files holding the FP8 bytes themselves (OCP E4M3 \"fn\" or E5M2; NumPy has no FP8 type):\n"
    "the tool never quantises, so the rounding and the descales are the caller's. Each\n"
    "--q/k/v-descale is a number or a .npy file of one element (one factor per tensor, default\n"
    "1); with --descale-block N they are .npy files [batch, heads, ceil(seq / N)] (per block of N\n"
    "positions within each sequence; seq is the longest sequence for varlen and paged inputs).\n"
    "--out-dtype is O's type (default: --dtype, bf16 for FP8 inputs).\n"
    "\n"
    "Masks and score modifiers (flashport.h has the formulas), for query i and key j of a\n"
    "sequence, with a = Nkv - Nq:\n"
    "  --causal        key j visible when j <= i + a\n"
    "  --window L,R    key j visible when i + a - L <= j <= i + a + R; -1 leaves a side\n"
    "                  unbounded (--window 4095,0 is a causal 4096-key window)\n"
    "  --softcap C     s = C * tanh(s / C), C > 0\n"
    "  --alibi F       s -= slope * |i + a - j|; slopes [Hq] or [batch, Hq]\n"
    "  --bias F        s += bias[b, h, i, j]; rank 4 [batch|1, Hq|1, Nq|1, Nkv|1] float32 or\n"
    "                  float16, a dimension of 1 broadcast (zero stride); -inf masks a key\n"
    "  --sinks F       one logit per query head [Hq] that joins each row's softmax denominator\n"
    "ALiBi slopes, sinks and descale files may be float16, float32 or float64; they are\n"
    "rounded to float32, the type the library takes.\n"
    "\n"
    "Variable-length batches: --cu-seqlens-q and --cu-seqlens-kv are int32 [batch + 1] offsets\n"
    "into packed rank-3 tensors Q, O: [total_q, Hq, head_dim] and K, V: [total_kv, Hkv,\n"
    "head_dim]; sequence b is rows cu[b] .. cu[b+1]-1. A paged cache: --block-table int32\n"
    "[batch, max_pages_per_seq] and --seqlens-kv int32 [batch]; K and V are then rank-4 pages\n"
    "[num_pages, page_size, Hkv, head_dim], key j of sequence b is row j % page_size of page\n"
    "block_table[b][j / page_size]. Q is dense with a paged cache, or packed by --cu-seqlens-q.\n"
    "The longest sequences (the descriptor's seq_q and seq_kv, and Nq, Nkv of --bias and\n"
    "--descale-block) are read from the tables. The library checks every table entry; an\n"
    "entry out of range is exit status 5.\n"
    "\n"
    "--backward computes O and LSE itself, then the gradients of sum(dO * O): --do is dO in\n"
    "O's shape (float32 or float16, rounded to O's dtype), --dq, --dk, --dv receive float32\n"
    "dQ, dK, dV in Q's and K's shapes (dK and dV sum over the query heads of a group); no\n"
    "gradient reaches the bias, ALiBi slopes or sinks, and a paged cache or FP8 inputs are\n"
    "declined by name (exit 4). --deterministic asks for the same bits on every run; --out and\n"
    "--lse are optional there.\n"
    "\n"
    "O is written as float32 in Q's shape (packed: [total_q, Hq, head_dim]; rows of no\n"
    "sequence 0); --lse as float32\n"
    "[batch, Hq, Nq], or [Hq, total_q] with --cu-seqlens-q (natural log; -inf for a row that\n"
    "sees no key). --backend takes what FLASHPORT_BACKEND takes (\"cpu_simd\", \"cuda:1\",\n"
    "\"opencl:nvidia,reference\"); without it FLASHPORT_BACKEND, then auto. --json prints what "
    "ran\n"
    "(backend, device, kernel, the descriptor's fields, milliseconds of the synchronous call,\n"
    "copies included) on stdout.\n"
    "\n"
    "exit status:\n"
    "  0  O (and LSE) written; with --backward, dQ, dK and dV (and O, LSE if asked)\n"
    "  2  bad command line: unknown or malformed option, a flag out of range, or flags that\n"
    "     cannot go together (the message says which)\n"
    "  3  an input file is missing, malformed, of the wrong dtype, rank or shape; the inputs and\n"
    "     flags do not form a valid problem (the library's validator says why); or an output\n"
    "     file cannot be written\n"
    "  4  flashport failed: no backend can be used, the problem is unsupported (the message names\n"
    "     the feature no kernel implements), or a device error\n"
    "  5  a table's content is out of range (FLASHPORT_ERROR_BAD_TABLE): cu_seqlens not\n"
    "     non-decreasing or past the packed rows, seqlens_kv beyond the cache, a block_table\n"
    "     entry outside [0, num_pages)\n"
    "Nothing is written unless the exit status is 0.\n";

typedef struct run_options {
    const char *q, *k, *v, *out, *lse, *backend, *kernel;
    const char *d_o, *grad[3]; /* --backward: dO in, dQ, dK, dV out */
    const char *window, *alibi, *bias, *sinks, *cu_q, *cu_kv, *block_table, *seqlens_kv;
    const char *descale[3]; /* q, k, v: a number or a .npy path */
    int causal, json, layout, dtype, out_dtype, backward, deterministic;
    double scale, softcap;
    int64_t descale_block;
} run_options;

/* Everything read from the files, in the form the library takes. */
typedef struct run_inputs {
    npy_array qkv[3], cu_q, cu_kv, seqlens, table, bias;
    void *data[3]; /* Q, K, V in the dtype */
    float *alibi, *sinks, *descale[3];
} run_inputs;

static void free_inputs(run_inputs *in) {
    for (int i = 0; i < 3; i++) {
        npy_free(&in->qkv[i]);
        free(in->data[i]);
        free(in->descale[i]);
    }
    npy_free(&in->cu_q);
    npy_free(&in->cu_kv);
    npy_free(&in->seqlens);
    npy_free(&in->table);
    npy_free(&in->bias);
    free(in->alibi);
    free(in->sinks);
}

/* ---- command line ---- */

/* A descale given as a number: the whole text is a finite float. */
static int parse_number(const char *s, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || fabs(v) > 3.4e38) return 0;
    *out = (float)v;
    return 1;
}

static int is_fp8(flashport_dtype t) { return t == FLASHPORT_FP8_E4M3 || t == FLASHPORT_FP8_E5M2; }

/* Flag combinations the tool cannot turn into a problem. Returns 0 after printing why. */
static int check_flags(const run_options *o, int64_t window[2]) {
    static const char *const dn[3] = {"--q-descale", "--k-descale", "--v-descale"};
    if (!o->q || !o->k || !o->v || (!o->out && !o->backward)) {
        fprintf(stderr, "%s: --q, --k, --v and --out are required (see --help)\n", tool);
        return 0;
    }
    if (o->backward && (!o->d_o || !o->grad[0] || !o->grad[1] || !o->grad[2])) {
        fprintf(stderr, "%s: --backward needs --do, --dq, --dk and --dv\n", tool);
        return 0;
    }
    if (!o->backward && (o->d_o || o->grad[0] || o->grad[1] || o->grad[2] || o->deterministic)) {
        fprintf(stderr, "%s: --do, --dq, --dk, --dv and --deterministic go with --backward\n",
                tool);
        return 0;
    }
    if (o->scale != 0.0 && fabs(o->scale) > 3.4e38) {
        fprintf(stderr, "%s: --scale %g does not fit in a float\n", tool, o->scale);
        return 0;
    }
    if (o->softcap < 0.0 || o->softcap > 3.4e38) {
        fprintf(stderr, "%s: --softcap %g: the cap is a positive float (0 is off)\n", tool,
                o->softcap);
        return 0;
    }
    window[0] = window[1] = -1;
    if (o->window && (!cli_parse_ints(o->window, window, 2) || window[0] < -1 || window[1] < -1)) {
        fprintf(stderr, "%s: --window '%s': expected L,R with each -1 (unbounded) or >= 0\n", tool,
                o->window);
        return 0;
    }
    if ((o->block_table != NULL) != (o->seqlens_kv != NULL)) {
        fprintf(stderr, "%s: a paged cache needs both --block-table and --seqlens-kv\n", tool);
        return 0;
    }
    if (o->cu_kv && o->block_table) {
        fprintf(stderr,
                "%s: K and V are either packed (--cu-seqlens-kv) or paged (--block-table), "
                "not both\n",
                tool);
        return 0;
    }
    if (o->cu_kv && !o->cu_q) {
        fprintf(stderr,
                "%s: --cu-seqlens-kv needs --cu-seqlens-q (packed K and V come with "
                "packed Q)\n",
                tool);
        return 0;
    }
    if (o->cu_q && !o->cu_kv && !o->block_table) {
        fprintf(stderr,
                "%s: --cu-seqlens-q needs --cu-seqlens-kv (packed K and V) or a paged "
                "cache (--block-table)\n",
                tool);
        return 0;
    }
    const int fp8 = o->dtype >= 0 && is_fp8((flashport_dtype)o->dtype);
    for (int i = 0; i < 3; i++)
        if (o->descale[i] && !fp8) {
            fprintf(stderr, "%s: %s is for FP8 inputs (--dtype fp8_e4m3 or fp8_e5m2)\n", tool,
                    dn[i]);
            return 0;
        }
    if (o->descale_block < 0 || (o->descale_block > 0 && !fp8)) {
        fprintf(stderr, "%s: --descale-block is a positive count, for FP8 inputs\n", tool);
        return 0;
    }
    for (int i = 0; o->descale_block > 0 && i < 3; i++) {
        float unused;
        if (!o->descale[i] || parse_number(o->descale[i], &unused)) {
            fprintf(stderr,
                    "%s: --descale-block needs --q-descale, --k-descale and --v-descale "
                    "as .npy files of block factors\n",
                    tool);
            return 0;
        }
    }
    return 1;
}

/* ---- input files ---- */

static int read_npy(const char *flag, const char *path, npy_array *arr) {
    char msg[512];
    if (npy_read(path, -1, arr, msg, sizeof msg) == NPY_OK) return 1;
    fprintf(stderr, "%s: --%s: %s\n", tool, flag, msg);
    return 0;
}

static void shape_text(const npy_array *a, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < a->rank && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, i ? ", %lld" : "%lld", (long long)a->shape[i]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

static int want_rank(const char *flag, const char *path, const npy_array *a, int rank,
                     const char *what) {
    if (a->rank == rank) return 1;
    char s[160];
    shape_text(a, s, sizeof s);
    fprintf(stderr, "%s: --%s: %s is %s; expected rank %d (%s)\n", tool, flag, path, s, rank, what);
    return 0;
}

/* An int32 table of the given rank. */
static int read_table(const char *flag, const char *path, int rank, const char *what,
                      npy_array *a) {
    if (!read_npy(flag, path, a)) return 0;
    if (a->dtype != NPY_I32) {
        fprintf(stderr, "%s: --%s: %s holds %s; tables are int32 (numpy: dtype=np.int32)\n", tool,
                flag, path, npy_dtype_name(a->dtype));
        return 0;
    }
    return want_rank(flag, path, a, rank, what);
}

/* A float file of small f32 parameters (slopes, sinks, descales), converted to float32. */
static int read_params(const char *flag, const char *path, npy_array *a, float **out) {
    if (!read_npy(flag, path, a)) return 0;
    if (a->dtype != NPY_F16 && a->dtype != NPY_F32 && a->dtype != NPY_F64) {
        fprintf(stderr, "%s: --%s: %s holds %s; expected float16, float32 or float64\n", tool, flag,
                path, npy_dtype_name(a->dtype));
        return 0;
    }
    *out = malloc(a->count * sizeof(float) + 1);
    if (!*out) {
        fprintf(stderr, "%s: --%s: out of host memory\n", tool, flag);
        return 0;
    }
    for (size_t i = 0; i < a->count; i++) (*out)[i] = (float)npy_get(a, i);
    return 1;
}

/* Q, K and V: read, dtype chosen, converted (FP8 bytes copied as they are). */
static int read_qkv(const run_options *o, run_inputs *in, flashport_dtype *dtype) {
    const char *paths[3] = {o->q, o->k, o->v}, *flags[3] = {"q", "k", "v"};
    int f16 = 0;
    for (int i = 0; i < 3; i++) {
        npy_array *a = &in->qkv[i];
        if (!read_npy(flags[i], paths[i], a)) return 0;
        if (a->dtype != NPY_F32 && a->dtype != NPY_F16 && a->dtype != NPY_U8) {
            fprintf(stderr,
                    "%s: --%s: %s: %s input; use float32 or float16 (uint8 FP8 bytes with "
                    "--dtype fp8_e4m3|fp8_e5m2)\n",
                    tool, flags[i], paths[i], npy_dtype_name(a->dtype));
            return 0;
        }
        f16 += a->dtype == NPY_F16;
    }
    *dtype = o->dtype >= 0 ? (flashport_dtype)o->dtype : f16 == 3 ? FLASHPORT_F16 : FLASHPORT_F32;
    for (int i = 0; i < 3; i++) {
        const npy_array *a = &in->qkv[i];
        if (is_fp8(*dtype) != (a->dtype == NPY_U8)) {
            fprintf(stderr,
                    is_fp8(*dtype)
                        ? "%s: --%s: %s holds %s; --dtype %s takes uint8 files of FP8 bytes "
                          "(quantised by the caller, who chooses the rounding and the descale)\n"
                        : "%s: --%s: %s holds %s, FP8 bytes: %s is not an FP8 dtype (give --dtype "
                          "fp8_e4m3 or fp8_e5m2)\n",
                    tool, flags[i], paths[i], npy_dtype_name(a->dtype), dtype_names[*dtype]);
            return 0;
        }
        const size_t es = flashport_dtype_size(*dtype);
        in->data[i] = malloc(a->count * es + 1);
        if (!in->data[i]) {
            fprintf(stderr, "%s: out of host memory converting --%s\n", tool, flags[i]);
            return 0;
        }
        if (is_fp8(*dtype))
            memcpy(in->data[i], a->data, a->count);
        else
            for (size_t e = 0; e < a->count; e++)
                tensor_store(*dtype, in->data[i], (int64_t)e, (float)npy_get(a, e));
    }
    return 1;
}

/* Longest sequence of cu_seqlens (negative lengths, which the library reports, count as 0). */
static int64_t longest_cu(const npy_array *cu) {
    const int32_t *c = cu->data;
    int64_t longest = 0;
    for (size_t b = 0; b + 1 < cu->count; b++)
        if ((int64_t)c[b + 1] - c[b] > longest) longest = (int64_t)c[b + 1] - c[b];
    return longest;
}

/* The descriptor of the problem the files and flags describe. */
static int build_desc(const run_options *o, const int64_t window[2], run_inputs *in,
                      flashport_dtype dtype, flashport_attention_desc *d) {
    const flashport_layout layout = (flashport_layout)o->layout;
    const npy_array *q = &in->qkv[0], *k = &in->qkv[1], *v = &in->qkv[2];
    const int q_packed = o->cu_q != NULL, kv_packed = o->cu_kv != NULL,
              paged = o->block_table != NULL;
    if (!want_rank("q", o->q, q, q_packed ? 3 : 4,
                   q_packed ? "packed [total_q, Hq, head_dim]" : "dense, in the layout's order"))
        return 0;
    const char *kv_what = kv_packed ? "packed [total_kv, Hkv, head_dim]"
                          : paged   ? "pages [num_pages, page_size, Hkv, head_dim]"
                                    : "dense, in the layout's order";
    if (!want_rank("k", o->k, k, kv_packed ? 3 : 4, kv_what) ||
        !want_rank("v", o->v, v, kv_packed ? 3 : 4, kv_what))
        return 0;
    if (memcmp(k->shape, v->shape, sizeof k->shape) != 0) {
        fprintf(stderr, "%s: K (%s) and V (%s) must have the same shape\n", tool, o->k, o->v);
        return 0;
    }

    /* Q side: batch, heads, longest sequence, head_dim. */
    int64_t batch, hq, nq, dim, total_q = 0;
    if (q_packed) {
        if (!read_table("cu-seqlens-q", o->cu_q, 1, "[batch + 1]", &in->cu_q)) return 0;
        if (in->cu_q.count < 2) {
            fprintf(stderr, "%s: --cu-seqlens-q: %s has %zu entries; a batch of B needs B + 1\n",
                    tool, o->cu_q, in->cu_q.count);
            return 0;
        }
        batch = (int64_t)in->cu_q.count - 1;
        total_q = q->shape[0];
        hq = q->shape[1];
        dim = q->shape[2];
        nq = longest_cu(&in->cu_q);
    } else {
        tensor_shape s = tensor_shape_from_dims(layout, q->shape);
        batch = s.batch;
        hq = s.heads;
        nq = s.seq;
        dim = s.dim;
    }

    /* K/V side, and the batch each table implies. */
    int64_t hkv, nkv, kv_dim, kv_batch, total_kv = 0, num_pages = 0, page_size = 0, max_pages = 0;
    const char *kv_batch_from;
    if (kv_packed) {
        if (!read_table("cu-seqlens-kv", o->cu_kv, 1, "[batch + 1]", &in->cu_kv)) return 0;
        kv_batch = (int64_t)in->cu_kv.count - 1;
        kv_batch_from = "--cu-seqlens-kv";
        total_kv = k->shape[0];
        hkv = k->shape[1];
        kv_dim = k->shape[2];
        nkv = longest_cu(&in->cu_kv);
    } else if (paged) {
        if (!read_table("block-table", o->block_table, 2, "[batch, max_pages_per_seq]",
                        &in->table) ||
            !read_table("seqlens-kv", o->seqlens_kv, 1, "[batch]", &in->seqlens))
            return 0;
        if (in->table.shape[0] != in->seqlens.shape[0]) {
            fprintf(stderr,
                    "%s: --block-table has %lld rows and --seqlens-kv %lld entries; both "
                    "are one per sequence\n",
                    tool, (long long)in->table.shape[0], (long long)in->seqlens.shape[0]);
            return 0;
        }
        kv_batch = in->seqlens.shape[0];
        kv_batch_from = "--seqlens-kv";
        num_pages = k->shape[0];
        page_size = k->shape[1];
        hkv = k->shape[2];
        kv_dim = k->shape[3];
        max_pages = in->table.shape[1];
        /* The longest sequence, within what the table can address: a longer entry is left for
         * the library to report as a bad table. */
        const int32_t *lens = in->seqlens.data;
        nkv = 0;
        for (size_t b = 0; b < in->seqlens.count; b++)
            if (lens[b] > nkv) nkv = lens[b];
        if (nkv > page_size * max_pages) nkv = page_size * max_pages;
    } else {
        tensor_shape s = tensor_shape_from_dims(layout, k->shape);
        kv_batch = s.batch;
        kv_batch_from = "K";
        hkv = s.heads;
        nkv = s.seq;
        kv_dim = s.dim;
    }
    if (kv_batch != batch || kv_dim != dim) {
        fprintf(stderr,
                "%s: Q and K disagree: batch %lld (%s) vs %lld (%s), head_dim %lld vs "
                "%lld\n",
                tool, (long long)batch, q_packed ? "--cu-seqlens-q" : "Q", (long long)kv_batch,
                kv_batch_from, (long long)dim, (long long)kv_dim);
        return 0;
    }

    flashport_attention_desc_init(d, dtype, batch, hq, hkv, nq, nkv, dim, layout);
    if (q_packed) {
        d->q_varlen = 1;
        d->total_q = total_q;
        d->q = d->o = (flashport_strides){0, dim, hq * dim};
    }
    if (kv_packed) {
        d->kv_layout = FLASHPORT_KV_VARLEN;
        d->total_kv = total_kv;
        d->k = d->v = (flashport_strides){0, dim, hkv * dim};
    }
    if (paged) {
        flashport_attention_desc_set_paged(d, num_pages, page_size, max_pages,
                                           FLASHPORT_LAYOUT_BNHD);
        d->seq_kv = nkv;
    }
    if (o->out_dtype >= 0) d->out_dtype = (flashport_dtype)o->out_dtype;
    d->scale = (float)o->scale;
    d->causal = o->causal;
    d->window_left = window[0];
    d->window_right = window[1];
    d->softcap = (float)o->softcap;
    d->kernel = o->kernel;
    return 1;
}

/* ALiBi slopes, bias, sinks and descales, checked against the descriptor's sizes. */
static int read_modifiers(const run_options *o, run_inputs *in, flashport_attention_desc *d) {
    npy_array a;
    memset(&a, 0, sizeof a);
    char s[160];
    if (o->alibi) {
        if (!read_params("alibi", o->alibi, &a, &in->alibi)) goto fail;
        const int per_batch = a.rank == 2;
        if (!((a.rank == 1 && a.shape[0] == d->heads_q) ||
              (per_batch && a.shape[0] == d->batch && a.shape[1] == d->heads_q))) {
            shape_text(&a, s, sizeof s);
            fprintf(stderr,
                    "%s: --alibi: %s is %s; expected [Hq] = [%lld] or [batch, Hq] = "
                    "[%lld, %lld]\n",
                    tool, o->alibi, s, (long long)d->heads_q, (long long)d->batch,
                    (long long)d->heads_q);
            goto fail;
        }
        d->alibi = per_batch ? FLASHPORT_ALIBI_PER_BATCH_HEAD : FLASHPORT_ALIBI_PER_HEAD;
        npy_free(&a);
    }
    if (o->sinks) {
        if (!read_params("sinks", o->sinks, &a, &in->sinks)) goto fail;
        if (a.rank != 1 || a.shape[0] != d->heads_q) {
            shape_text(&a, s, sizeof s);
            fprintf(stderr, "%s: --sinks: %s is %s; expected [Hq] = [%lld]\n", tool, o->sinks, s,
                    (long long)d->heads_q);
            goto fail;
        }
        d->sinks = 1;
        npy_free(&a);
    }
    if (o->bias) {
        npy_array *b = &in->bias;
        if (!read_npy("bias", o->bias, b)) goto fail;
        if (b->dtype != NPY_F32 && b->dtype != NPY_F16) {
            fprintf(stderr, "%s: --bias: %s holds %s; expected float32 or float16\n", tool, o->bias,
                    npy_dtype_name(b->dtype));
            goto fail;
        }
        const int64_t full[4] = {d->batch, d->heads_q, d->seq_q, d->seq_kv};
        int fits = b->rank == 4;
        for (int i = 0; fits && i < 4; i++) fits = b->shape[i] == full[i] || b->shape[i] == 1;
        if (!fits) {
            shape_text(b, s, sizeof s);
            fprintf(stderr,
                    "%s: --bias: %s is %s; expected [batch|1, Hq|1, Nq|1, Nkv|1] = "
                    "[%lld|1, %lld|1, %lld|1, %lld|1]\n",
                    tool, o->bias, s, (long long)full[0], (long long)full[1], (long long)full[2],
                    (long long)full[3]);
            goto fail;
        }
        /* The file's contiguous strides, with a broadcast dimension read at stride 0. */
        int64_t st[4], step = 1;
        for (int i = 3; i >= 0; i--) {
            st[i] = b->shape[i] == 1 ? 0 : step;
            step *= b->shape[i];
        }
        d->bias = (flashport_bias_desc){
            1, b->dtype == NPY_F16 ? FLASHPORT_F16 : FLASHPORT_F32, st[0], st[1], st[2], st[3]};
    }
    if (!is_fp8(d->dtype)) return 1;

    static const char *const flags[3] = {"q-descale", "k-descale", "v-descale"};
    d->descale = o->descale_block > 0 ? FLASHPORT_DESCALE_BLOCK : FLASHPORT_DESCALE_TENSOR;
    d->descale_block = o->descale_block;
    for (int i = 0; i < 3; i++) {
        float one = 1.0f;
        if (!o->descale[i] || parse_number(o->descale[i], &one)) {
            in->descale[i] = malloc(sizeof(float));
            if (!in->descale[i]) goto fail;
            in->descale[i][0] = one;
            continue;
        }
        if (!read_params(flags[i], o->descale[i], &a, &in->descale[i])) goto fail;
        int ok;
        if (o->descale_block > 0) {
            const int64_t heads = i ? d->heads_kv : d->heads_q, seq = i ? d->seq_kv : d->seq_q;
            const int64_t blocks = (seq + o->descale_block - 1) / o->descale_block;
            ok = a.rank == 3 && a.shape[0] == d->batch && a.shape[1] == heads &&
                 a.shape[2] == blocks;
            if (!ok) {
                shape_text(&a, s, sizeof s);
                fprintf(stderr,
                        "%s: --%s: %s is %s; expected [batch, heads, ceil(seq / %lld)] = "
                        "[%lld, %lld, %lld]\n",
                        tool, flags[i], o->descale[i], s, (long long)o->descale_block,
                        (long long)d->batch, (long long)heads, (long long)blocks);
            }
        } else {
            ok = a.count == 1 && a.rank <= 1;
            if (!ok) {
                shape_text(&a, s, sizeof s);
                fprintf(stderr,
                        "%s: --%s: %s is %s; expected one factor (or --descale-block N "
                        "for block factors)\n",
                        tool, flags[i], o->descale[i], s);
            }
        }
        if (!ok) goto fail;
        npy_free(&a);
    }
    return 1;
fail:
    npy_free(&a);
    return 0;
}

/* ---- report ---- */

static const char *kv_layout_name(flashport_kv_layout l) {
    return l == FLASHPORT_KV_VARLEN ? "varlen" : l == FLASHPORT_KV_PAGED ? "paged" : "dense";
}

static void json_int(cli_json *j, const char *key, int64_t v) {
    cli_json_key(j, key);
    cli_json_int(j, v);
}

static void json_str(cli_json *j, const char *key, const char *v) {
    cli_json_key(j, key);
    if (v)
        cli_json_string(j, v);
    else
        cli_json_null(j);
}

static void print_json(const run_options *o, flashport_context *ctx,
                       const flashport_attention_desc *d, const flashport_plan_info *plan,
                       double ms, double backward_ms) {
    static const char *const alibi[] = {"none", "per_head", "per_batch_head"};
    static const char *const descale[] = {"none", "tensor", "block"};
    flashport_device_info dev;
    memset(&dev, 0, sizeof dev);
    flashport_context_device_info(ctx, &dev);
    cli_json j;
    cli_json_init(&j, stdout);
    cli_json_begin_object(&j);
    json_str(&j, "backend", flashport_context_backend(ctx));
    json_int(&j, "device_index", flashport_context_device(ctx));
    json_str(&j, "device", dev.name);
    json_str(&j, "kernel", plan->kernel);
    json_str(&j, "plan_reason", plan->reason);
    json_str(&j, "dtype", dtype_names[d->dtype]);
    json_str(&j, "out_dtype", dtype_names[d->out_dtype]);
    json_str(&j, "layout", layout_names[o->layout]);
    json_int(&j, "batch", d->batch);
    json_int(&j, "heads_q", d->heads_q);
    json_int(&j, "heads_kv", d->heads_kv);
    json_int(&j, "seq_q", d->seq_q);
    json_int(&j, "seq_kv", d->seq_kv);
    json_int(&j, "head_dim", d->head_dim);
    cli_json_key(&j, "causal");
    cli_json_bool(&j, d->causal);
    json_int(&j, "window_left", d->window_left);
    json_int(&j, "window_right", d->window_right);
    cli_json_key(&j, "softcap");
    cli_json_double(&j, d->softcap);
    json_str(&j, "alibi", alibi[d->alibi]);
    cli_json_key(&j, "bias"); /* null, or the dtype and element strides (0: broadcast) */
    if (d->bias.enabled) {
        cli_json_begin_object(&j);
        json_str(&j, "dtype", dtype_names[d->bias.dtype]);
        json_int(&j, "batch_stride", d->bias.batch);
        json_int(&j, "head_stride", d->bias.head);
        json_int(&j, "query_stride", d->bias.query);
        json_int(&j, "key_stride", d->bias.key);
        cli_json_end_object(&j);
    } else {
        cli_json_null(&j);
    }
    cli_json_key(&j, "sinks");
    cli_json_bool(&j, d->sinks);
    cli_json_key(&j, "q_varlen");
    cli_json_bool(&j, d->q_varlen);
    json_int(&j, "total_q", d->total_q);
    json_str(&j, "kv_layout", kv_layout_name(d->kv_layout));
    json_int(&j, "total_kv", d->total_kv);
    json_int(&j, "num_pages", d->num_pages);
    json_int(&j, "page_size", d->page_size);
    json_int(&j, "max_pages_per_seq", d->max_pages_per_seq);
    json_str(&j, "descale", descale[d->descale]);
    json_int(&j, "descale_block", d->descale_block);
    cli_json_key(&j, "scale"); /* as resolved by the library when 0 was given */
    cli_json_double(&j, d->scale != 0.0f ? d->scale : 1.0f / sqrtf((float)d->head_dim));
    cli_json_key(&j, "ms");
    cli_json_double(&j, ms);
    json_str(&j, "out", o->out);
    json_str(&j, "lse", o->lse);
    cli_json_key(&j, "backward"); /* null, or the gradients' files and the call's time */
    if (o->backward) {
        cli_json_begin_object(&j);
        cli_json_key(&j, "deterministic");
        cli_json_bool(&j, d->deterministic);
        cli_json_key(&j, "ms");
        cli_json_double(&j, backward_ms);
        json_str(&j, "do", o->d_o);
        json_str(&j, "dq", o->grad[0]);
        json_str(&j, "dk", o->grad[1]);
        json_str(&j, "dv", o->grad[2]);
        cli_json_end_object(&j);
    } else {
        cli_json_null(&j);
    }
    cli_json_end_object(&j);
}

/* ---- main ---- */

/* The library's message names the call that failed. */
static int library_error(flashport_status st) {
    fprintf(stderr, "%s: %s: %s\n", tool, flashport_status_string(st), flashport_last_error());
    return st == FLASHPORT_ERROR_BAD_TABLE ? RUN_EXIT_BAD_TABLE : CLI_EXIT_LIBRARY;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Files written so far, removed again when a later one fails: nothing is left behind. */
typedef struct written {
    const char *path[6];
    int n;
} written;

static int write_f32(written *w, const char *flag, const char *path, flashport_dtype dtype,
                     const void *data, int rank, const int64_t *dims) {
    size_t count = 1;
    for (int i = 0; i < rank; i++) count *= (size_t)dims[i];
    float *f = malloc(count * sizeof(float) + 1);
    char msg[512] = "out of host memory";
    int ok = f != NULL;
    for (size_t i = 0; ok && i < count; i++) f[i] = tensor_load(dtype, data, (int64_t)i);
    ok = ok && npy_write(path, NPY_F32, rank, dims, f, msg, sizeof msg) == NPY_OK;
    free(f);
    if (ok) {
        w->path[w->n++] = path;
        return 1;
    }
    fprintf(stderr, "%s: --%s: %s\n", tool, flag, msg);
    for (int i = 0; i < w->n; i++) remove(w->path[i]);
    return 0;
}

/* The backward pass from the forward's O and LSE in args: reads dO, runs, writes dQ, dK, dV.
 * Returns the exit status. */
static int run_backward(const run_options *o, flashport_context *ctx, flashport_attention_desc *d,
                        flashport_attention_host_args args, const run_inputs *in, double *ms,
                        written *w) {
    npy_array d_o;
    memset(&d_o, 0, sizeof d_o);
    void *grads[4] = {0}; /* dO in out_dtype, then dQ, dK, dV */
    int rc = CLI_EXIT_INPUT;
    const npy_array *shapes[3] = {&in->qkv[0], &in->qkv[1], &in->qkv[2]};
    const size_t es = flashport_dtype_size(d->out_dtype);
    if (!read_npy("do", o->d_o, &d_o)) goto done;
    if ((d_o.dtype != NPY_F32 && d_o.dtype != NPY_F16) || d_o.rank != shapes[0]->rank ||
        memcmp(d_o.shape, shapes[0]->shape, sizeof(int64_t) * (size_t)d_o.rank) != 0) {
        fprintf(stderr, "%s: --do: %s must be float32 or float16 in Q's (and O's) shape\n", tool,
                o->d_o);
        goto done;
    }
    for (int i = 0; i < 4; i++) {
        /* Zeroed: packed rows of no sequence are not written by the library, and come out 0. */
        grads[i] = calloc((i ? shapes[i - 1]->count : d_o.count) * es + 1, 1);
        if (!grads[i]) {
            fprintf(stderr, "%s: out of host memory for the gradients\n", tool);
            goto done;
        }
    }
    for (size_t e = 0; e < d_o.count; e++)
        tensor_store(d->out_dtype, grads[0], (int64_t)e, (float)npy_get(&d_o, e));
    args.d_o = grads[0], args.d_q = grads[1], args.d_k = grads[2], args.d_v = grads[3];
    d->deterministic = o->deterministic;
    const double t0 = now_ms();
    const flashport_status st = flashport_attention_backward_host(ctx, d, &args);
    *ms = now_ms() - t0;
    if (st != FLASHPORT_OK) {
        rc = library_error(st);
        goto done;
    }
    static const char *const flags[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++)
        if (!write_f32(w, flags[i], o->grad[i], d->out_dtype, grads[i + 1], shapes[i]->rank,
                       shapes[i]->shape))
            goto done;
    rc = CLI_EXIT_OK;
done:
    npy_free(&d_o);
    for (int i = 0; i < 4; i++) free(grads[i]);
    return rc;
}

int main(int argc, char **argv) {
    run_options o;
    memset(&o, 0, sizeof o);
    o.dtype = o.out_dtype = -1;
    const cli_option opts[] = {
        {"q", CLI_STRING, &o.q, "FILE", "queries: rank 4, or packed rank 3 with --cu-seqlens-q",
         NULL},
        {"k", CLI_STRING, &o.k, "FILE", "keys: rank 4 (dense or pages), or packed rank 3", NULL},
        {"v", CLI_STRING, &o.v, "FILE", "values, same shape as K", NULL},
        {"out", CLI_STRING, &o.out, "FILE", "output O, float32 .npy in Q's shape", NULL},
        {"lse", CLI_STRING, &o.lse, "FILE", "also write log-sum-exp, float32", NULL},
        {"causal", CLI_FLAG, &o.causal, NULL, "causal mask, bottom-right aligned when Nq != Nkv",
         NULL},
        {"window", CLI_STRING, &o.window, "L,R",
         "sliding window: L keys before the diagonal, R after (-1: unbounded)", NULL},
        {"softcap", CLI_DOUBLE, &o.softcap, "C", "logit softcap C * tanh(s / C) (Gemma 2: 50)",
         NULL},
        {"alibi", CLI_STRING, &o.alibi, "FILE", "ALiBi slopes [Hq] or [batch, Hq]", NULL},
        {"bias", CLI_STRING, &o.bias, "FILE", "additive bias [batch|1, Hq|1, Nq|1, Nkv|1]", NULL},
        {"sinks", CLI_STRING, &o.sinks, "FILE", "attention-sink logits [Hq]", NULL},
        {"cu-seqlens-q", CLI_STRING, &o.cu_q, "FILE", "int32 [batch + 1] offsets of packed Q",
         NULL},
        {"cu-seqlens-kv", CLI_STRING, &o.cu_kv, "FILE", "int32 [batch + 1] offsets of packed K, V",
         NULL},
        {"block-table", CLI_STRING, &o.block_table, "FILE",
         "int32 [batch, max_pages_per_seq] pages of each sequence", NULL},
        {"seqlens-kv", CLI_STRING, &o.seqlens_kv, "FILE",
         "int32 [batch] keys of each paged sequence", NULL},
        {"dtype", CLI_CHOICE, &o.dtype, "T", "Q, K, V dtype, default: the inputs' type",
         dtype_names},
        {"out-dtype", CLI_CHOICE, &o.out_dtype, "T", "O's dtype (FP8 inputs; default bf16)",
         out_dtype_names},
        {"q-descale", CLI_STRING, &o.descale[0], "X", "FP8: Q's descale, a number or .npy", NULL},
        {"k-descale", CLI_STRING, &o.descale[1], "X", "FP8: K's descale", NULL},
        {"v-descale", CLI_STRING, &o.descale[2], "X", "FP8: V's descale", NULL},
        {"descale-block", CLI_INT, &o.descale_block, "N", "FP8: descales per block of N positions",
         NULL},
        {"scale", CLI_DOUBLE, &o.scale, "S", "score scale (default 1/sqrt(head_dim))", NULL},
        {"layout", CLI_CHOICE, &o.layout, "L", "layout of rank-4 dense tensors, default bhnd",
         layout_names},
        {"backend", CLI_STRING, &o.backend, "SPEC", "backend list, as FLASHPORT_BACKEND", NULL},
        {"kernel", CLI_STRING, &o.kernel, "NAME", "force a kernel variant", NULL},
        {"json", CLI_FLAG, &o.json, NULL, "print what ran as JSON on stdout", NULL},
        {"backward", CLI_FLAG, &o.backward, NULL,
         "also the backward pass: gradients of sum(dO * O) into --dq, --dk, --dv", NULL},
        {"do", CLI_STRING, &o.d_o, "FILE", "--backward: dO in Q's shape", NULL},
        {"dq", CLI_STRING, &o.grad[0], "FILE", "--backward: output dQ, float32, Q's shape", NULL},
        {"dk", CLI_STRING, &o.grad[1], "FILE", "--backward: output dK, float32, K's shape", NULL},
        {"dv", CLI_STRING, &o.grad[2], "FILE", "--backward: output dV, float32, V's shape", NULL},
        {"deterministic", CLI_FLAG, &o.deterministic, NULL,
         "--backward: the same bits on every run", NULL},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_result r = cli_parse(tool, argc, argv, opts, n_opts);
    if (r == CLI_HELP) {
        cli_print_help(stdout, tool, "--q Q.npy --k K.npy --v V.npy --out O.npy [options]",
                       "Computes O = softmax(scale * Q K^T [masks, modifiers]) V with flashport.",
                       opts, n_opts, help_epilogue);
        return CLI_EXIT_OK;
    }
    int64_t window[2];
    if (r == CLI_ERROR || !check_flags(&o, window)) return CLI_EXIT_USAGE;

    run_inputs in;
    memset(&in, 0, sizeof in);
    flashport_attention_desc d;
    flashport_dtype dtype;
    flashport_context *ctx = NULL;
    void *o_host = NULL;
    float *lse_host = NULL;
    int rc = CLI_EXIT_INPUT;
    if (!read_qkv(&o, &in, &dtype) || !build_desc(&o, window, &in, dtype, &d) ||
        !read_modifiers(&o, &in, &d))
        goto done;
    flashport_status st = flashport_attention_desc_validate(&d);
    if (st != FLASHPORT_OK) {
        fprintf(stderr, "%s: the inputs do not form a valid problem: %s\n", tool,
                flashport_last_error());
        goto done;
    }

    const size_t rows = (size_t)(d.heads_q * (d.q_varlen ? d.total_q : d.batch * d.seq_q));
    /* Zeroed: packed rows of no sequence are not written by the library, and come out 0. */
    o_host = calloc(rows * (size_t)d.head_dim * flashport_dtype_size(d.out_dtype) + 1, 1);
    lse_host = o.lse || o.backward ? calloc(rows + 1, sizeof(float)) : NULL;
    if (!o_host || ((o.lse || o.backward) && !lse_host)) {
        fprintf(stderr, "%s: out of host memory for the outputs\n", tool);
        goto done;
    }

    rc = CLI_EXIT_LIBRARY;
    st = flashport_context_create(o.backend, &ctx);
    if (st != FLASHPORT_OK) {
        library_error(st);
        goto done;
    }
    flashport_attention_host_args args = FLASHPORT_ATTENTION_HOST_ARGS_INIT;
    args.q = in.data[0];
    args.k = in.data[1];
    args.v = in.data[2];
    args.o = o_host;
    args.lse = lse_host;
    args.alibi_slopes = in.alibi;
    args.sinks = in.sinks;
    args.bias = in.bias.data;
    args.cu_seqlens_q = in.cu_q.data;
    args.cu_seqlens_kv = in.cu_kv.data;
    args.seqlens_kv = in.seqlens.data;
    args.block_table = in.table.data;
    args.q_descale = in.descale[0];
    args.k_descale = in.descale[1];
    args.v_descale = in.descale[2];
    const double t0 = now_ms();
    st = flashport_attention_run_host(ctx, &d, &args);
    const double ms = now_ms() - t0;
    if (st != FLASHPORT_OK) {
        rc = library_error(st);
        goto done;
    }
    /* Asked after the run so that the run's own message reports any error, tables included. */
    flashport_plan_info plan;
    memset(&plan, 0, sizeof plan);
    if (o.json && (st = flashport_attention_plan(ctx, &d, &plan)) != FLASHPORT_OK) {
        rc = library_error(st);
        goto done;
    }

    written w = {{0}, 0};
    double backward_ms = 0.0;
    if (o.backward && (rc = run_backward(&o, ctx, &d, args, &in, &backward_ms, &w)) != CLI_EXIT_OK)
        goto done;

    /* O is written as float32 whatever its dtype. */
    rc = CLI_EXIT_INPUT;
    int64_t o_dims[4], lse_dims[3];
    const int o_rank = d.q_varlen ? 3 : 4, lse_rank = d.q_varlen ? 2 : 3;
    if (d.q_varlen) {
        o_dims[0] = d.total_q;
        o_dims[1] = d.heads_q;
        o_dims[2] = d.head_dim;
        lse_dims[0] = d.heads_q;
        lse_dims[1] = d.total_q;
    } else {
        tensor_layout_dims((flashport_layout)o.layout,
                           (tensor_shape){d.batch, d.heads_q, d.seq_q, d.head_dim}, o_dims);
        lse_dims[0] = d.batch;
        lse_dims[1] = d.heads_q;
        lse_dims[2] = d.seq_q;
    }
    if (o.out && !write_f32(&w, "out", o.out, d.out_dtype, o_host, o_rank, o_dims)) goto done;
    if (o.lse && !write_f32(&w, "lse", o.lse, FLASHPORT_F32, lse_host, lse_rank, lse_dims))
        goto done;
    if (o.json) print_json(&o, ctx, &d, &plan, ms, backward_ms);
    rc = CLI_EXIT_OK;

done:
    flashport_context_destroy(ctx);
    free(o_host);
    free(lse_host);
    free_inputs(&in);
    return rc;
}
