#define _POSIX_C_SOURCE 200809L
#include "manifest.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

#define MANIFEST_MAGIC "flashport-conformance-manifest 3"

static int fail(char *msg, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
    return 0;
}

static int parse_int(const char *v, int64_t min, int64_t *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < min) return 0;
    *out = x;
    return 1;
}

static int parse_double(const char *v, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x)) return 0;
    *out = x;
    return 1;
}

/* Index of v in a NULL-terminated list of names, or -1. */
static int parse_name(const char *v, const char *const *names) {
    for (int i = 0; names[i]; i++)
        if (strcmp(v, names[i]) == 0) return i;
    return -1;
}

/* Names in the order of the enums they stand for. */
static const char *const dtype_names[] = {"f32", "f16", "bf16", "e4m3", "e5m2", NULL};
static const char *const float_dtype_names[] = {"f32", "f16", "bf16", NULL};
static const char *const layout_names[] = {"bhnd", "bnhd", NULL};
static const char *const alibi_names[] = {"none", "head", "batch_head", NULL};
static const char *const kv_layout_names[] = {"dense", "varlen", "paged", NULL};
static const char *const descale_names[] = {"none", "tensor", "block", NULL};

/* bias=none, or bias=<f32|f16|bf16>:<dims>, dims being "bhqk" with '.' where broadcast. */
static int parse_bias(const char *v, fc_case *c) {
    if (strcmp(v, "none") == 0) return 1;
    const char *colon = strchr(v, ':');
    char dtype[8];
    if (!colon || (size_t)(colon - v) >= sizeof dtype) return 0;
    memcpy(dtype, v, (size_t)(colon - v));
    dtype[colon - v] = '\0';
    int t = parse_name(dtype, float_dtype_names);
    const char *dims = colon + 1;
    if (t < 0 || strlen(dims) != 4) return 0;
    for (int i = 0; i < 4; i++)
        if (dims[i] != "bhqk"[i] && dims[i] != '.') return 0;
    c->bias = 1;
    c->bias_dtype = (flashport_dtype)t;
    memcpy(c->bias_dims, dims, 5);
    return 1;
}

typedef enum field_kind {
    F_NAME,
    F_INT,
    F_FLAG,
    F_FLOAT,
    F_TOL,
    F_BIAS,
    F_ENUM /* an enum member stored as int, by a list of names */
} field_kind;

typedef struct field {
    const char *key;
    field_kind kind;
    size_t offset;
    int64_t min;              /* F_INT */
    const char *const *names; /* F_ENUM */
} field;

#define AT(member) offsetof(fc_case, member)
static const field fields[] = {
    {"name", F_NAME, AT(name), 0, NULL},
    {"dtype", F_ENUM, AT(dtype), 0, dtype_names},
    {"out_dtype", F_ENUM, AT(out_dtype), 0, float_dtype_names},
    {"batch", F_INT, AT(batch), 1, NULL},
    {"heads_q", F_INT, AT(heads_q), 1, NULL},
    {"heads_kv", F_INT, AT(heads_kv), 1, NULL},
    {"seq_q", F_INT, AT(seq_q), 0, NULL},
    {"seq_kv", F_INT, AT(seq_kv), 0, NULL},
    {"head_dim", F_INT, AT(head_dim), 1, NULL},
    {"layout", F_ENUM, AT(layout), 0, layout_names},
    {"causal", F_FLAG, AT(causal), 0, NULL},
    {"window_left", F_INT, AT(window_left), -1, NULL},
    {"window_right", F_INT, AT(window_right), -1, NULL},
    {"scale", F_FLOAT, AT(scale), 0, NULL},
    {"softcap", F_FLOAT, AT(softcap), 0, NULL},
    {"alibi", F_ENUM, AT(alibi), 0, alibi_names},
    {"bias", F_BIAS, 0, 0, NULL},
    {"sinks", F_FLAG, AT(sinks), 0, NULL},
    {"q_varlen", F_FLAG, AT(q_varlen), 0, NULL},
    {"total_q", F_INT, AT(total_q), 0, NULL},
    {"kv_layout", F_ENUM, AT(kv_layout), 0, kv_layout_names},
    {"total_kv", F_INT, AT(total_kv), 0, NULL},
    {"num_pages", F_INT, AT(num_pages), 0, NULL},
    {"page_size", F_INT, AT(page_size), 0, NULL},
    {"max_pages", F_INT, AT(max_pages), 0, NULL},
    {"descale", F_ENUM, AT(descale), 0, descale_names},
    {"descale_block", F_INT, AT(descale_block), 0, NULL},
    {"pad", F_INT, AT(pad), 0, NULL},
    {"tol_factor", F_TOL, AT(tol_factor), 0, NULL},
    {"backward", F_FLAG, AT(backward), 0, NULL},
};
#undef AT
#define N_FIELDS (sizeof fields / sizeof fields[0])

