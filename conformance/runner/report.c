#include "report.h"

#include <errno.h>
#include <string.h>

#include "cli.h"

static const fc_result *result_at(const fc_run *run, int c, int col) {
    return &run->results[(size_t)c * (size_t)run->n_columns + (size_t)col];
}

fc_counts fc_count(const fc_run *run) {
    fc_counts n = {0, 0, 0};
    for (int c = 0; c < run->manifest->n_cases; c++) {
        if (!run->selected[c]) continue;
        for (int col = 0; col < run->n_columns; col++) {
            fc_verdict v = result_at(run, c, col)->verdict;
            if (v == FC_PASS)
                n.pass++;
            else if (v == FC_FAIL)
                n.fail++;
            else
                n.unsupported++;
        }
    }
    return n;
}

const char *fc_precision_name(flashport_precision p) {
    switch (p) {
    case FLASHPORT_PRECISION_NATIVE: return "native";
    case FLASHPORT_PRECISION_TF32: return "tf32";
    case FLASHPORT_PRECISION_F16: return "f16";
    case FLASHPORT_PRECISION_FP8: return "fp8";
    }
    return "?";
}

static const char *cell(fc_verdict v) {
    return v == FC_PASS ? "pass" : v == FC_FAIL ? "FAIL" : "unsup";
}

void fc_print_matrix(FILE *f, const fc_run *run) {
    const fc_manifest *m = run->manifest;
    int width = 4;
    for (int c = 0; c < m->n_cases; c++)
        if (run->selected[c] && (int)strlen(m->cases[c].name) > width)
            width = (int)strlen(m->cases[c].name);

    fprintf(f, "columns:\n");
    for (int col = 0; col < run->n_columns; col++)
        fprintf(f, "  c%-3d %s/%s (%s)\n", col + 1, run->columns[col].backend,
                run->columns[col].kernel, fc_precision_name(run->columns[col].precision));
    if (run->not_run[0]) fprintf(f, "not run:\n%s", run->not_run);
    fprintf(f, "\n%-*s", width, "case");
    for (int col = 0; col < run->n_columns; col++) fprintf(f, " %5s%-2d", "c", col + 1);
    fprintf(f, "\n");
    for (int c = 0; c < m->n_cases; c++) {
        if (!run->selected[c]) continue;
        fprintf(f, "%-*s", width, m->cases[c].name);
        for (int col = 0; col < run->n_columns; col++)
            fprintf(f, " %7s", cell(result_at(run, c, col)->verdict));
        fprintf(f, "\n");
    }

    int header = 0;
    for (int c = 0; c < m->n_cases; c++) {
        if (!run->selected[c]) continue;
        for (int col = 0; col < run->n_columns; col++) {
            const fc_result *r = result_at(run, c, col);
            if (r->verdict != FC_FAIL) continue;
            if (!header++) fprintf(f, "\nfailures:\n");
            fprintf(f, "  %s on %s/%s: %s\n", m->cases[c].name, run->columns[col].backend,
                    run->columns[col].kernel, r->detail);
        }
    }
    fc_counts n = fc_count(run);
    fprintf(f, "\n%d checks: %d passed, %d failed, %d unsupported (unsupported is not a pass)\n",
            n.pass + n.fail + n.unsupported, n.pass, n.fail, n.unsupported);
}

