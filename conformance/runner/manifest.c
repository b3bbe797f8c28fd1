#include "manifest.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"
#include "tensor.h"

#define MANIFEST_MAGIC "flashport-conformance-manifest 1"

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

/* Sets one key=value field of c; returns a bit for the key (0 when unknown or invalid). */
static unsigned set_field(fc_case *c, const char *key, const char *v) {
    double d;
    int64_t i;
    if (strcmp(key, "name") == 0) {
        if (!*v || strlen(v) >= sizeof c->name || strchr(v, '/')) return 0;
        strcpy(c->name, v);
        return 1u << 0;
    }
    if (strcmp(key, "dtype") == 0) {
        if (strcmp(v, "f32") == 0) c->dtype = FLASHPORT_F32;
        else if (strcmp(v, "f16") == 0) c->dtype = FLASHPORT_F16;
        else if (strcmp(v, "bf16") == 0) c->dtype = FLASHPORT_BF16;
        else return 0;
        return 1u << 1;
    }
    if (strcmp(key, "layout") == 0) {
        if (strcmp(v, "bhnd") == 0) c->layout = FLASHPORT_LAYOUT_BHND;
        else if (strcmp(v, "bnhd") == 0) c->layout = FLASHPORT_LAYOUT_BNHD;
        else return 0;
        return 1u << 2;
    }
    struct { const char *key; int64_t *field; int64_t min; } ints[] = {
        {"batch", &c->batch, 1},     {"heads_q", &c->heads_q, 1}, {"heads_kv", &c->heads_kv, 1},
        {"seq_q", &c->seq_q, 1},     {"seq_kv", &c->seq_kv, 1},   {"head_dim", &c->head_dim, 1},
        {"pad", &c->pad, 0},
    };
    for (unsigned k = 0; k < sizeof ints / sizeof ints[0]; k++)
        if (strcmp(key, ints[k].key) == 0) {
            if (!parse_int(v, ints[k].min, ints[k].field)) return 0;
            return 1u << (3 + k);
        }
    if (strcmp(key, "causal") == 0) {
        if (!parse_int(v, 0, &i) || i > 1) return 0;
        c->causal = (int)i;
        return 1u << 10;
    }
    if (strcmp(key, "scale") == 0) {
        if (!parse_double(v, &d)) return 0;
        c->scale = (float)d;
        return 1u << 11;
    }
    if (strcmp(key, "tol_factor") == 0) {
        if (!parse_double(v, &d) || d < 1.0) return 0;
        c->tol_factor = d;
        return 1u << 12;
    }
    return 0;
}

static const unsigned all_fields = (1u << 13) - 1;

static int parse_case(char *line, fc_case *c, const char *path, int lineno, char *msg, size_t len) {
    memset(c, 0, sizeof *c);
    unsigned seen = 0;
    for (char *tok = strtok(line, " \t\r\n"); tok; tok = strtok(NULL, " \t\r\n")) {
        char *eq = strchr(tok, '=');
        if (!eq) return fail(msg, len, "%s:%d: field '%s' is not key=value", path, lineno, tok);
        *eq = '\0';
        unsigned bit = set_field(c, tok, eq + 1);
        if (!bit)
            return fail(msg, len, "%s:%d: unknown key or invalid value: %s=%s", path, lineno, tok,
                        eq + 1);
        if (seen & bit) return fail(msg, len, "%s:%d: key '%s' repeated", path, lineno, tok);
        seen |= bit;
    }
    if (seen != all_fields) return fail(msg, len, "%s:%d: case line misses fields", path, lineno);
    if (c->heads_q % c->heads_kv)
        return fail(msg, len, "%s:%d: heads_q is not a multiple of heads_kv", path, lineno);
    return 1;
}