/* Sets one key=value field of c; returns the field's index, or -1 when the key is unknown or
 * the value invalid. */
static int set_field(fc_case *c, const char *key, const char *v) {
    for (size_t k = 0; k < N_FIELDS; k++) {
        const field *f = &fields[k];
        if (strcmp(key, f->key) != 0) continue;
        void *at = (char *)c + f->offset;
        double d;
        int64_t i;
        int ok = 0;
        switch (f->kind) {
        case F_NAME:
            ok = *v && strlen(v) < sizeof c->name && !strchr(v, '/');
            if (ok) strcpy(c->name, v);
            break;
        case F_INT: ok = parse_int(v, f->min, (int64_t *)at); break;
        case F_FLAG:
            ok = parse_int(v, 0, &i) && i <= 1;
            if (ok) *(int *)at = (int)i;
            break;
        case F_FLOAT:
            ok = parse_double(v, &d);
            if (ok) *(float *)at = (float)d;
            break;
        case F_TOL:
            ok = parse_double(v, &d) && d >= 1.0;
            if (ok) *(double *)at = d;
            break;
        case F_BIAS: ok = parse_bias(v, c); break;
        case F_ENUM:
            i = parse_name(v, f->names);
            ok = i >= 0;
            if (ok) *(int *)at = (int)i;
            break;
        }
        return ok ? (int)k : -1;
    }
    return -1;
}

static int parse_case(char *line, fc_case *c, const char *path, int lineno, char *msg, size_t len) {
    memset(c, 0, sizeof *c);
    unsigned char seen[N_FIELDS] = {0};
    for (char *tok = strtok(line, " \t\r\n"); tok; tok = strtok(NULL, " \t\r\n")) {
        char *eq = strchr(tok, '=');
        if (!eq) return fail(msg, len, "%s:%d: field '%s' is not key=value", path, lineno, tok);
        *eq = '\0';
        int k = set_field(c, tok, eq + 1);
        if (k < 0)
            return fail(msg, len, "%s:%d: unknown key or invalid value: %s=%s", path, lineno, tok,
                        eq + 1);
        if (seen[k]) return fail(msg, len, "%s:%d: key '%s' repeated", path, lineno, tok);
        seen[k] = 1;
    }
    for (size_t k = 0; k < N_FIELDS; k++)
        if (!seen[k])
            return fail(msg, len, "%s:%d: case line misses field '%s'", path, lineno,
                        fields[k].key);
    if (c->heads_q % c->heads_kv)
        return fail(msg, len, "%s:%d: heads_q is not a multiple of heads_kv", path, lineno);
    if (c->descale == FLASHPORT_DESCALE_BLOCK && c->descale_block < 1)
        return fail(msg, len, "%s:%d: descale=block needs descale_block >= 1", path, lineno);
    if (c->kv_layout == FLASHPORT_KV_PAGED && c->page_size < 1)
        return fail(msg, len, "%s:%d: kv_layout=paged needs page_size >= 1", path, lineno);
    if (c->backward && (c->kv_layout == FLASHPORT_KV_PAGED || c->descale != FLASHPORT_DESCALE_NONE))
        return fail(msg, len, "%s:%d: backward=1 has no paged cache and no FP8 inputs", path,
                    lineno);
    return 1;
}

