/* The .npy reader and writer: round trips, and a specific status and message for every kind of
 * malformed, truncated, wrong-rank or unsupported file. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "npy.h"

static char dir[4096];

static const char *path_of(const char *name) {
    static char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* Writes magic, version, a header dictionary (padded as NumPy pads it) and data bytes. */
static void write_raw(const char *name, int major, const char *dict, const void *data,
                      size_t bytes) {
    FILE *f = fopen(path_of(name), "wb");
    if (!f) {
        perror(path_of(name));
        exit(2);
    }
    size_t prefix = major == 1 ? 10 : 12, len = strlen(dict);
    size_t header = (prefix + len + 1 + 63) / 64 * 64 - prefix;
    fwrite("\x93NUMPY", 1, 6, f);
    fputc(major, f);
    fputc(0, f);
    fputc((int)(header & 0xff), f);
    fputc((int)((header >> 8) & 0xff), f);
    if (major != 1) {
        fputc(0, f);
        fputc(0, f);
    }
    fwrite(dict, 1, len, f);
    for (size_t i = len; i + 1 < header; i++) fputc(' ', f);
    fputc('\n', f);
    if (bytes) fwrite(data, 1, bytes, f);
    fclose(f);
}

static void write_bytes(const char *name, const void *data, size_t bytes) {
    FILE *f = fopen(path_of(name), "wb");
    if (!f) exit(2);
    if (bytes) fwrite(data, 1, bytes, f);
    fclose(f);
}

/* Reading name fails with `expected`, names the file and says `cause`, and zeroes the array. */
static void expect_error(const char *name, int rank, npy_status expected, const char *cause) {
    npy_array a;
    char msg[512];
    memset(&a, 0x5a, sizeof a);
    npy_status st = npy_read(path_of(name), rank, &a, msg, sizeof msg);
    int ok = st == expected && strstr(msg, name) && strstr(msg, cause) && a.data == NULL &&
             a.count == 0 && a.rank == 0;
    check_count++;
    if (!ok) {
        check_failures++;
        fprintf(stderr, "%s: got '%s' (expected '%s'), message '%s' (expected to contain '%s')\n",
                name, npy_status_string(st), npy_status_string(expected), msg, cause);
    }
    npy_free(&a);
}

