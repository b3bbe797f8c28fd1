#include "npy.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp_half.h"

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

const char *npy_status_string(npy_status s) {
    switch (s) {
    case NPY_OK: return "ok";
    case NPY_ERROR_IO: return "i/o error";
    case NPY_ERROR_MAGIC: return "not a .npy file";
    case NPY_ERROR_VERSION: return "unsupported .npy version";
    case NPY_ERROR_HEADER: return "malformed .npy header";
    case NPY_ERROR_DTYPE: return "unsupported dtype";
    case NPY_ERROR_ORDER: return "Fortran order not supported";
    case NPY_ERROR_RANK: return "wrong rank";
    case NPY_ERROR_SHAPE: return "invalid shape";
    case NPY_ERROR_TRUNCATED: return "truncated file";
    case NPY_ERROR_TRAILING: return "unexpected data after the array";
    case NPY_ERROR_NO_MEMORY: return "out of memory";
    }
    return "unknown npy status";
}

const char *npy_dtype_name(npy_dtype t) {
    switch (t) {
    case NPY_F16: return "float16";
    case NPY_F32: return "float32";
    case NPY_F64: return "float64";
    case NPY_I32: return "int32";
    case NPY_U8: return "uint8";
    }
    return "?";
}

size_t npy_dtype_size(npy_dtype t) {
    switch (t) {
    case NPY_F16: return 2;
    case NPY_F32: return 4;
    case NPY_F64: return 8;
    case NPY_I32: return 4;
    case NPY_U8: return 1;
    }
    return 0;
}

static const char *npy_descr(npy_dtype t) {
    switch (t) {
    case NPY_F16: return "<f2";
    case NPY_F32: return "<f4";
    case NPY_F64: return "<f8";
    case NPY_I32: return "<i4";
    case NPY_U8: return "|u1";
    }
    return NULL;
}

