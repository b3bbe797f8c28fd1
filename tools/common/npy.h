/*
 * A small reader and writer of NumPy .npy files, for the tools and the conformance suite.
 *
 * Supported: format versions 1.0, 2.0 and 3.0; little-endian float16, float32, float64 and
 * int32 (the attention tables), and uint8 (raw FP8 bytes: NumPy has no FP8 type); C order; any
 * rank up to NPY_MAX_RANK. Everything else (big-endian, Fortran order, other
 * dtypes, a header that is not the dictionary NumPy writes, a file shorter or longer than its
 * header says) is refused with a specific status and a message naming the file and the cause.
 */
#ifndef FP_TOOLS_NPY_H
#define FP_TOOLS_NPY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define NPY_MAX_RANK 8

typedef enum npy_status {
    NPY_OK = 0,
    NPY_ERROR_IO,        /* cannot open, read or write the file */
    NPY_ERROR_MAGIC,     /* not a .npy file (magic string missing) */
    NPY_ERROR_VERSION,   /* a format version this reader does not know */
    NPY_ERROR_HEADER,    /* the header dictionary is malformed or incomplete */
    NPY_ERROR_DTYPE,     /* dtype other than little-endian f2/f4/f8/i4, or u1 */
    NPY_ERROR_ORDER,     /* Fortran order */
    NPY_ERROR_RANK,      /* rank differs from the one asked for, or above NPY_MAX_RANK */
    NPY_ERROR_SHAPE,     /* negative dimension, or a size that overflows */
    NPY_ERROR_TRUNCATED, /* the file ends before the header or the data does */
    NPY_ERROR_TRAILING,  /* bytes after the data */
    NPY_ERROR_NO_MEMORY
} npy_status;

typedef enum npy_dtype { NPY_F16 = 0, NPY_F32 = 1, NPY_F64 = 2, NPY_I32 = 3, NPY_U8 = 4 } npy_dtype;

typedef struct npy_array {
    npy_dtype dtype;
    int rank;
    int64_t shape[NPY_MAX_RANK];
    size_t count; /* product of the shape (1 for rank 0) */
    void *data;   /* count elements of dtype, C order, host byte order */
} npy_array;

const char *npy_status_string(npy_status s);
const char *npy_dtype_name(npy_dtype t); /* "float16", "float32", "float64", "int32", "uint8" */
size_t npy_dtype_size(npy_dtype t);

/* Reads path into *out (out->data is malloc'ed; release with npy_free). want_rank < 0 accepts
 * any rank. On failure *out is zeroed and msg (when not NULL) says what is wrong. */
npy_status npy_read(const char *path, int want_rank, npy_array *out, char *msg, size_t msg_len);
/* The same from an open stream positioned at the magic string; name is used in messages. The
 * stream is left open. */
npy_status npy_read_stream(FILE *f, const char *name, int want_rank, npy_array *out, char *msg,
                           size_t msg_len);

/* Writes count = prod(shape) elements of dtype from data as a version 1.0 .npy file. */
npy_status npy_write(const char *path, npy_dtype dtype, int rank, const int64_t *shape,
                     const void *data, char *msg, size_t msg_len);

void npy_free(npy_array *a);

/* Element i of a as a double (float16 decoded exactly; uint8: the byte's value). */
double npy_get(const npy_array *a, size_t i);

#endif /* FP_TOOLS_NPY_H */