static void test_round_trip(void) {
    float f32[2 * 3 * 4 * 5];
    for (int i = 0; i < 120; i++) f32[i] = (float)i * 0.25f - 7.0f;
    int64_t shape[4] = {2, 3, 4, 5};
    char msg[256];
    CHECK(npy_write(path_of("f32.npy"), NPY_F32, 4, shape, f32, msg, sizeof msg) == NPY_OK);
    npy_array a;
    CHECK(npy_read(path_of("f32.npy"), 4, &a, msg, sizeof msg) == NPY_OK);
    CHECK(a.dtype == NPY_F32 && a.rank == 4 && a.count == 120);
    CHECK(a.shape[0] == 2 && a.shape[1] == 3 && a.shape[2] == 4 && a.shape[3] == 5);
    CHECK(a.data && memcmp(a.data, f32, sizeof f32) == 0);
    CHECK(npy_get(&a, 7) == (double)f32[7]);
    npy_free(&a);
    CHECK(a.data == NULL);

    /* any rank accepted with want_rank < 0; rank 0 holds one element */
    double one = 3.5;
    CHECK(npy_write(path_of("scalar.npy"), NPY_F64, 0, NULL, &one, msg, sizeof msg) == NPY_OK);
    CHECK(npy_read(path_of("scalar.npy"), -1, &a, msg, sizeof msg) == NPY_OK);
    CHECK(a.rank == 0 && a.count == 1 && npy_get(&a, 0) == 3.5);
    npy_free(&a);

    /* float16 values decode exactly: 1.0 = 0x3c00, -2.0 = 0xc000, 65504 = 0x7bff */
    uint16_t h[3] = {0x3c00, 0xc000, 0x7bff};
    int64_t n3 = 3;
    CHECK(npy_write(path_of("f16.npy"), NPY_F16, 1, &n3, h, msg, sizeof msg) == NPY_OK);
    CHECK(npy_read(path_of("f16.npy"), 1, &a, msg, sizeof msg) == NPY_OK);
    CHECK(a.dtype == NPY_F16 && npy_get(&a, 0) == 1.0 && npy_get(&a, 1) == -2.0 &&
          npy_get(&a, 2) == 65504.0);
    npy_free(&a);

    /* an empty array (a zero dimension) is valid */
    int64_t empty[2] = {0, 4};
    CHECK(npy_write(path_of("empty.npy"), NPY_F32, 2, empty, NULL, msg, sizeof msg) == NPY_OK);
    CHECK(npy_read(path_of("empty.npy"), 2, &a, msg, sizeof msg) == NPY_OK && a.count == 0);
    npy_free(&a);

    /* int32 (the attention tables) and uint8 (raw FP8 bytes) round-trip, with their values */
    int32_t i32[4] = {0, 7, -3, 2147483647};
    int64_t n4 = 4;
    CHECK(npy_write(path_of("i32.npy"), NPY_I32, 1, &n4, i32, msg, sizeof msg) == NPY_OK);
    CHECK(npy_read(path_of("i32.npy"), 1, &a, msg, sizeof msg) == NPY_OK);
    CHECK(a.dtype == NPY_I32 && a.count == 4 && memcmp(a.data, i32, sizeof i32) == 0);
    CHECK(npy_get(&a, 2) == -3.0 && npy_get(&a, 3) == 2147483647.0);
    npy_free(&a);
    uint8_t u8[3] = {0x00, 0x7e, 0xff};
    CHECK(npy_write(path_of("u8.npy"), NPY_U8, 1, &n3, u8, msg, sizeof msg) == NPY_OK);
    CHECK(npy_read(path_of("u8.npy"), 1, &a, msg, sizeof msg) == NPY_OK);
    CHECK(a.dtype == NPY_U8 && a.count == 3 && npy_get(&a, 1) == 126.0 && npy_get(&a, 2) == 255.0);
    npy_free(&a);
    /* a byte has no byte order: '<u1' reads as NumPy's '|u1' */
    write_raw("u8_little.npy", 1, "{'descr': '<u1', 'fortran_order': False, 'shape': (3,)}", u8, 3);
    CHECK(npy_read(path_of("u8_little.npy"), 1, &a, msg, sizeof msg) == NPY_OK &&
          a.dtype == NPY_U8);
    npy_free(&a);

    /* version 2.0 headers (4-byte length), keys in another order, double quotes */
    float two[2] = {1.5f, -1.5f};
    write_raw("v2.npy", 2, "{\"shape\": (1, 2), 'fortran_order': False, 'descr': '<f4'}", two, 8);
    CHECK(npy_read(path_of("v2.npy"), 2, &a, msg, sizeof msg) == NPY_OK);
    CHECK(a.count == 2 && npy_get(&a, 1) == -1.5);
    npy_free(&a);
}

