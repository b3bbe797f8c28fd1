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
    "expected O and LSE from NumPy) runs through the API v2 call on every available backend\n"
    "and every kernel variant, forced by name. Outputs are poisoned with a signalling-NaN\n"
    "pattern and followed by guard elements; a check passes when every output element was\n"
    "written, nothing outside the outputs changed (gaps of strided O, packed rows of no\n"
    "sequence), NaN appears exactly where NumPy has it, LSE is exactly -inf where a row sees no\n"
    "key, and the errors are within the tolerances (relative L2 / max abs of O, relative LSE):\n"
    "  f32 1e-5 / 1e-4 / 1e-5; f32 on a tf32 variant 3e-3 / - / 3e-3; f32 on an f16 variant\n"
    "  2e-3 / - / 2e-3; f16 2e-3 / - / 2e-3; bf16 1e-2 / - / 1e-2; FP8 inputs: those of\n"
    "  out_dtype, against the exact result on the decoded inputs; on an fp8 variant (P\n"
    "  rounded to e4m3) 5e-2 / - / 1e-3 or out_dtype's if looser (a few cases scale the O\n"
    "  tolerances, with the reason in conformance/cases.py).\n"
    "Backward cases (<case>_bwd) run flashport_attention_backward from dO and NumPy's O and\n"
    "LSE, and judge dQ, dK, dV by relative L2: f32 1e-4, f16 2e-3, bf16 2e-2 (tf32/f16\n"
    "variants 3e-2), with the same written/untouched/NaN checks.\n"
    "A reduced-precision variant (tf32, f16) on an f32 case is compared with the reference\n"
    "backend run on inputs rounded the same way, after the reference itself agreed with NumPy.\n"
    "A variant whose plan says unsupported gets the verdict 'unsupported': not a pass, not a\n"
    "failure; but a reason naming a feature the case does not use, or a decline of a case with\n"
    "features that names none of them while the variant plans the same problem without them,\n"
    "is a failure. --list prints each case's features (window softcap alibi bias sinks varlen\n"
    "paged fp8) as read from the descriptor the runner builds.\n"
    "Patterns in --cases and entries in --backend and --kernel are comma-separated; a\n"
    "pattern with * ? [ is a glob, otherwise a substring of the case name.\n"
    "\n"
    "exit status:\n"
    "  0  every check passed or was unsupported\n"
    "  1  at least one check failed\n"
    "  2  bad command line, an unknown backend name, or filters that select nothing\n"
    "  3  fixtures missing, unreadable or malformed (build the conformance-data target)\n"
    "  4  a backend named in --backend is unavailable or cannot be opened, or a report file\n"
    "     cannot be written\n";

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

/* One backend entry to run ("cpu_simd", "opencl:nvidia") and its open context. */
typedef struct target {
    char spec[96];
    char name[32];
    flashport_context *ctx;
} target;

typedef struct plan_set {
    target *targets;
    int n_targets;
    fc_column *columns;
    int *target_of; /* per column */
    int n_columns;
    char not_run[4096]; /* backends left out and why */
} plan_set;

static void plan_set_free(plan_set *s) {
    for (int i = 0; i < s->n_targets; i++) flashport_context_destroy(s->targets[i].ctx);
    free(s->targets);
    free(s->columns);
    free(s->target_of);
}

static int add_target(plan_set *s, const char *spec, const char *name) {
    target *grown = realloc(s->targets, (size_t)(s->n_targets + 1) * sizeof *grown);
    if (!grown) return 0;
    s->targets = grown;
    target *t = &s->targets[s->n_targets++];
    snprintf(t->spec, sizeof t->spec, "%s", spec);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ctx = NULL;
    return 1;
}

/* The backends to run: each --backend entry (name[:device]), or every available backend.
 * Returns an exit code; CLI_EXIT_OK when s->targets is ready. */
static int select_targets(const options *o, plan_set *s) {
    if (o->backends) {
        for (const char *p = o->backends; p && *p;) {
            const char *end = strchr(p, ',');
            char spec[96], name[32];
            snprintf(spec, sizeof spec, "%.*s", (int)(end ? (size_t)(end - p) : strlen(p)), p);
            snprintf(name, sizeof name, "%.*s", (int)strcspn(spec, ":"), spec);
            p = end ? end + 1 : NULL;
            int index;
            flashport_backend_info info;
            if (flashport_backend_find(name, &index) != FLASHPORT_OK) {
                fprintf(stderr, "%s: --backend: unknown backend '%s': %s\n", tool, name,
                        flashport_last_error());
                return CLI_EXIT_USAGE;
            }
            if (flashport_backend_get_info(index, &info) == FLASHPORT_OK && !info.available) {
                fprintf(stderr, "%s: backend '%s' was asked for but is unavailable: %s\n", tool,
                        name, info.reason);
                return CLI_EXIT_LIBRARY;
            }
            if (!add_target(s, spec, name)) return CLI_EXIT_LIBRARY;
        }
        return CLI_EXIT_OK;
    }
    for (int b = 0; b < flashport_backend_count(); b++) {
        flashport_backend_info info;
        if (flashport_backend_get_info(b, &info) != FLASHPORT_OK) continue;
        if (!info.available) {
            size_t len = strlen(s->not_run);
            snprintf(s->not_run + len, sizeof s->not_run - len, "  %s: unavailable: %s\n",
                     info.name, info.reason);
            continue;
        }
        if (!add_target(s, info.name, info.name)) return CLI_EXIT_LIBRARY;
    }
    return CLI_EXIT_OK;
}

