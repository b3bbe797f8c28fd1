/*
 * The outcome of a conformance run and its three renderings: the case x variant matrix on a
 * terminal, a JSON file and a JUnit XML file.
 */
#ifndef FC_REPORT_H
#define FC_REPORT_H

#include <stdio.h>

#include "checker.h"
#include "manifest.h"

/* A backend and one of its kernel variants: one column of the matrix. */
typedef struct fc_column {
    char backend[96]; /* the backend entry that ran: "opencl" or "opencl:nvidia" */
    char kernel[64];
    flashport_precision precision;
} fc_column;

typedef struct fc_run {
    const char *data_dir;
    const fc_manifest *manifest;
    const unsigned char *selected; /* per case: 1 when it ran */
    const fc_column *columns;
    int n_columns;
    const fc_result *results; /* [case * n_columns + column] */
    const char *not_run;      /* backends left out and why, one per line ("" when none) */
} fc_run;

typedef struct fc_counts {
    int pass, fail, unsupported;
} fc_counts;

fc_counts fc_count(const fc_run *run);
const char *fc_precision_name(flashport_precision p);

/* The matrix, the failures with their details, and the totals. */
void fc_print_matrix(FILE *f, const fc_run *run);

/* Return 0 and a message when the file cannot be written. */
int fc_write_json(const char *path, const fc_run *run, char *msg, size_t msg_len);
int fc_write_junit(const char *path, const fc_run *run, char *msg, size_t msg_len);

#endif /* FC_REPORT_H */