static npy_status fail(npy_status s, char *msg, size_t msg_len, const char *path, const char *fmt,
                       ...) {
    if (msg && msg_len) {
        int n = snprintf(msg, msg_len, "%s: %s: ", path, npy_status_string(s));
        if (n >= 0 && (size_t)n < msg_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(msg + n, msg_len - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return s;
}

static int host_is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* ------------------------------------------------------------------------------------------
 * Header dictionary: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * ---------------------------------------------------------------------------------------- */
typedef struct header_parser {
    const char *p, *end;
} header_parser;

static void skip_space(header_parser *h) {
    while (h->p < h->end && isspace((unsigned char)*h->p)) h->p++;
}

static int expect_char(header_parser *h, char c) {
    skip_space(h);
    if (h->p < h->end && *h->p == c) {
        h->p++;
        return 1;
    }
    return 0;
}

/* A quoted Python string without escapes, copied into out. */
static int parse_string(header_parser *h, char *out, size_t out_len) {
    skip_space(h);
    if (h->p >= h->end || (*h->p != '\'' && *h->p != '"')) return 0;
    char quote = *h->p++;
    size_t n = 0;
    while (h->p < h->end && *h->p != quote) {
        if (*h->p == '\\' || n + 1 >= out_len) return 0;
        out[n++] = *h->p++;
    }
    if (h->p >= h->end) return 0;
    h->p++;
    out[n] = '\0';
    return 1;
}

static int parse_bool(header_parser *h, int *out) {
    skip_space(h);
    size_t left = (size_t)(h->end - h->p);
    if (left >= 4 && memcmp(h->p, "True", 4) == 0) {
        h->p += 4;
        *out = 1;
        return 1;
    }
    if (left >= 5 && memcmp(h->p, "False", 5) == 0) {
        h->p += 5;
        *out = 0;
        return 1;
    }
    return 0;
}

/* A tuple of non-negative integers: (), (3,), (2, 3). Returns 0 on a syntax error, -1 when a
 * dimension is negative or too large, -2 when there are too many dimensions. */
static int parse_shape(header_parser *h, int64_t *shape, int *rank) {
    if (!expect_char(h, '(')) return 0;
    *rank = 0;
    for (;;) {
        skip_space(h);
        if (h->p < h->end && *h->p == ')') {
            h->p++;
            return 1;
        }
        int negative = 0;
        if (h->p < h->end && *h->p == '-') {
            negative = 1;
            h->p++;
        }
        if (h->p >= h->end || !isdigit((unsigned char)*h->p)) return 0;
        int64_t v = 0;
        while (h->p < h->end && isdigit((unsigned char)*h->p)) {
            if (v > (INT64_MAX - 9) / 10) return -1;
            v = v * 10 + (*h->p++ - '0');
        }
        if (negative) return -1;
        if (*rank >= NPY_MAX_RANK) return -2;
        shape[(*rank)++] = v;
        skip_space(h);
        if (h->p < h->end && *h->p == ',') {
            h->p++;
            continue;
        }
        if (h->p < h->end && *h->p == ')') {
            h->p++;
            /* "(3)" is an int in Python, not a tuple; NumPy always writes "(3,)". */
            return *rank == 1 ? 0 : 1;
        }
        return 0;
    }
}

static npy_status parse_header(const char *text, size_t len, npy_array *out, const char *path,
                               char *msg, size_t msg_len) {
    header_parser h = {text, text + len};
    char descr[32] = "";
    int fortran = 0, have_descr = 0, have_order = 0, have_shape = 0;

    if (!expect_char(&h, '{'))
        return fail(NPY_ERROR_HEADER, msg, msg_len, path, "header does not start with '{'");
    for (;;) {
        if (expect_char(&h, '}')) break;
        char key[32];
        if (!parse_string(&h, key, sizeof key) || !expect_char(&h, ':'))
            return fail(NPY_ERROR_HEADER, msg, msg_len, path, "expected a quoted key and ':'");
        if (strcmp(key, "descr") == 0 && !have_descr) {
            if (!parse_string(&h, descr, sizeof descr))
                return fail(NPY_ERROR_HEADER, msg, msg_len, path, "'descr' is not a string");
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0 && !have_order) {
            if (!parse_bool(&h, &fortran))
                return fail(NPY_ERROR_HEADER, msg, msg_len, path,
                            "'fortran_order' is not True or False");
            have_order = 1;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            int r = parse_shape(&h, out->shape, &out->rank);
            if (r == -1)
                return fail(NPY_ERROR_SHAPE, msg, msg_len, path,
                            "a dimension is negative or too large");
            if (r == -2)
                return fail(NPY_ERROR_RANK, msg, msg_len, path, "rank above %d", NPY_MAX_RANK);
            if (r == 0)
                return fail(NPY_ERROR_HEADER, msg, msg_len, path,
                            "'shape' is not a tuple of integers");
            have_shape = 1;
        } else {
            return fail(NPY_ERROR_HEADER, msg, msg_len, path, "unexpected or repeated key '%s'",
                        key);
        }
        if (expect_char(&h, ',')) continue;
        if (expect_char(&h, '}')) break;
        return fail(NPY_ERROR_HEADER, msg, msg_len, path, "expected ',' or '}' after '%s'", key);
    }
    skip_space(&h);
    if (h.p != h.end)
        return fail(NPY_ERROR_HEADER, msg, msg_len, path, "text after the header dictionary");
    if (!have_descr || !have_order || !have_shape)
        return fail(NPY_ERROR_HEADER, msg, msg_len, path, "missing %s",
                    !have_descr   ? "'descr'"
                    : !have_order ? "'fortran_order'"
                                  : "'shape'");

    if (strcmp(descr, "<f2") == 0)
        out->dtype = NPY_F16;
    else if (strcmp(descr, "<f4") == 0)
        out->dtype = NPY_F32;
    else if (strcmp(descr, "<f8") == 0)
        out->dtype = NPY_F64;
    else if (strcmp(descr, "<i4") == 0)
        out->dtype = NPY_I32;
    /* One byte has no byte order: NumPy writes '|u1', and '<u1' or '>u1' mean the same. */
    else if (strcmp(descr, "|u1") == 0 || strcmp(descr, "<u1") == 0 || strcmp(descr, ">u1") == 0)
        out->dtype = NPY_U8;
    else
        return fail(NPY_ERROR_DTYPE, msg, msg_len, path,
                    "dtype '%s' (supported: little-endian float16, float32, float64, int32; "
                    "uint8)",
                    descr);
    if (fortran)
        return fail(NPY_ERROR_ORDER, msg, msg_len, path, "array is stored in Fortran order");

    size_t count = 1, size = npy_dtype_size(out->dtype);
    for (int i = 0; i < out->rank; i++) {
        uint64_t dim = (uint64_t)out->shape[i];
        if (dim != 0 && count > SIZE_MAX / size / dim)
            return fail(NPY_ERROR_SHAPE, msg, msg_len, path, "element count overflows");
        count *= (size_t)dim;
    }
    out->count = count;
    return NPY_OK;
}

static void format_shape(const npy_array *a, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < a->rank && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, i ? ", %lld" : "%lld", (long long)a->shape[i]);
    if (n < len) snprintf(buf + n, len - n, ")");
}

npy_status npy_read(const char *path, int want_rank, npy_array *out, char *msg, size_t msg_len) {
    if (out) memset(out, 0, sizeof *out);
    if (msg && msg_len) msg[0] = '\0';
    if (!path || !out) return fail(NPY_ERROR_IO, msg, msg_len, "(null)", "no path or output given");
    FILE *f = fopen(path, "rb");
    if (!f) return fail(NPY_ERROR_IO, msg, msg_len, path, "cannot open: %s", strerror(errno));
    npy_status st = npy_read_stream(f, path, want_rank, out, msg, msg_len);
    fclose(f);
    return st;
}

/* Bytes from the position of f to its end, or -1 when f cannot seek (a pipe). */
static long bytes_left(FILE *f) {
    const long here = ftell(f);
    if (here < 0 || fseek(f, 0, SEEK_END) != 0) return -1;
    const long end = ftell(f);
    if (fseek(f, here, SEEK_SET) != 0 || end < here) return -1;
    return end - here;
}

npy_status npy_read_stream(FILE *f, const char *name, int want_rank, npy_array *out, char *msg,
                           size_t msg_len) {
    const char *path = name ? name : "(stream)";
    npy_array a;
    memset(&a, 0, sizeof a);
    if (out) memset(out, 0, sizeof *out);
    if (msg && msg_len) msg[0] = '\0';
    if (!f || !out) return fail(NPY_ERROR_IO, msg, msg_len, path, "no stream or output given");
    if (!host_is_little_endian())
        return fail(NPY_ERROR_DTYPE, msg, msg_len, path, "this reader needs a little-endian host");

    npy_status st = NPY_OK;
    char *header = NULL;
    unsigned char pre[12];
    size_t got = fread(pre, 1, 8, f);
    if (got < 6 || memcmp(pre, npy_magic, 6) != 0) {
        st =
            got < 6 && memcmp(pre, npy_magic, got) == 0
                ? fail(NPY_ERROR_TRUNCATED, msg, msg_len, path, "file ends inside the magic string")
                : fail(NPY_ERROR_MAGIC, msg, msg_len, path, "missing the \\x93NUMPY magic string");
        goto done;
    }
    if (got < 8) {
        st = fail(NPY_ERROR_TRUNCATED, msg, msg_len, path, "file ends before the version");
        goto done;
    }
    unsigned major = pre[6], minor = pre[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0) {
        st = fail(NPY_ERROR_VERSION, msg, msg_len, path, "format version %u.%u", major, minor);
        goto done;
    }
    size_t len_bytes = major == 1 ? 2 : 4;
    if (fread(pre + 8, 1, len_bytes, f) != len_bytes) {
        st = fail(NPY_ERROR_TRUNCATED, msg, msg_len, path, "file ends before the header length");
        goto done;
    }
    size_t header_len = (size_t)pre[8] | (size_t)pre[9] << 8;
    if (len_bytes == 4) header_len |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    if (header_len > (1u << 24)) {
        st = fail(NPY_ERROR_HEADER, msg, msg_len, path, "header length %zu is implausible",
                  header_len);
        goto done;
    }
    header = malloc(header_len + 1);
    if (!header) {
        st = fail(NPY_ERROR_NO_MEMORY, msg, msg_len, path, "header of %zu bytes", header_len);
        goto done;
    }
    if (fread(header, 1, header_len, f) != header_len) {
        st = fail(NPY_ERROR_TRUNCATED, msg, msg_len, path, "file ends inside the %zu-byte header",
                  header_len);
        goto done;
    }
    header[header_len] = '\0';
    if (memchr(header, '\0', header_len)) {
        st = fail(NPY_ERROR_HEADER, msg, msg_len, path, "header contains a NUL byte");
        goto done;
    }
    st = parse_header(header, header_len, &a, path, msg, msg_len);
    if (st != NPY_OK) goto done;
    if (want_rank >= 0 && a.rank != want_rank) {
        char shape[160];
        format_shape(&a, shape, sizeof shape);
        st = fail(NPY_ERROR_RANK, msg, msg_len, path, "expected rank %d, got rank %d %s", want_rank,
                  a.rank, shape);
        goto done;
    }

    size_t bytes = a.count * npy_dtype_size(a.dtype);
    /* A header can claim any shape: a short file is refused before its data is allocated, so
     * that a few bytes cannot make the reader ask for gigabytes. */
    long left = bytes_left(f);
    if (left >= 0 && (size_t)left < bytes) {
        st = fail(NPY_ERROR_TRUNCATED, msg, msg_len, path,
                  "data has %ld of the %zu bytes the shape needs", left, bytes);
        goto done;
    }
    a.data = malloc(bytes ? bytes : 1);
    if (!a.data) {
        st = fail(NPY_ERROR_NO_MEMORY, msg, msg_len, path, "%zu bytes of data", bytes);
        goto done;
    }
    size_t n_read = fread(a.data, 1, bytes, f);
    if (n_read != bytes) {
        st = ferror(f) ? fail(NPY_ERROR_IO, msg, msg_len, path, "read failed: %s", strerror(errno))
                       : fail(NPY_ERROR_TRUNCATED, msg, msg_len, path,
                              "data has %zu of the %zu bytes the shape needs", n_read, bytes);
        goto done;
    }
    if (fgetc(f) != EOF) {
        st = fail(NPY_ERROR_TRAILING, msg, msg_len, path,
                  "file is longer than its %zu bytes of data", bytes);
        goto done;
    }
    *out = a;
    a.data = NULL;

done:
    free(a.data);
    free(header);
    return st;
}

npy_status npy_write(const char *path, npy_dtype dtype, int rank, const int64_t *shape,
                     const void *data, char *msg, size_t msg_len) {
    if (msg && msg_len) msg[0] = '\0';
    if (!path) return fail(NPY_ERROR_IO, msg, msg_len, "(null)", "no path given");
    const char *descr = npy_descr(dtype);
    if (!descr) return fail(NPY_ERROR_DTYPE, msg, msg_len, path, "unknown dtype %d", (int)dtype);
    if (rank < 0 || rank > NPY_MAX_RANK || (rank > 0 && !shape))
        return fail(NPY_ERROR_RANK, msg, msg_len, path, "rank %d", rank);
    if (!host_is_little_endian())
        return fail(NPY_ERROR_DTYPE, msg, msg_len, path, "this writer needs a little-endian host");

    char dict[512];
    size_t n = (size_t)snprintf(dict, sizeof dict,
                                "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    size_t count = 1, size = npy_dtype_size(dtype);
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0) return fail(NPY_ERROR_SHAPE, msg, msg_len, path, "negative dimension");
        if (shape[i] != 0 && count > SIZE_MAX / size / (uint64_t)shape[i])
            return fail(NPY_ERROR_SHAPE, msg, msg_len, path, "element count overflows");
        count *= (size_t)shape[i];
        n += (size_t)snprintf(dict + n, sizeof dict - n, "%lld,%s", (long long)shape[i],
                              i + 1 < rank ? " " : "");
    }
    n += (size_t)snprintf(dict + n, sizeof dict - n, "), }");
    /* The header (magic, version, length, dictionary, padding, newline) ends on a 64-byte
     * boundary so that the data is aligned, as NumPy writes it. */
    size_t total = 10 + n + 1;
    size_t padded = (total + 63) / 64 * 64;
    size_t header_len = padded - 10;
    if (header_len > 0xffff) return fail(NPY_ERROR_SHAPE, msg, msg_len, path, "header too long");
    if (count && !data) return fail(NPY_ERROR_IO, msg, msg_len, path, "no data given");

    FILE *f = fopen(path, "wb");
    if (!f) return fail(NPY_ERROR_IO, msg, msg_len, path, "cannot create: %s", strerror(errno));
    unsigned char pre[10] = {0x93,
                             'N',
                             'U',
                             'M',
                             'P',
                             'Y',
                             1,
                             0,
                             (unsigned char)(header_len & 0xff),
                             (unsigned char)(header_len >> 8)};
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, n, f) == n;
    for (size_t i = n; ok && i + 1 < header_len; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && (count == 0 || fwrite(data, size, count, f) == count);
    if (fclose(f) != 0) ok = 0;
    if (!ok) return fail(NPY_ERROR_IO, msg, msg_len, path, "write failed: %s", strerror(errno));
    return NPY_OK;
}

void npy_free(npy_array *a) {
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

double npy_get(const npy_array *a, size_t i) {
    switch (a->dtype) {
    case NPY_F16: return fp_f16_to_f32(((const uint16_t *)a->data)[i]);
    case NPY_F32: return ((const float *)a->data)[i];
    case NPY_F64: return ((const double *)a->data)[i];
    case NPY_I32: return ((const int32_t *)a->data)[i];
    case NPY_U8: return ((const uint8_t *)a->data)[i];
    }
    return 0.0;
}
