/*
 * flashport-conformance: every case of the NumPy fixtures on every available backend and
 * kernel variant, judged element by element. See --help.
 */
#define _POSIX_C_SOURCE 200809L
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checker.h"
#include "cli.h"
#include "flashport.h"
#include "manifest.h"
#include "report.h"

#ifndef FC_DEFAULT_DATA_DIR
#define FC_DEFAULT_DATA_DIR "conformance-data"
#endif

static const char *const tool = "flashport-conformance";

static const char help_epilogue[] =
    "Each case of DIR/manifest.txt (written by conformance/generate.py: inputs and float64\n"
    "expected O and LSE from NumPy) runs on every available backend and every kernel variant,\n"
    "forced by name. Outputs are poisoned with a signalling-NaN pattern and followed by guard\n"
    "elements; a check passes when every output element was written, nothing outside the\n"
    "outputs changed, NaN appears exactly where NumPy has it, -inf LSE where a row sees no key,\n"
    "and the errors are within the tolerances (relative L2 / max abs of O, relative LSE):\n"
    "  f32 1e-5 / 1e-4 / 1e-5; f32 on a tf32 variant 3e-3 / - / 3e-3; f32 on an f16 variant\n"
    "  2e-3 / - / 2e-3; f16 2e-3 / - / 2e-3; bf16 1e-2 / - / 1e-2 (some cases scale them, see\n"
    "  conformance/cases.py).\n"
    "A reduced-precision variant (tf32, f16) on an f32 case is compared with the reference\n"
    "backend run on inputs rounded the same way, after the reference itself agreed with NumPy.\n"
    "A variant whose plan says unsupported gets the verdict 'unsupported': not a pass, not a\n"
    "failure. Patterns in --cases and names in --backend and --kernel are comma-separated; a\n"
    "pattern with * ? [ is a glob, otherwise a substring of the case name.\n"
    "\n"
    "exit status:\n"
    "  0  every check passed or was unsupported\n"
    "  1  at least one check failed\n"
    "  2  bad command line, an unknown backend name, or filters that select nothing\n"
    "  3  fixtures missing, unreadable or malformed (build the conformance-data target)\n"
    "  4  a backend named in --backend is unavailable, or a report file cannot be written\n";

static int in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return 1;
        p = end ? end + 1 : NULL;
    }
    return 0;
}

static int case_matches(const char *patterns, const char *name) {
    if (!patterns) return 1;
    char buf[256];
    for (const char *p = patterns; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len && len < sizeof buf) {
            memcpy(buf, p, len);
            buf[len] = '\0';
            if (strpbrk(buf, "*?[") ? fnmatch(buf, name, 0) == 0 : strstr(name, buf) != NULL)
                return 1;
        }
        p = end ? end + 1 : NULL;
    }
    return 0;
}

typedef struct options {
    const char *data, *backends, *kernels, *cases, *json, *junit;
    int list;
} options;

/* Columns for every selected backend's variants; contexts[i] belongs to columns[i]. Returns an
 * exit code other than CLI_EXIT_OK on a usage or availability problem. */
