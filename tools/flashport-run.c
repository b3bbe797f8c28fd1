/*
 * flashport-run: attention on .npy files.
 *
 *   flashport-run --q Q.npy --k K.npy --v V.npy --out O.npy [--lse LSE.npy] [--causal]
 *                 [--scale S] [--layout bhnd|bnhd] [--dtype f32|f16|bf16]
 *                 [--backend SPEC] [--kernel NAME] [--json]
 *
 * Inputs are rank-4 float32 or float16 arrays in the layout's order; K and V may have fewer
 * heads than Q (grouped-query attention) and another sequence length. O is written as float32
 * in Q's shape, the optional LSE as float32 [B, Hq, Nq].
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "flashport.h"
#include "npy.h"
#include "tensor.h"

static const char *const layout_names[] = {"bhnd", "bnhd", NULL};
static const char *const dtype_names[] = {"f32", "f16", "bf16", NULL};

typedef struct run_options {
    const char *q, *k, *v, *out, *lse, *backend, *kernel;
    int causal, json, layout, dtype;
    double scale;
} run_options;

static const char help_epilogue[] =
    "Shapes follow the layout: bhnd = [batch, heads, seq, head_dim], bnhd = [batch, seq, heads,\n"
    "head_dim]. K and V must have the same shape; their heads must divide Q's heads. Without\n"
    "--dtype the inputs' own type is used (float16 files: f16, float32 files: f32); values are\n"
    "rounded to the chosen dtype before the call. --backend takes what FLASHPORT_BACKEND takes\n"
    "(\"cpu_simd\", \"cuda:1\", \"opencl:nvidia,reference\"); without it FLASHPORT_BACKEND, then auto.\n"
    "--json prints what ran (backend, device, kernel, shape, milliseconds) on stdout.\n"
    "\n"
    "exit status:\n"
    "  0  O (and LSE) written\n"
    "  2  bad command line\n"
    "  3  an input file is missing, malformed, of the wrong rank or shape; or an output file\n"
    "     cannot be written\n"
    "  4  flashport failed: no backend can be used, the problem is unsupported, or a device error\n";

/* One rank-4 input, converted to the dtype at contiguous strides. */
typedef struct host_tensor {
    tensor_shape shape;
    void *data;
    size_t bytes;
} host_tensor;

static int load_input(const char *tool, const char *flag, const char *path, int *file_is_f16,
                      npy_array *arr) {
    char msg[512];
    npy_status st = npy_read(path, 4, arr, msg, sizeof msg);
    if (st != NPY_OK) {
        fprintf(stderr, "%s: --%s: %s\n", tool, flag, msg);
        return 0;
    }
    if (arr->dtype != NPY_F32 && arr->dtype != NPY_F16) {
        fprintf(stderr, "%s: --%s: %s: %s input; use float32 or float16\n", tool, flag, path,
                npy_dtype_name(arr->dtype));
        npy_free(arr);
        return 0;
    }
    *file_is_f16 = arr->dtype == NPY_F16;
    return 1;
}

static int convert(const npy_array *arr, flashport_layout layout, flashport_dtype dtype,
                   host_tensor *out) {
    out->shape = tensor_shape_from_dims(layout, arr->shape);
    out->bytes = arr->count * flashport_dtype_size(dtype);
    out->data = malloc(out->bytes ? out->bytes : 1);
    if (!out->data) return 0;
    /* The file is already in the layout's contiguous order, which is also the buffer's. */
    for (size_t i = 0; i < arr->count; i++)
        tensor_store(dtype, out->data, (int64_t)i, (float)npy_get(arr, i));
    return 1;
}

