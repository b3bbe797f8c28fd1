/*
 * Backend selection from untrusted text: the spec argument of flashport_context_create and
 * flashport_context_create_on_queue, FLASHPORT_BACKEND (read when the spec is NULL) and
 * FLASHPORT_KERNEL (read by the planner). Input: up to three lines, the spec (an empty line
 * passes NULL), FLASHPORT_BACKEND, and the rest FLASHPORT_KERNEL. Every call either succeeds
 * or fails with a status and a message; nothing crashes, overruns or leaks.
 *
 * The OpenCL loader is pointed at an empty vendor folder, so that the opencl module reports
 * "no platforms" at once instead of each run compiling on PoCL; cuda and hip are not built.
 */
#define _GNU_SOURCE /* setenv, putenv, mkdtemp */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flashport.h"

static char vendors[] = "/tmp/flashport-fuzz-XXXXXX";

/* The variables live in these buffers (putenv), rewritten for each input: glibc's setenv keeps
 * every value it was ever given, which a long run turns into gigabytes. A value is cut to the
 * buffers' size. */
static char backend_var[4200] = "FLASHPORT_BACKEND=", kernel_var[4200] = "FLASHPORT_KERNEL=";

static void set_value(char *var, size_t size, const char *value) {
    char *eq = strchr(var, '=') + 1;
    snprintf(eq, size - (size_t)(eq - var), "%s", value);
}

static void remove_vendors(void) { rmdir(vendors); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (!mkdtemp(vendors)) abort();
    atexit(remove_vendors);
    setenv("OCL_ICD_VENDORS", vendors, 1);
    setenv("OCL_ICD_FILENAMES", "", 1);
    setenv("FLASHPORT_LOG", "error", 1); /* the warnings of a failed entry would flood stderr */
    putenv(backend_var);
    putenv(kernel_var);
    return 0;
}

/* The next line of [*p, end) as a new string (the rest when it is the last field). */
static char *take_line(const uint8_t **p, const uint8_t *end, int last) {
    const uint8_t *nl = last ? NULL : memchr(*p, '\n', (size_t)(end - *p));
    const uint8_t *stop = nl ? nl : end;
    char *s = malloc((size_t)(stop - *p) + 1);
    if (!s) abort();
    memcpy(s, *p, (size_t)(stop - *p));
    s[stop - *p] = '\0';
    *p = nl ? nl + 1 : end;
    return s;
}

static void expect_message(flashport_status st) {
    if (st != FLASHPORT_OK && !flashport_last_error()[0]) abort(); /* every failure says why */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *p = data, *end = data + size;
    char *spec = take_line(&p, end, 0);
    char *backend = take_line(&p, end, 0);
    char *kernel = take_line(&p, end, 1);
    set_value(backend_var, sizeof backend_var, backend);
    set_value(kernel_var, sizeof kernel_var, kernel);

    int index = -1;
    expect_message(flashport_backend_find(spec, &index));
    flashport_context *ctx = NULL;
    flashport_status st = flashport_context_create(spec[0] ? spec : NULL, &ctx);
    expect_message(st);
    if (st == FLASHPORT_OK) {
        if (!flashport_context_backend(ctx) || !flashport_context_selection(ctx)[0]) abort();
        flashport_problem prob;
        flashport_problem_init(&prob, FLASHPORT_F32, 1, 2, 1, 3, 5, 8, FLASHPORT_LAYOUT_BHND);
        flashport_plan_info info;
        expect_message(flashport_plan(ctx, &prob, &info));
        flashport_context_destroy(ctx);
    }
    /* No backend built here takes a caller's queue, so the value is never dereferenced. */
    static int not_a_queue;
    ctx = NULL;
    st = flashport_context_create_on_queue(spec, &not_a_queue, &ctx);
    expect_message(st);
    if (st == FLASHPORT_OK) abort();
    free(spec);
    free(backend);
    free(kernel);
    return 0;
}