int fc_manifest_load(const char *dir, fc_manifest *m, char *msg, size_t msg_len) {
    memset(m, 0, sizeof *m);
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return fail(msg, msg_len, "%s: cannot open: %s (generate the fixtures first: the "
                    "conformance-data build target)", path, strerror(errno));
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
                strspn(p + strlen(MANIFEST_MAGIC), " \t\r\n") != strlen(p + strlen(MANIFEST_MAGIC))) {
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

/* Loads one .npy of the given dtype and shape and converts it to float or double. */
static int load_array(const char *dir, const fc_case *c, const char *file, npy_dtype want,
                      int rank, const int64_t *dims, float **as_float, double **as_double,
                      size_t *count, char *msg, size_t msg_len) {
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/%s/%s", dir, c->name, file);
    npy_array a;
    if (npy_read(path, rank, &a, err, sizeof err) != NPY_OK) return fail(msg, msg_len, "%s", err);
    int ok = 1;
    if (a.dtype != want)
        ok = fail(msg, msg_len, "%s: holds %s, the case needs %s", path, npy_dtype_name(a.dtype),
                  npy_dtype_name(want));
    for (int i = 0; ok && i < rank; i++)
        if (a.shape[i] != dims[i])
            ok = fail(msg, msg_len, "%s: dimension %d is %lld, the manifest says %lld", path, i,
                      (long long)a.shape[i], (long long)dims[i]);
    if (ok) {
        *count = a.count;
        if (as_float) *as_float = malloc(a.count * sizeof(float) + 1);
        if (as_double) *as_double = malloc(a.count * sizeof(double) + 1);
        if ((as_float && !*as_float) || (as_double && !*as_double))
            ok = fail(msg, msg_len, "%s: out of memory", path);
        for (size_t i = 0; ok && i < a.count; i++) {
            double x = npy_get(&a, i);
            if (as_float) (*as_float)[i] = (float)x;
            if (as_double) (*as_double)[i] = x;
        }
    }
    npy_free(&a);
    return ok;
}

int fc_fixture_load(const char *dir, const fc_case *c, fc_fixture *f, char *msg, size_t msg_len) {
    memset(f, 0, sizeof *f);
    /* bf16 inputs are stored as float32 values that bf16 represents exactly. */
    npy_dtype in = c->dtype == FLASHPORT_F16 ? NPY_F16 : NPY_F32;
    tensor_shape qs = {c->batch, c->heads_q, c->seq_q, c->head_dim};
    tensor_shape ks = {c->batch, c->heads_kv, c->seq_kv, c->head_dim};
    int64_t qd[4], kd[4], ld[3] = {c->batch, c->heads_q, c->seq_q};
    tensor_layout_dims(c->layout, qs, qd);
    tensor_layout_dims(c->layout, ks, kd);
    size_t n_v = 0;
    int ok = load_array(dir, c, "q.npy", in, 4, qd, &f->q, NULL, &f->n_q, msg, msg_len) &&
             load_array(dir, c, "k.npy", in, 4, kd, &f->k, NULL, &f->n_kv, msg, msg_len) &&
             load_array(dir, c, "v.npy", in, 4, kd, &f->v, NULL, &n_v, msg, msg_len) &&
             load_array(dir, c, "o.npy", NPY_F64, 4, qd, NULL, &f->o, &f->n_o, msg, msg_len) &&
             load_array(dir, c, "lse.npy", NPY_F64, 3, ld, NULL, &f->lse, &f->n_lse, msg, msg_len);
    for (size_t i = 0; ok && c->dtype == FLASHPORT_BF16 && i < f->n_q + 2 * f->n_kv; i++) {
        float x = i < f->n_q ? f->q[i] : i < f->n_q + f->n_kv ? f->k[i - f->n_q]
                                                              : f->v[i - f->n_q - f->n_kv];
        if (tensor_round(FLASHPORT_BF16, x) != x && !isnan(x))
            ok = fail(msg, msg_len, "%s/%s: bf16 input %g is not a bfloat16 value", dir, c->name,
                      (double)x);
    }
    if (!ok) fc_fixture_free(f);
    return ok;
}

void fc_fixture_free(fc_fixture *f) {
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->o);
    free(f->lse);
    memset(f, 0, sizeof *f);
}