static void print_json(const run_options *o, flashport_context *ctx, const flashport_problem *p,
                       const flashport_plan_info *plan, double ms) {
    flashport_device_info dev;
    memset(&dev, 0, sizeof dev);
    flashport_context_device_info(ctx, &dev);
    cli_json j;
    cli_json_init(&j, stdout);
    cli_json_begin_object(&j);
    cli_json_key(&j, "backend");
    cli_json_string(&j, flashport_context_backend(ctx));
    cli_json_key(&j, "device_index");
    cli_json_int(&j, flashport_context_device(ctx));
    cli_json_key(&j, "device");
    cli_json_string(&j, dev.name);
    cli_json_key(&j, "kernel");
    cli_json_string(&j, plan->kernel);
    cli_json_key(&j, "plan_reason");
    cli_json_string(&j, plan->reason);
    cli_json_key(&j, "dtype");
    cli_json_string(&j, flashport_dtype_name(p->dtype));
    cli_json_key(&j, "layout");
    cli_json_string(&j, layout_names[o->layout]);
    cli_json_key(&j, "batch");
    cli_json_int(&j, p->batch);
    cli_json_key(&j, "heads_q");
    cli_json_int(&j, p->heads_q);
    cli_json_key(&j, "heads_kv");
    cli_json_int(&j, p->heads_kv);
    cli_json_key(&j, "seq_q");
    cli_json_int(&j, p->seq_q);
    cli_json_key(&j, "seq_kv");
    cli_json_int(&j, p->seq_kv);
    cli_json_key(&j, "head_dim");
    cli_json_int(&j, p->head_dim);
    cli_json_key(&j, "causal");
    cli_json_bool(&j, p->causal);
    cli_json_key(&j, "scale"); /* as resolved by the library when 0 was given */
    cli_json_double(&j, p->scale != 0.0f ? p->scale : 1.0f / sqrtf((float)p->head_dim));
    cli_json_key(&j, "ms");
    cli_json_double(&j, ms);
    cli_json_key(&j, "out");
    cli_json_string(&j, o->out);
    cli_json_key(&j, "lse");
    if (o->lse) cli_json_string(&j, o->lse);
    else cli_json_null(&j);
    cli_json_end_object(&j);
}

/* Runs the problem on device buffers and downloads O and LSE into host memory. */
static int run_attention(const char *tool, flashport_context *ctx, const flashport_problem *p,
                         host_tensor *t, void *o_host, size_t o_bytes, float *lse_host,
                         size_t lse_bytes, double *ms) {
    flashport_buffer *buf[5] = {NULL, NULL, NULL, NULL, NULL};
    size_t sizes[5] = {t[0].bytes, t[1].bytes, t[2].bytes, o_bytes, lse_bytes};
    flashport_status st = FLASHPORT_OK;
    const char *call = "";
    for (int i = 0; i < 5 && st == FLASHPORT_OK; i++) {
        if (i == 4 && !lse_host) break;
        call = "flashport_buffer_alloc";
        st = flashport_buffer_alloc(ctx, sizes[i] ? sizes[i] : 1, &buf[i]);
        if (st == FLASHPORT_OK && i < 3) {
            call = "flashport_buffer_upload";
            st = flashport_buffer_upload(buf[i], 0, t[i].data, sizes[i]);
        }
    }
    flashport_timer *timer = NULL;
    if (st == FLASHPORT_OK) {
        call = "flashport_timer_start";
        st = flashport_timer_start(ctx, &timer);
    }
    if (st == FLASHPORT_OK) {
        call = "flashport_attention";
        st = flashport_attention(ctx, p, buf[0], buf[1], buf[2], buf[3], buf[4]);
        /* The timer is stopped (and freed) even when the call failed. */
        flashport_status ts = flashport_timer_stop(timer, ms);
        if (st == FLASHPORT_OK && ts != FLASHPORT_OK) {
            st = ts;
            call = "flashport_timer_stop";
        }
    }
    if (st == FLASHPORT_OK) {
        call = "flashport_buffer_download";
        st = flashport_buffer_download(buf[3], 0, o_host, o_bytes);
        if (st == FLASHPORT_OK && lse_host) st = flashport_buffer_download(buf[4], 0, lse_host, lse_bytes);
    }
    if (st != FLASHPORT_OK)
        fprintf(stderr, "%s: %s: %s: %s\n", tool, call, flashport_status_string(st),
                flashport_last_error());
    for (int i = 0; i < 5; i++) flashport_buffer_free(buf[i]);
    return st == FLASHPORT_OK;
}