static void test_malformed(void) {
    float data[8] = {0};
    const char *good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }";

    expect_error("missing.npy", -1, NPY_ERROR_IO, "cannot open");
    write_bytes("empty_file.npy", "", 0);
    expect_error("empty_file.npy", -1, NPY_ERROR_TRUNCATED, "magic");
    write_bytes("text.npy", "hello, world, not numpy", 23);
    expect_error("text.npy", -1, NPY_ERROR_MAGIC, "magic");
    write_bytes("magic_only.npy", "\x93NUMPY", 6);
    expect_error("magic_only.npy", -1, NPY_ERROR_TRUNCATED, "version");
    write_bytes("no_length.npy", "\x93NUMPY\x01\x00\x40", 9);
    expect_error("no_length.npy", -1, NPY_ERROR_TRUNCATED, "header length");
    write_bytes("short_header.npy", "\x93NUMPY\x01\x00\x40\x00{'descr'", 18);
    expect_error("short_header.npy", -1, NPY_ERROR_TRUNCATED, "header");
    write_raw("version9.npy", 9, good, data, sizeof data);
    expect_error("version9.npy", -1, NPY_ERROR_VERSION, "9.0");

    write_raw("not_dict.npy", 1, "['descr', '<f4']", data, sizeof data);
    expect_error("not_dict.npy", -1, NPY_ERROR_HEADER, "'{'");
    write_raw("no_shape.npy", 1, "{'descr': '<f4', 'fortran_order': False}", data, sizeof data);
    expect_error("no_shape.npy", -1, NPY_ERROR_HEADER, "'shape'");
    write_raw("extra_key.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (8,), 'x': 1}",
              data, sizeof data);
    expect_error("extra_key.npy", -1, NPY_ERROR_HEADER, "'x'");
    write_raw("twice.npy", 1,
              "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (8,)}", data,
              sizeof data);
    expect_error("twice.npy", -1, NPY_ERROR_HEADER, "repeated");
    write_raw("int_shape.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (8)}", data,
              sizeof data);
    expect_error("int_shape.npy", -1, NPY_ERROR_HEADER, "tuple");
    write_raw("bad_bool.npy", 1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (8,)}", data,
              sizeof data);
    expect_error("bad_bool.npy", -1, NPY_ERROR_HEADER, "fortran_order");
    write_raw("unclosed.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (8,)", data,
              sizeof data);
    expect_error("unclosed.npy", -1, NPY_ERROR_HEADER, "expected");

    write_raw("big_endian.npy", 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (8,)}", data,
              sizeof data);
    expect_error("big_endian.npy", -1, NPY_ERROR_DTYPE, ">f4");
    write_raw("int64.npy", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (4,)}", data,
              sizeof data);
    expect_error("int64.npy", -1, NPY_ERROR_DTYPE, "<i8");
    write_raw("int32_big.npy", 1, "{'descr': '>i4', 'fortran_order': False, 'shape': (8,)}", data,
              sizeof data);
    expect_error("int32_big.npy", -1, NPY_ERROR_DTYPE, ">i4");
    write_raw("int8.npy", 1, "{'descr': '|i1', 'fortran_order': False, 'shape': (8,)}", data, 8);
    expect_error("int8.npy", -1, NPY_ERROR_DTYPE, "|i1");
    write_raw("fortran.npy", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 4)}", data,
              sizeof data);
    expect_error("fortran.npy", -1, NPY_ERROR_ORDER, "Fortran");

    write_raw("rank2.npy", 1, good, data, sizeof data);
    expect_error("rank2.npy", 4, NPY_ERROR_RANK, "expected rank 4, got rank 2 (2, 4)");
    write_raw("rank9.npy", 1,
              "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,8)}", data,
              sizeof data);
    expect_error("rank9.npy", -1, NPY_ERROR_RANK, "rank above 8");
    write_raw("negative.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 4)}", data,
              sizeof data);
    expect_error("negative.npy", -1, NPY_ERROR_SHAPE, "negative");
    write_raw("overflow.npy", 1,
              "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", data,
              sizeof data);
    expect_error("overflow.npy", -1, NPY_ERROR_SHAPE, "overflows");

    write_raw("short_data.npy", 1, good, data, sizeof data - 3);
    expect_error("short_data.npy", -1, NPY_ERROR_TRUNCATED, "29 of the 32 bytes");
    write_raw("no_data.npy", 1, good, NULL, 0);
    expect_error("no_data.npy", -1, NPY_ERROR_TRUNCATED, "0 of the 32 bytes");
    /* A header claiming 2^40 elements over 32 bytes of data: refused from the file's size,
     * before 4 TiB are asked of malloc. */
    write_raw("huge_shape.npy", 1,
              "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,)}", data,
              sizeof data);
    expect_error("huge_shape.npy", -1, NPY_ERROR_TRUNCATED, "32 of the 4398046511104 bytes");
    float more[9] = {0};
    write_raw("long_data.npy", 1, good, more, sizeof more);
    expect_error("long_data.npy", -1, NPY_ERROR_TRAILING, "longer");
}

static void test_write_errors(void) {
    char msg[256];
    int64_t shape[1] = {-1};
    float x = 0.0f;
    CHECK(npy_write(path_of("neg.npy"), NPY_F32, 1, shape, &x, msg, sizeof msg) == NPY_ERROR_SHAPE);
    CHECK(npy_write(path_of("rank.npy"), NPY_F32, 9, shape, &x, msg, sizeof msg) == NPY_ERROR_RANK);
    CHECK(npy_write(path_of("no/such/dir/x.npy"), NPY_F32, 0, NULL, &x, msg, sizeof msg) ==
          NPY_ERROR_IO);
    CHECK(strstr(msg, "no/such/dir/x.npy") != NULL);
}

int main(int argc, char **argv) {
    const char *base = argc > 1 ? argv[1] : ".";
    snprintf(dir, sizeof dir, "%s/npy_test_files", base);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot create %s\n", dir);
        return 2;
    }
    test_round_trip();
    test_malformed();
    test_write_errors();
    return check_report("test_npy");
}