int fc_manifest_load(const char *dir, fc_manifest *m, char *msg, size_t msg_len) {
    memset(m, 0, sizeof *m);
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return fail(msg, msg_len,
                    "%s: cannot open: %s (generate the fixtures first: the "
                    "conformance-data build target)",
                    path, strerror(errno));
    char line[2048];
    int lineno = 0, have_magic = 0, cap = 0, ok = 1;
    while (ok && fgets(line, sizeof line, f)) {
        lineno++;
        size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n') {
            ok = fail(msg, msg_len, "%s:%d: line too long", path, lineno);
            break;
        }
        char *p = line + strspn(line, " \t");
        if (*p == '#' || *p == '\n' || *p == '\r' || *p == '\0') continue;
        if (!have_magic) {
            if (strncmp(p, MANIFEST_MAGIC, strlen(MANIFEST_MAGIC)) != 0 ||
                strspn(p + strlen(MANIFEST_MAGIC), " \t\r\n") !=
                    strlen(p + strlen(MANIFEST_MAGIC))) {
                ok = fail(msg, msg_len, "%s:%d: expected '%s'", path, lineno, MANIFEST_MAGIC);
                break;
            }
            have_magic = 1;
            continue;
        }
        if (strncmp(p, "case ", 5) != 0) {
            ok = fail(msg, msg_len, "%s:%d: expected a 'case' line", path, lineno);
            break;
        }
        if (m->n_cases == cap) {
            cap = cap ? 2 * cap : 64;
            fc_case *grown = realloc(m->cases, (size_t)cap * sizeof *grown);
            if (!grown) {
                ok = fail(msg, msg_len, "out of memory reading %s", path);
                break;
            }
            m->cases = grown;
        }
        ok = parse_case(p + 5, &m->cases[m->n_cases], path, lineno, msg, msg_len);
        if (ok) {
            for (int i = 0; i < m->n_cases && ok; i++)
                if (strcmp(m->cases[i].name, m->cases[m->n_cases].name) == 0)
                    ok = fail(msg, msg_len, "%s:%d: case '%s' listed twice", path, lineno,
                              m->cases[i].name);
            m->n_cases++;
        }
    }
    if (ok && ferror(f)) ok = fail(msg, msg_len, "%s: read error", path);
    if (ok && !have_magic) ok = fail(msg, msg_len, "%s: empty or not a manifest", path);
    if (ok && m->n_cases == 0) ok = fail(msg, msg_len, "%s: lists no case", path);
    fclose(f);
    if (!ok) fc_manifest_free(m);
    return ok;
}

void fc_manifest_free(fc_manifest *m) {
    free(m->cases);
    memset(m, 0, sizeof *m);
}

/* ---- fixtures ---- */

const char *fc_slot_file(fc_slot s) {
    static const char *const files[FC_SLOTS] = {"q.npy",
                                                "k.npy",
                                                "v.npy",
                                                "o.npy",
                                                "lse.npy",
                                                "sinks.npy",
                                                "alibi_slopes.npy",
                                                "bias.npy",
                                                "cu_seqlens_q.npy",
                                                "cu_seqlens_kv.npy",
                                                "seqlens_kv.npy",
                                                "block_table.npy",
                                                "q_descale.npy",
                                                "k_descale.npy",
                                                "v_descale.npy",
                                                "do.npy",
                                                "dq.npy",
                                                "dk.npy",
                                                "dv.npy"};
    return s < FC_SLOTS ? files[s] : "?";
}

tensor_shape fc_storage(const fc_case *c, char tensor) {
    if (tensor == 'q' || tensor == 'o')
        return c->q_varlen ? (tensor_shape){1, c->heads_q, c->total_q, c->head_dim}
                           : (tensor_shape){c->batch, c->heads_q, c->seq_q, c->head_dim};
    if (c->kv_layout == FLASHPORT_KV_VARLEN)
        return (tensor_shape){1, c->heads_kv, c->total_kv, c->head_dim};
    if (c->kv_layout == FLASHPORT_KV_PAGED)
        return (tensor_shape){c->num_pages, c->heads_kv, c->page_size, c->head_dim};
    return (tensor_shape){c->batch, c->heads_kv, c->seq_kv, c->head_dim};
}

/* What a slot's file holds and what it becomes in memory. */
typedef enum element {
    EL_INPUT, /* in `dtype`: a float32 file for f32 and bf16, float16 for f16, uint8 for FP8 */
    EL_F32,
    EL_I32,
    EL_F64
} element;