static int build_columns(const options *o, fc_column **cols, flashport_context ***ctxs, int *n,
                         char *not_run, size_t not_run_len) {
    *cols = NULL;
    *ctxs = NULL;
    *n = 0;
    not_run[0] = '\0';
    for (const char *p = o->backends; p && *p;) {
        const char *end = strchr(p, ',');
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(end ? (size_t)(end - p) : strlen(p)), p);
        int index;
        if (flashport_backend_find(name, &index) != FLASHPORT_OK) {
            fprintf(stderr, "%s: --backend: unknown backend '%s': %s\n", tool, name,
                    flashport_last_error());
            return CLI_EXIT_USAGE;
        }
        p = end ? end + 1 : NULL;
    }

    int total = flashport_backend_count(), cap = 0;
    for (int b = 0; b < total; b++) {
        flashport_backend_info info;
        if (flashport_backend_get_info(b, &info) != FLASHPORT_OK) continue;
        if (o->backends && !in_list(o->backends, info.name)) continue;
        if (!info.available) {
            if (o->backends) {
                fprintf(stderr, "%s: backend '%s' was asked for but is unavailable: %s\n", tool,
                        info.name, info.reason);
                return CLI_EXIT_LIBRARY;
            }
            size_t len = strlen(not_run);
            snprintf(not_run + len, not_run_len - len, "  %s: unavailable: %s\n", info.name,
                     info.reason);
            continue;
        }
        flashport_context *ctx = NULL;
        flashport_status st = flashport_context_create(info.name, &ctx);
        if (st != FLASHPORT_OK) {
            fprintf(stderr, "%s: backend '%s' is listed as available but cannot be opened: %s\n",
                    tool, info.name, flashport_last_error());
            return CLI_EXIT_LIBRARY;
        }
        int kernels = flashport_kernel_count(info.name), used = 0;
        for (int k = 0; k < kernels; k++) {
            flashport_kernel_info ki;
            if (flashport_kernel_get_info(info.name, k, &ki) != FLASHPORT_OK) continue;
            if (o->kernels && !in_list(o->kernels, ki.name)) continue;
            if (*n == cap) {
                cap = cap ? 2 * cap : 16;
                fc_column *gc = realloc(*cols, (size_t)cap * sizeof *gc);
                flashport_context **gx = realloc(*ctxs, (size_t)cap * sizeof *gx);
                if (gc) *cols = gc;
                if (gx) *ctxs = gx;
                if (!gc || !gx) {
                    fprintf(stderr, "%s: out of memory\n", tool);
                    flashport_context_destroy(ctx);
                    return CLI_EXIT_LIBRARY;
                }
            }
            fc_column *c = &(*cols)[*n];
            snprintf(c->backend, sizeof c->backend, "%s", info.name);
            snprintf(c->kernel, sizeof c->kernel, "%s", ki.name);
            c->precision = ki.precision;
            /* The backend's first column owns the context; later ones share it. */
            (*ctxs)[*n] = used++ ? NULL : ctx;
            (*n)++;
        }
        if (!used) flashport_context_destroy(ctx);
    }
    if (*n == 0) {
        fprintf(stderr, "%s: no backend and kernel variant matches the filters%s%s\n", tool,
                not_run[0] ? "; not run:\n" : "", not_run);
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

/* The context of column i: its own, or that of the first column of the same backend. */
static flashport_context *column_context(flashport_context **ctxs, int i) {
    while (!ctxs[i]) i--;
    return ctxs[i];
}

int main(int argc, char **argv) {
    options o;
    memset(&o, 0, sizeof o);
    o.data = FC_DEFAULT_DATA_DIR;
    const cli_option opts[] = {
        {"data", CLI_STRING, &o.data, "DIR", "fixture folder (default: the build tree's)", NULL},
        {"backend", CLI_STRING, &o.backends, "LIST", "only these backends (default: all available)", NULL},
        {"kernel", CLI_STRING, &o.kernels, "LIST", "only these kernel variants", NULL},
        {"cases", CLI_STRING, &o.cases, "PATTERNS", "only cases matching a pattern", NULL},
        {"json", CLI_STRING, &o.json, "FILE", "write every result as JSON", NULL},
        {"junit", CLI_STRING, &o.junit, "FILE", "write a JUnit XML report", NULL},
        {"list", CLI_FLAG, &o.list, NULL, "print the selected cases and columns, run nothing", NULL},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_result parsed = cli_parse(tool, argc, argv, opts, n_opts);
    if (parsed == CLI_HELP) {
        cli_print_help(stdout, tool, "[options]",
                       "Checks every backend and kernel variant against the NumPy fixtures.", opts,
                       n_opts, help_epilogue);
        return CLI_EXIT_OK;
    }
    if (parsed == CLI_ERROR) return CLI_EXIT_USAGE;

    char msg[1024];
    fc_manifest m;
    if (!fc_manifest_load(o.data, &m, msg, sizeof msg)) {
        fprintf(stderr, "%s: %s\n", tool, msg);
        return CLI_EXIT_INPUT;
    }
    unsigned char *selected = calloc((size_t)m.n_cases, 1);
    int n_selected = 0;
    for (int c = 0; selected && c < m.n_cases; c++)
        n_selected += selected[c] = (unsigned char)case_matches(o.cases, m.cases[c].name);
    if (!selected || n_selected == 0) {
        fprintf(stderr, "%s: --cases '%s' matches no case of %s/manifest.txt\n", tool,
                o.cases ? o.cases : "", o.data);
        fc_manifest_free(&m);
        free(selected);
        return CLI_EXIT_USAGE;
    }

    fc_column *cols = NULL;
    flashport_context **ctxs = NULL;
    int n_cols = 0;
    char not_run[4096];
    int rc = build_columns(&o, &cols, &ctxs, &n_cols, not_run, sizeof not_run);
    fc_result *results = NULL;
    flashport_context *reference = NULL;
    if (rc != CLI_EXIT_OK) goto done;

    if (o.list) {
        for (int c = 0; c < m.n_cases; c++)
            if (selected[c]) printf("case %s\n", m.cases[c].name);
        for (int i = 0; i < n_cols; i++)
            printf("column %s/%s (%s)\n", cols[i].backend, cols[i].kernel,
                   fc_precision_name(cols[i].precision));
        if (not_run[0]) printf("not run:\n%s", not_run);
        goto done;
    }

    results = calloc((size_t)m.n_cases * (size_t)n_cols, sizeof *results);
    if (!results) {
        fprintf(stderr, "%s: out of memory\n", tool);
        rc = CLI_EXIT_LIBRARY;
        goto done;
    }
    int total = n_selected * n_cols, done_count = 0;
    for (int c = 0; c < m.n_cases && rc == CLI_EXIT_OK; c++) {
        if (!selected[c]) continue;
        const fc_case *kase = &m.cases[c];
        fc_fixture fx;
        if (!fc_fixture_load(o.data, kase, &fx, msg, sizeof msg)) {
            fprintf(stderr, "%s: %s\n", tool, msg);
            rc = CLI_EXIT_INPUT;
            break;
        }
        /* Expected outputs per precision class: NumPy's, or recomputed on rounded inputs. */
        double *expected_o[3] = {fx.o, NULL, NULL}, *expected_lse[3] = {fx.lse, NULL, NULL};
        char oracle_problem[800] = "";
        int oracle_checked = 0;
        for (int i = 0; i < n_cols; i++) {
            fc_result *r = &results[(size_t)c * (size_t)n_cols + (size_t)i];
            flashport_precision prec = cols[i].precision;
            int cls = fc_needs_recompute(kase, prec) ? (int)prec : 0;
            if (cls && !oracle_checked) {
                oracle_checked = 1;
                if (!reference && flashport_context_create("reference", &reference) != FLASHPORT_OK)
                    snprintf(oracle_problem, sizeof oracle_problem, "no reference context: %s",
                             flashport_last_error());
                if (reference) {
                    fc_result check;
                    fc_check(reference, NULL, kase, &fx, fx.o, fx.lse,
                             fc_tolerance_for(kase, FLASHPORT_PRECISION_NATIVE), &check);
                    if (check.verdict != FC_PASS)
                        snprintf(oracle_problem, sizeof oracle_problem,
                                 "the reference backend disagrees with NumPy here (%s)", check.detail);
                }
            }
            if (cls && !oracle_problem[0] && !expected_o[cls]) {
                expected_o[cls] = malloc(fx.n_o * sizeof(double) + 1);
                expected_lse[cls] = malloc(fx.n_lse * sizeof(double) + 1);
                if (!expected_o[cls] || !expected_lse[cls])
                    snprintf(oracle_problem, sizeof oracle_problem, "out of host memory");
                else if (!fc_recompute(reference, kase, &fx, prec, expected_o[cls],
                                       expected_lse[cls], msg, sizeof msg))
                    snprintf(oracle_problem, sizeof oracle_problem, "%.700s", msg);
            }
            if (cls && oracle_problem[0]) {
                memset(r, 0, sizeof *r);
                r->verdict = FC_FAIL;
                snprintf(r->detail, sizeof r->detail, "no expected output: %.600s", oracle_problem);
            } else {
                fc_check(column_context(ctxs, i), cols[i].kernel, kase, &fx, expected_o[cls],
                         expected_lse[cls], fc_tolerance_for(kase, prec), r);
            }
            done_count++;
            fprintf(stderr, "[%*d/%d] %-24s %s/%s: %s (%s)\n", total >= 1000 ? 4 : 3, done_count,
                    total, kase->name, cols[i].backend, cols[i].kernel, fc_verdict_name(r->verdict),
                    r->detail);
        }
        for (int k = 1; k < 3; k++) {
            free(expected_o[k]);
            free(expected_lse[k]);
        }
        fc_fixture_free(&fx);
    }
    if (rc != CLI_EXIT_OK) goto done;

    fc_run run = {o.data, &m, selected, cols, n_cols, results, not_run};
    fc_print_matrix(stdout, &run);
    if (o.json && !fc_write_json(o.json, &run, msg, sizeof msg)) {
        fprintf(stderr, "%s: --json: %s\n", tool, msg);
        rc = CLI_EXIT_LIBRARY;
    }
    if (o.junit && !fc_write_junit(o.junit, &run, msg, sizeof msg)) {
        fprintf(stderr, "%s: --junit: %s\n", tool, msg);
        rc = CLI_EXIT_LIBRARY;
    }
    if (rc == CLI_EXIT_OK && fc_count(&run).fail) rc = CLI_EXIT_FAILURE;

done:
    for (int i = 0; i < n_cols; i++) flashport_context_destroy(ctxs[i]);
    flashport_context_destroy(reference);
    free(ctxs);
    free(cols);
    free(results);
    free(selected);
    fc_manifest_free(&m);
    return rc;
}