int main(int argc, char **argv) {
    const char *tool = "flashport-run";
    run_options o;
    memset(&o, 0, sizeof o);
    o.dtype = -1;
    const cli_option opts[] = {
        {"q", CLI_STRING, &o.q, "FILE", "queries, rank-4 .npy (float32 or float16)", NULL},
        {"k", CLI_STRING, &o.k, "FILE", "keys, rank-4 .npy", NULL},
        {"v", CLI_STRING, &o.v, "FILE", "values, rank-4 .npy, same shape as K", NULL},
        {"out", CLI_STRING, &o.out, "FILE", "output O, float32 .npy in Q's shape", NULL},
        {"lse", CLI_STRING, &o.lse, "FILE", "also write log-sum-exp, float32 [B, Hq, Nq]", NULL},
        {"causal", CLI_FLAG, &o.causal, NULL, "causal mask, bottom-right aligned when Nq != Nkv", NULL},
        {"scale", CLI_DOUBLE, &o.scale, "S", "score scale (default 1/sqrt(head_dim))", NULL},
        {"layout", CLI_CHOICE, &o.layout, "L", "tensor layout, default bhnd", layout_names},
        {"dtype", CLI_CHOICE, &o.dtype, "T", "compute dtype, default: the inputs' type", dtype_names},
        {"backend", CLI_STRING, &o.backend, "SPEC", "backend list, as FLASHPORT_BACKEND", NULL},
        {"kernel", CLI_STRING, &o.kernel, "NAME", "force a kernel variant", NULL},
        {"json", CLI_FLAG, &o.json, NULL, "print what ran as JSON on stdout", NULL},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_result r = cli_parse(tool, argc, argv, opts, n_opts);
    if (r == CLI_HELP) {
        cli_print_help(stdout, tool, "--q Q.npy --k K.npy --v V.npy --out O.npy [options]",
                       "Computes O = softmax(scale * Q K^T [causal]) V with flashport.", opts, n_opts,
                       help_epilogue);
        return CLI_EXIT_OK;
    }
    if (r == CLI_ERROR) return CLI_EXIT_USAGE;
    if (!o.q || !o.k || !o.v || !o.out) {
        fprintf(stderr, "%s: --q, --k, --v and --out are required (see --help)\n", tool);
        return CLI_EXIT_USAGE;
    }
    if (o.scale != 0.0 && (o.scale > 3.4e38 || o.scale < -3.4e38)) {
        fprintf(stderr, "%s: --scale %g does not fit in a float\n", tool, o.scale);
        return CLI_EXIT_USAGE;
    }

    flashport_layout layout = (flashport_layout)o.layout;
    npy_array arr[3];
    memset(arr, 0, sizeof arr);
    host_tensor t[3];
    memset(t, 0, sizeof t);
    const char *paths[3] = {o.q, o.k, o.v}, *flags[3] = {"q", "k", "v"};
    int f16_files[3] = {0, 0, 0};
    int rc = CLI_EXIT_INPUT;
    void *o_host = NULL;
    float *lse_host = NULL;
    flashport_context *ctx = NULL;

    for (int i = 0; i < 3; i++)
        if (!load_input(tool, flags[i], paths[i], &f16_files[i], &arr[i])) goto done;
    flashport_dtype dtype = o.dtype >= 0 ? (flashport_dtype)o.dtype
                            : f16_files[0] && f16_files[1] && f16_files[2] ? FLASHPORT_F16
                                                                          : FLASHPORT_F32;
    for (int i = 0; i < 3; i++)
        if (!convert(&arr[i], layout, dtype, &t[i])) {
            fprintf(stderr, "%s: out of host memory converting --%s\n", tool, flags[i]);
            goto done;
        }
    const tensor_shape qs = t[0].shape, ks = t[1].shape, vs = t[2].shape;
    if (memcmp(&ks, &vs, sizeof ks) != 0) {
        fprintf(stderr, "%s: K (%s) and V (%s) must have the same shape\n", tool, o.k, o.v);
        goto done;
    }
    if (qs.batch != ks.batch || qs.dim != ks.dim) {
        fprintf(stderr,
                "%s: Q and K disagree: batch %lld vs %lld, head_dim %lld vs %lld (layout %s)\n",
                tool, (long long)qs.batch, (long long)ks.batch, (long long)qs.dim,
                (long long)ks.dim, layout_names[o.layout]);
        goto done;
    }

    flashport_problem p;
    flashport_problem_init(&p, dtype, qs.batch, qs.heads, ks.heads, qs.seq, ks.seq, qs.dim, layout);
    p.causal = o.causal;
    p.scale = (float)o.scale;
    p.kernel = o.kernel;
    if (flashport_problem_validate(&p) != FLASHPORT_OK) {
        fprintf(stderr, "%s: the inputs do not form a valid problem: %s\n", tool,
                flashport_last_error());
        goto done;
    }

    rc = CLI_EXIT_LIBRARY;
    flashport_status st = flashport_context_create(o.backend, &ctx);
    if (st != FLASHPORT_OK) {
        fprintf(stderr, "%s: %s: %s\n", tool, flashport_status_string(st), flashport_last_error());
        goto done;
    }
    flashport_plan_info plan;
    st = flashport_plan(ctx, &p, &plan);
    if (st != FLASHPORT_OK) {
        fprintf(stderr, "%s: %s: %s\n", tool, flashport_status_string(st), flashport_last_error());
        goto done;
    }

    size_t o_count = (size_t)(qs.batch * qs.heads * qs.seq * qs.dim);
    size_t o_bytes = o_count * flashport_dtype_size(dtype);
    size_t lse_count = (size_t)(qs.batch * qs.heads * qs.seq);
    o_host = malloc(o_bytes ? o_bytes : 1);
    lse_host = o.lse ? malloc(lse_count * sizeof(float) + 1) : NULL;
    if (!o_host || (o.lse && !lse_host)) {
        fprintf(stderr, "%s: out of host memory for the outputs\n", tool);
        goto done;
    }
    double ms = 0.0;
    if (!run_attention(tool, ctx, &p, t, o_host, o_bytes, lse_host, lse_count * sizeof(float), &ms))
        goto done;

    /* O is written as float32 whatever the compute dtype. */
    float *o32 = malloc(o_count * sizeof(float) + 1);
    if (!o32) {
        fprintf(stderr, "%s: out of host memory for the outputs\n", tool);
        goto done;
    }
    for (size_t i = 0; i < o_count; i++) o32[i] = tensor_load(dtype, o_host, (int64_t)i);
    rc = CLI_EXIT_INPUT;
    char msg[512];
    int64_t dims[4];
    tensor_layout_dims(layout, qs, dims);
    npy_status ws = npy_write(o.out, NPY_F32, 4, dims, o32, msg, sizeof msg);
    free(o32);
    if (ws != NPY_OK) {
        fprintf(stderr, "%s: --out: %s\n", tool, msg);
        goto done;
    }
    if (o.lse) {
        int64_t lse_dims[3] = {qs.batch, qs.heads, qs.seq};
        if (npy_write(o.lse, NPY_F32, 3, lse_dims, lse_host, msg, sizeof msg) != NPY_OK) {
            fprintf(stderr, "%s: --lse: %s\n", tool, msg);
            goto done;
        }
    }
    if (o.json) print_json(&o, ctx, &p, &plan, ms);
    rc = CLI_EXIT_OK;

done:
    flashport_context_destroy(ctx);
    free(o_host);
    free(lse_host);
    for (int i = 0; i < 3; i++) {
        npy_free(&arr[i]);
        free(t[i].data);
    }
    return rc;
}