typedef struct array_spec {
    int used;
    element el;
    flashport_dtype dtype; /* EL_INPUT */
    int rank;
    int64_t dims[4];
} array_spec;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static array_spec spec_of(const fc_case *c, fc_slot s) {
    array_spec a = {1, EL_F32, FLASHPORT_F32, 1, {0, 0, 0, 0}};
    switch (s) {
    case FC_Q:
    case FC_K:
    case FC_V:
    case FC_O:
        a.el = s == FC_O ? EL_F64 : EL_INPUT;
        a.dtype = c->dtype;
        a.rank = 4;
        tensor_layout_dims(c->layout, fc_storage(c, "qkvo"[s]), a.dims);
        break;
    case FC_LSE:
        if (c->q_varlen)
            a = (array_spec){1, EL_F64, FLASHPORT_F32, 2, {c->heads_q, c->total_q}};
        else
            a = (array_spec){1, EL_F64, FLASHPORT_F32, 3, {c->batch, c->heads_q, c->seq_q}};
        break;
    case FC_SINKS:
        a.used = c->sinks;
        a.dims[0] = c->heads_q;
        break;
    case FC_ALIBI:
        a.used = c->alibi != FLASHPORT_ALIBI_NONE;
        if (c->alibi == FLASHPORT_ALIBI_PER_BATCH_HEAD) a.rank = 2, a.dims[0] = c->batch;
        a.dims[a.rank - 1] = c->heads_q;
        break;
    case FC_BIAS: {
        const int64_t full[4] = {c->batch, c->heads_q, c->seq_q, c->seq_kv};
        a = (array_spec){c->bias, EL_INPUT, c->bias_dtype, 4, {0, 0, 0, 0}};
        for (int i = 0; i < 4; i++) a.dims[i] = c->bias_dims[i] == '.' ? 1 : full[i];
        break;
    }
    case FC_CU_SEQLENS_Q:
    case FC_CU_SEQLENS_KV:
        a.used = s == FC_CU_SEQLENS_Q ? c->q_varlen : c->kv_layout == FLASHPORT_KV_VARLEN;
        a.el = EL_I32;
        a.dims[0] = c->batch + 1;
        break;
    case FC_SEQLENS_KV:
    case FC_BLOCK_TABLE:
        a.used = c->kv_layout == FLASHPORT_KV_PAGED;
        a.el = EL_I32;
        a.dims[0] = c->batch;
        if (s == FC_BLOCK_TABLE) a.rank = 2, a.dims[1] = c->max_pages;
        break;
    case FC_Q_DESCALE:
    case FC_K_DESCALE:
    case FC_V_DESCALE:
        a.used = c->descale != FLASHPORT_DESCALE_NONE;
        a.dims[0] = 1;
        if (c->descale == FLASHPORT_DESCALE_BLOCK) {
            const int q = s == FC_Q_DESCALE;
            a.rank = 3;
            a.dims[0] = c->batch;
            a.dims[1] = q ? c->heads_q : c->heads_kv;
            a.dims[2] = ceil_div(q ? c->seq_q : c->seq_kv, c->descale_block);
        }
        break;
    case FC_DO:
    case FC_DQ:
    case FC_DK:
    case FC_DV:
        a.used = c->backward;
        a.el = s == FC_DO ? EL_INPUT : EL_F64;
        a.dtype = c->out_dtype;
        a.rank = 4;
        tensor_layout_dims(c->layout, fc_storage(c, s == FC_DO ? 'o' : "qkv"[s - FC_DQ]), a.dims);
        break;
    default: a.used = 0; break;
    }
    return a;
}

size_t fc_slot_count(const fc_case *c, fc_slot s) {
    const array_spec a = spec_of(c, s);
    if (!a.used) return 0;
    size_t n = 1;
    for (int i = 0; i < a.rank; i++) n *= (size_t)a.dims[i];
    return n;
}

