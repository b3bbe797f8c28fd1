/* Command-line parsing, the JSON writer and the tensor helpers shared by the tools. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli.h"
#include "tensor.h"

static const char *const colours[] = {"red", "green", NULL};

typedef struct parsed {
    int flag, colour;
    const char *name;
    int64_t count;
    double ratio;
} parsed;

static cli_result parse(parsed *p, int argc, const char **argv) {
    memset(p, 0, sizeof *p);
    p->colour = -1;
    const cli_option opts[] = {
        {"flag", CLI_FLAG, &p->flag, NULL, "a flag", NULL},
        {"name", CLI_STRING, &p->name, "S", "a string", NULL},
        {"count", CLI_INT, &p->count, "N", "an integer", NULL},
        {"ratio", CLI_DOUBLE, &p->ratio, "X", "a number", NULL},
        {"colour", CLI_CHOICE, &p->colour, "C", "a choice", colours},
    };
    return cli_parse("test", argc, (char **)argv, opts, 5);
}

static void test_parse(void) {
    parsed p;
    const char *ok[] = {"t", "--flag", "--name", "x y", "--count=-12", "--ratio", "2.5e-3",
                        "--colour=green"};
    CHECK(parse(&p, 8, ok) == CLI_PARSED);
    CHECK(p.flag == 1 && strcmp(p.name, "x y") == 0 && p.count == -12 && p.ratio == 2.5e-3 &&
          p.colour == 1);

    const char *help[] = {"t", "--count", "3", "--help"};
    CHECK(parse(&p, 4, help) == CLI_HELP);

    fprintf(stderr, "(the next lines are expected errors)\n");
    const char *bad[][3] = {
        {"t", "--count", "12x"},  {"t", "--ratio", "nan"},  {"t", "--colour", "blue"},
        {"t", "--unknown", "1"},  {"t", "--flag=1", NULL},  {"t", "positional", NULL},
        {"t", "--count", NULL},   {"t", "--ratio", "1e999"}, {"t", "--", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int argc = bad[i][2] ? 3 : 2;
        CHECK(parse(&p, argc, bad[i]) == CLI_ERROR);
    }
}

static void test_ints(void) {
    int64_t v[3] = {9, 9, 9};
    CHECK(cli_parse_ints("4095,0", v, 2) && v[0] == 4095 && v[1] == 0 && v[2] == 9);
    CHECK(cli_parse_ints("-1,-1,7", v, 3) && v[0] == -1 && v[1] == -1 && v[2] == 7);
    CHECK(cli_parse_ints("12", v, 1) && v[0] == 12);
    /* anything but exactly n integers leaves the output alone */
    const char *bad[] = {"", "3", "3,", ",3", "3,4,5", "a,b", "3, 4", " 3,4", "+3,4", "3,4x",
                         "99999999999999999999,1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t w[2] = {5, 5};
        CHECK(!cli_parse_ints(bad[i], w, 2) && w[0] == 5 && w[1] == 5);
    }
}

static void test_json(void) {
    FILE *f = tmpfile();
    if (!f) {
        CHECK(!"tmpfile");
        return;
    }
    cli_json j;
    cli_json_init(&j, f);
    cli_json_begin_object(&j);
    cli_json_key(&j, "s");
    cli_json_string(&j, "a\"b\\c\n\x01");
    cli_json_key(&j, "list");
    cli_json_begin_array(&j);
    cli_json_int(&j, -3);
    cli_json_double(&j, 0.5);
    cli_json_double(&j, NAN);
    cli_json_bool(&j, 1);
    cli_json_null(&j);
    cli_json_end_array(&j);
    cli_json_key(&j, "empty");
    cli_json_begin_object(&j);
    cli_json_end_object(&j);
    cli_json_end_object(&j);
    char buf[512] = "";
    rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    const char *want = "{\n  \"s\": \"a\\\"b\\\\c\\n\\u0001\",\n  \"list\": [\n    -3,\n    0.5,\n"
                       "    null,\n    true,\n    null\n  ],\n  \"empty\": {}\n}\n";
    CHECK(strcmp(buf, want) == 0);
    if (strcmp(buf, want) != 0) fprintf(stderr, "got:\n%s\nwant:\n%s\n", buf, want);
}

static void test_tensor(void) {
    tensor_shape s = {2, 3, 5, 7};
    int64_t dims[4];
    tensor_layout_dims(FLASHPORT_LAYOUT_BNHD, s, dims);
    CHECK(dims[0] == 2 && dims[1] == 5 && dims[2] == 3 && dims[3] == 7);
    tensor_shape back = tensor_shape_from_dims(FLASHPORT_LAYOUT_BNHD, dims);
    CHECK(back.heads == 3 && back.seq == 5);
    CHECK(tensor_file_index(FLASHPORT_LAYOUT_BHND, s, 1, 2, 3, 4) == ((1 * 3 + 2) * 5 + 3) * 7 + 4);
    CHECK(tensor_file_index(FLASHPORT_LAYOUT_BNHD, s, 1, 2, 3, 4) == ((1 * 5 + 3) * 3 + 2) * 7 + 4);
    /* padded strides agree with the contiguous index when pad is 0 */
    flashport_strides st = tensor_padded_strides(FLASHPORT_LAYOUT_BNHD, s, 0);
    CHECK(tensor_strided_index(&st, 1, 2, 3, 4) == tensor_file_index(FLASHPORT_LAYOUT_BNHD, s, 1, 2, 3, 4));
    st = tensor_padded_strides(FLASHPORT_LAYOUT_BHND, s, 3);
    CHECK(st.seq == 10 && st.head == 50 && st.batch == 150);

    /* tf32 keeps 10 mantissa bits, rounding to nearest even */
    CHECK(tensor_round_tf32(1.0f + 0x1p-10f) == 1.0f + 0x1p-10f);
    CHECK(tensor_round_tf32(1.0f + 0x1p-11f) == 1.0f);              /* tie, to even */
    CHECK(tensor_round_tf32(1.0f + 0x1p-11f + 0x1p-20f) == 1.0f + 0x1p-10f);
    CHECK(tensor_round_tf32(1.0f + 0x3p-11f) == 1.0f + 0x2p-10f);   /* tie, to even (up) */
    CHECK(isinf(tensor_round_tf32(INFINITY)) && isnan(tensor_round_tf32(NAN)));

    uint16_t h[1];
    tensor_store(FLASHPORT_F16, h, 0, 1.0f / 3.0f);
    CHECK(tensor_load(FLASHPORT_F16, h, 0) == tensor_round(FLASHPORT_F16, 1.0f / 3.0f));
    tensor_store(FLASHPORT_BF16, h, 0, 3.0f);
    CHECK(h[0] == 0x4040 && tensor_load(FLASHPORT_BF16, h, 0) == 3.0f);

    /* FP8 tensors are raw bytes the tools never convert: NaN on load, nothing stored */
    uint8_t b[1] = {0x38};
    tensor_store(FLASHPORT_FP8_E4M3, b, 0, 1.0f);
    CHECK(b[0] == 0x38 && isnan(tensor_load(FLASHPORT_FP8_E5M2, b, 0)) &&
          isnan(tensor_round(FLASHPORT_FP8_E4M3, 1.0f)));
}

int main(void) {
    test_parse();
    test_ints();
    test_json();
    test_tensor();
    return check_report("test_cli");
}