int fc_write_json(const char *path, const fc_run *run, char *msg, size_t msg_len) {
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(msg, msg_len, "%s: cannot create: %s", path, strerror(errno));
        return 0;
    }
    const fc_manifest *m = run->manifest;
    cli_json j;
    cli_json_init(&j, f);
    cli_json_begin_object(&j);
    cli_json_key(&j, "flashport_version");
    cli_json_string(&j, flashport_version_string());
    cli_json_key(&j, "data");
    cli_json_string(&j, run->data_dir);
    cli_json_key(&j, "not_run"); /* one "backend: reason" per entry */
    cli_json_begin_array(&j);
    for (const char *p = run->not_run; *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)len, p);
        cli_json_string(&j, line + strspn(line, " "));
        p += len + (eol ? 1 : 0);
    }
    cli_json_end_array(&j);
    cli_json_key(&j, "results");
    cli_json_begin_array(&j);
    for (int c = 0; c < m->n_cases; c++) {
        if (!run->selected[c]) continue;
        for (int col = 0; col < run->n_columns; col++) {
            const fc_result *r = result_at(run, c, col);
            cli_json_begin_object(&j);
            cli_json_key(&j, "case");
            cli_json_string(&j, m->cases[c].name);
            char words[128];
            fc_case_feature_words(&m->cases[c], words, sizeof words);
            cli_json_key(&j, "features");
            cli_json_string(&j, words);
            cli_json_key(&j, "backend");
            cli_json_string(&j, run->columns[col].backend);
            cli_json_key(&j, "kernel");
            cli_json_string(&j, run->columns[col].kernel);
            cli_json_key(&j, "precision");
            cli_json_string(&j, fc_precision_name(run->columns[col].precision));
            cli_json_key(&j, "verdict");
            cli_json_string(&j, r->verdict == FC_PASS   ? "pass"
                                : r->verdict == FC_FAIL ? "fail"
                                                        : "unsupported");
            cli_json_key(&j, "detail");
            cli_json_string(&j, r->detail);
            if (r->verdict != FC_UNSUPPORTED) {
                cli_json_key(&j, "rel_l2");
                cli_json_double(&j, r->rel_l2);
                cli_json_key(&j, "max_abs");
                cli_json_double(&j, r->max_abs);
                cli_json_key(&j, "lse_err");
                cli_json_double(&j, r->lse_err);
                cli_json_key(&j, "tol_rel_l2");
                cli_json_double(&j, r->tol.rel_l2);
                cli_json_key(&j, "tol_max_abs");
                cli_json_double(&j, r->tol.max_abs);
                cli_json_key(&j, "tol_lse");
                cli_json_double(&j, r->tol.lse);
                cli_json_key(&j, "ms");
                cli_json_double(&j, r->ms);
            }
            cli_json_end_object(&j);
        }
    }
    cli_json_end_array(&j);
    fc_counts n = fc_count(run);
    cli_json_key(&j, "summary");
    cli_json_begin_object(&j);
    cli_json_key(&j, "pass");
    cli_json_int(&j, n.pass);
    cli_json_key(&j, "fail");
    cli_json_int(&j, n.fail);
    cli_json_key(&j, "unsupported");
    cli_json_int(&j, n.unsupported);
    cli_json_end_object(&j);
    cli_json_end_object(&j);
    if (fclose(f) != 0) {
        snprintf(msg, msg_len, "%s: write failed: %s", path, strerror(errno));
        return 0;
    }
    return 1;
}

int fc_write_junit(const char *path, const fc_run *run, char *msg, size_t msg_len) {
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(msg, msg_len, "%s: cannot create: %s", path, strerror(errno));
        return 0;
    }
    const fc_manifest *m = run->manifest;
    fc_counts n = fc_count(run);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f,
            "<testsuites>\n<testsuite name=\"flashport-conformance\" tests=\"%d\" failures=\"%d\" "
            "skipped=\"%d\">\n",
            n.pass + n.fail + n.unsupported, n.fail, n.unsupported);
    for (int col = 0; col < run->n_columns; col++) {
        for (int c = 0; c < m->n_cases; c++) {
            if (!run->selected[c]) continue;
            const fc_result *r = result_at(run, c, col);
            fprintf(f, "  <testcase classname=\"");
            cli_xml_escape(f, run->columns[col].backend);
            fprintf(f, ".");
            cli_xml_escape(f, run->columns[col].kernel);
            fprintf(f, "\" name=\"");
            cli_xml_escape(f, m->cases[c].name);
            fprintf(f, "\" time=\"%.6f\"", r->ms / 1e3);
            if (r->verdict == FC_PASS) {
                fprintf(f, "/>\n");
                continue;
            }
            fprintf(f, ">\n    <%s message=\"%s", r->verdict == FC_FAIL ? "failure" : "skipped",
                    r->verdict == FC_FAIL ? "" : "unsupported: ");
            cli_xml_escape(f, r->detail);
            fprintf(f, "\"/>\n  </testcase>\n");
        }
    }
    fprintf(f, "</testsuite>\n</testsuites>\n");
    if (fclose(f) != 0) {
        snprintf(msg, msg_len, "%s: write failed: %s", path, strerror(errno));
        return 0;
    }
    return 1;
}