static npy_dtype file_type(const array_spec *a) {
    switch (a->el) {
    case EL_INPUT:
        if (a->dtype == FLASHPORT_F16) return NPY_F16;
        if (a->dtype == FLASHPORT_FP8_E4M3 || a->dtype == FLASHPORT_FP8_E5M2) return NPY_U8;
        return NPY_F32; /* f32, and bf16 held exactly in float32 */
    case EL_F32: return NPY_F32;
    case EL_I32: return NPY_I32;
    case EL_F64: return NPY_F64;
    }
    return NPY_F64;
}

/* Loads one slot's .npy, checks its type and shape, and keeps its data in the encoding the
 * library reads: as stored, except bf16, whose float32 values become bf16 bits (each must
 * already be a bfloat16, so that nothing is rounded twice). */
static int load_slot(const char *dir, const fc_case *c, fc_slot s, fc_fixture *f, char *msg,
                     size_t msg_len) {
    const array_spec spec = spec_of(c, s);
    if (!spec.used) return 1;
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/%s/%s", dir, c->name, fc_slot_file(s));
    npy_array a;
    if (npy_read(path, spec.rank, &a, err, sizeof err) != NPY_OK)
        return fail(msg, msg_len, "%s", err);
    const npy_dtype want = file_type(&spec);
    int ok = 1;
    if (a.dtype != want)
        ok = fail(msg, msg_len, "%s: holds %s, the case needs %s", path, npy_dtype_name(a.dtype),
                  npy_dtype_name(want));
    for (int i = 0; ok && i < spec.rank; i++)
        if (a.shape[i] != spec.dims[i])
            ok = fail(msg, msg_len, "%s: dimension %d is %lld, the manifest says %lld", path, i,
                      (long long)a.shape[i], (long long)spec.dims[i]);
    if (ok && spec.el == EL_INPUT && spec.dtype == FLASHPORT_BF16) {
        uint16_t *bits = malloc(a.count * sizeof *bits + 1);
        if (!bits) ok = fail(msg, msg_len, "%s: out of memory", path);
        for (size_t i = 0; ok && i < a.count; i++) {
            const float x = ((const float *)a.data)[i];
            if (tensor_round(FLASHPORT_BF16, x) != x && !isnan(x))
                ok = fail(msg, msg_len, "%s: bf16 value %g is not a bfloat16 value", path,
                          (double)x);
            tensor_store(FLASHPORT_BF16, bits, (int64_t)i, x);
        }
        free(a.data);
        a.data = bits;
    }
    if (ok) {
        f->data[s] = a.data;
        f->count[s] = a.count;
        a.data = NULL;
    }
    npy_free(&a);
    return ok;
}

/* Every .npy file in the case's folder must be one the case uses: an array the manifest line
 * does not ask for (sinks.npy beside sinks=0) means a feature the run would leave out while
 * its expected output includes it. */
static int no_stray_files(const char *dir, const fc_case *c, char *msg, size_t msg_len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, c->name);
    DIR *d = opendir(path);
    if (!d) return fail(msg, msg_len, "%s: cannot open: %s", path, strerror(errno));
    int ok = 1;
    for (struct dirent *e = readdir(d); ok && e; e = readdir(d)) {
        const size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 4, ".npy") != 0) continue;
        int known = 0;
        for (int s = 0; s < FC_SLOTS && !known; s++)
            known = spec_of(c, (fc_slot)s).used && strcmp(e->d_name, fc_slot_file((fc_slot)s)) == 0;
        if (!known)
            ok = fail(msg, msg_len,
                      "%s/%s: the manifest line of case %s does not use this array "
                      "(a feature it leaves out?)",
                      path, e->d_name, c->name);
    }
    closedir(d);
    return ok;
}

int fc_fixture_load(const char *dir, const fc_case *c, fc_fixture *f, char *msg, size_t msg_len) {
    memset(f, 0, sizeof *f);
    int ok = no_stray_files(dir, c, msg, msg_len);
    for (int s = 0; ok && s < FC_SLOTS; s++) ok = load_slot(dir, c, (fc_slot)s, f, msg, msg_len);
    if (!ok) fc_fixture_free(f);
    return ok;
}

void fc_fixture_free(fc_fixture *f) {
    for (int s = 0; s < FC_SLOTS; s++) free(f->data[s]);
    memset(f, 0, sizeof *f);
}