/* Opens every target and makes a column of each of its kernel variants that --kernel lets
 * through. Returns an exit code. */
static int build_columns(const options *o, plan_set *s) {
    int rc = select_targets(o, s);
    for (int t = 0; t < s->n_targets && rc == CLI_EXIT_OK; t++) {
        target *tg = &s->targets[t];
        if (flashport_context_create(tg->spec, &tg->ctx) != FLASHPORT_OK) {
            fprintf(stderr, "%s: cannot open '%s': %s\n", tool, tg->spec, flashport_last_error());
            return CLI_EXIT_LIBRARY;
        }
        int kernels = flashport_kernel_count(tg->name), before = s->n_columns;
        for (int k = 0; k < kernels; k++) {
            flashport_kernel_info ki;
            if (flashport_kernel_get_info(tg->name, k, &ki) != FLASHPORT_OK) continue;
            if (o->kernels && !in_list(o->kernels, ki.name)) continue;
            fc_column *gc = realloc(s->columns, (size_t)(s->n_columns + 1) * sizeof *gc);
            if (gc) s->columns = gc;
            int *gt = realloc(s->target_of, (size_t)(s->n_columns + 1) * sizeof *gt);
            if (gt) s->target_of = gt;
            if (!gc || !gt) {
                fprintf(stderr, "%s: out of memory\n", tool);
                return CLI_EXIT_LIBRARY;
            }
            fc_column *c = &s->columns[s->n_columns];
            snprintf(c->backend, sizeof c->backend, "%s", tg->spec);
            snprintf(c->kernel, sizeof c->kernel, "%s", ki.name);
            c->precision = ki.precision;
            s->target_of[s->n_columns++] = t;
        }
        if (s->n_columns == before) {
            size_t len = strlen(s->not_run);
            snprintf(s->not_run + len, sizeof s->not_run - len, "  %s: %s\n", tg->spec,
                     kernels > 0 ? "no kernel variant matches --kernel"
                                 : "the backend lists no kernel variant");
        }
    }
    if (rc == CLI_EXIT_OK && s->n_columns == 0) {
        fprintf(stderr, "%s: no backend and kernel variant matches the filters%s%s\n", tool,
                s->not_run[0] ? "; not run:\n" : "", s->not_run);
        rc = CLI_EXIT_USAGE;
    }
    return rc;
}

/* Expected outputs of one case for each precision class: NumPy's for the case's own dtype,
 * or the reference backend's on inputs rounded as a reduced-precision variant rounds them,
 * once the reference has agreed with NumPy on the unrounded case. */
typedef struct expectations {
    const fc_case *kase;
    const fc_fixture *fx;
    double *o[3], *lse[3];
    int oracle_checked;
    char problem[700]; /* why reduced-precision columns have no expected output */
} expectations;

static int expected_for(expectations *e, flashport_precision prec, flashport_context **reference,
                        const double **o, const double **lse) {
    int cls = fc_needs_recompute(e->kase, prec) ? (int)prec : 0;
    if (cls && !e->oracle_checked) {
        e->oracle_checked = 1;
        if (!*reference && flashport_context_create("reference", reference) != FLASHPORT_OK) {
            snprintf(e->problem, sizeof e->problem, "no reference context: %.600s",
                     flashport_last_error());
        } else {
            fc_result check;
            fc_check(*reference, NULL, e->kase, e->fx, e->fx->data[FC_O], e->fx->data[FC_LSE],
                     fc_tolerance_for(e->kase, FLASHPORT_PRECISION_NATIVE), &check);
            if (check.verdict != FC_PASS)
                snprintf(e->problem, sizeof e->problem,
                         "the reference backend disagrees with NumPy here (%.600s)", check.detail);
        }
    }
    if (cls && !e->problem[0] && !e->o[cls]) {
        char msg[640];
        e->o[cls] = malloc(e->fx->count[FC_O] * sizeof(double) + 1);
        e->lse[cls] = malloc(e->fx->count[FC_LSE] * sizeof(double) + 1);
        if (!e->o[cls] || !e->lse[cls])
            snprintf(e->problem, sizeof e->problem, "out of host memory");
        else if (!fc_recompute(*reference, e->kase, e->fx, prec, e->o[cls], e->lse[cls], msg,
                               sizeof msg))
            snprintf(e->problem, sizeof e->problem, "%s", msg);
    }
    if (cls && e->problem[0]) return 0;
    *o = cls ? e->o[cls] : e->fx->data[FC_O];
    *lse = cls ? e->lse[cls] : e->fx->data[FC_LSE];
    return 1;
}

/* Runs one case on every column; row receives one result per column. */
static void run_case(const fc_case *kase, const fc_fixture *fx, const plan_set *s,
                     flashport_context **reference, fc_result *row, int *done, int total) {
    expectations e;
    memset(&e, 0, sizeof e);
    e.kase = kase;
    e.fx = fx;
    for (int i = 0; i < s->n_columns; i++) {
        const fc_column *col = &s->columns[i];
        const double *exp_o, *exp_lse;
        if (expected_for(&e, col->precision, reference, &exp_o, &exp_lse)) {
            fc_check(s->targets[s->target_of[i]].ctx, col->kernel, kase, fx, exp_o, exp_lse,
                     fc_tolerance_for(kase, col->precision), &row[i]);
        } else {
            memset(&row[i], 0, sizeof row[i]);
            row[i].verdict = FC_FAIL;
            snprintf(row[i].detail, sizeof row[i].detail, "no expected output: %.600s", e.problem);
        }
        ++*done;
        fprintf(stderr, "[%*d/%d] %-24s %s/%s: %s (%s)\n", total >= 1000 ? 4 : 3, *done, total,
                kase->name, col->backend, col->kernel, fc_verdict_name(row[i].verdict),
                row[i].detail);
    }
    for (int k = 1; k < 3; k++) {
        free(e.o[k]);
        free(e.lse[k]);
    }
}

int main(int argc, char **argv) {
    options o;
    memset(&o, 0, sizeof o);
    o.data = FC_DEFAULT_DATA_DIR;
    const cli_option opts[] = {
        {"data", CLI_STRING, &o.data, "DIR", "fixture folder (default: the build tree's)", NULL},
        {"backend", CLI_STRING, &o.backends, "LIST",
         "backend entries name[:device] (default: every available)", NULL},
        {"kernel", CLI_STRING, &o.kernels, "LIST", "only these kernel variants", NULL},
        {"cases", CLI_STRING, &o.cases, "PATTERNS", "only cases matching a pattern", NULL},
        {"json", CLI_STRING, &o.json, "FILE", "write every result as JSON", NULL},
        {"junit", CLI_STRING, &o.junit, "FILE", "write a JUnit XML report", NULL},
        {"list", CLI_FLAG, &o.list, NULL, "print the selected cases and columns, run nothing",
         NULL},
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

    plan_set s;
    memset(&s, 0, sizeof s);
    fc_result *results = NULL;
    flashport_context *reference = NULL;
    int rc = build_columns(&o, &s);
    if (rc != CLI_EXIT_OK) goto done;

    if (o.list) {
        for (int c = 0; c < m.n_cases; c++) {
            if (!selected[c]) continue;
            char words[128];
            fc_case_feature_words(&m.cases[c], words, sizeof words);
            printf("case %s features=%s\n", m.cases[c].name, words);
        }
        for (int i = 0; i < s.n_columns; i++)
            printf("column %s/%s (%s)\n", s.columns[i].backend, s.columns[i].kernel,
                   fc_precision_name(s.columns[i].precision));
        if (s.not_run[0]) printf("not run:\n%s", s.not_run);
        goto done;
    }

    results = calloc((size_t)m.n_cases * (size_t)s.n_columns, sizeof *results);
    if (!results) {
        fprintf(stderr, "%s: out of memory\n", tool);
        rc = CLI_EXIT_LIBRARY;
        goto done;
    }
    int total = n_selected * s.n_columns, done_count = 0;
    for (int c = 0; c < m.n_cases; c++) {
        if (!selected[c]) continue;
        fc_fixture fx;
        if (!fc_fixture_load(o.data, &m.cases[c], &fx, msg, sizeof msg)) {
            fprintf(stderr, "%s: %s\n", tool, msg);
            rc = CLI_EXIT_INPUT;
            goto done;
        }
        run_case(&m.cases[c], &fx, &s, &reference, &results[(size_t)c * (size_t)s.n_columns],
                 &done_count, total);
        fc_fixture_free(&fx);
    }

    fc_run run = {o.data, &m, selected, s.columns, s.n_columns, results, s.not_run};
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
    plan_set_free(&s);
    flashport_context_destroy(reference);
    free(results);
    free(selected);
    fc_manifest_free(&m);
    return rc;
}
