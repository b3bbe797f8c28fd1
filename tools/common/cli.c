#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const cli_option *find_option(const cli_option *opts, int n, const char *name, size_t len) {
    for (int i = 0; i < n; i++)
        if (strlen(opts[i].name) == len && strncmp(opts[i].name, name, len) == 0) return &opts[i];
    return NULL;
}

static int set_value(const char *tool, const cli_option *o, const char *value) {
    char *end = NULL;
    switch (o->kind) {
    case CLI_FLAG: return 1;
    case CLI_STRING:
        *(const char **)o->target = value;
        return 1;
    case CLI_INT: {
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (errno || end == value || *end) {
            fprintf(stderr, "%s: --%s: '%s' is not an integer\n", tool, o->name, value);
            return 0;
        }
        *(int64_t *)o->target = (int64_t)v;
        return 1;
    }
    case CLI_DOUBLE: {
        errno = 0;
        double v = strtod(value, &end);
        if (errno || end == value || *end || !isfinite(v)) {
            fprintf(stderr, "%s: --%s: '%s' is not a finite number\n", tool, o->name, value);
            return 0;
        }
        *(double *)o->target = v;
        return 1;
    }
    case CLI_CHOICE:
        for (int i = 0; o->choices[i]; i++)
            if (strcmp(o->choices[i], value) == 0) {
                *(int *)o->target = i;
                return 1;
            }
        fprintf(stderr, "%s: --%s: '%s' is not one of", tool, o->name, value);
        for (int i = 0; o->choices[i]; i++) fprintf(stderr, "%s%s", i ? ", " : " ", o->choices[i]);
        fprintf(stderr, "\n");
        return 0;
    }
    return 0;
}

cli_result cli_parse(const char *tool, int argc, char **argv, const cli_option *opts, int n_opts) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) return CLI_HELP;
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", tool, arg);
            return CLI_ERROR;
        }
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const cli_option *o = find_option(opts, n_opts, name, len);
        if (!o) {
            fprintf(stderr, "%s: unknown option '--%.*s' (see --help)\n", tool, (int)len, name);
            return CLI_ERROR;
        }
        if (o->kind == CLI_FLAG) {
            if (eq) {
                fprintf(stderr, "%s: --%s takes no value\n", tool, o->name);
                return CLI_ERROR;
            }
            *(int *)o->target = 1;
            continue;
        }
        const char *value = eq ? eq + 1 : NULL;
        if (!value) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: --%s needs a value (%s)\n", tool, o->name,
                        o->value_name ? o->value_name : "VALUE");
                return CLI_ERROR;
            }
            value = argv[++i];
        }
        if (!set_value(tool, o, value)) return CLI_ERROR;
    }
    return CLI_PARSED;
}

int cli_parse_ints(const char *s, int64_t *out, int n) {
    int64_t v[16];
    if (n < 1 || n > 16) return 0;
    for (int i = 0; i < n; i++) {
        char *end;
        errno = 0;
        /* strtoll would skip leading spaces and accept "+"; a list item is digits only. */
        if (!(s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))) return 0;
        long long x = strtoll(s, &end, 10);
        if (errno || end == s || *end != (i + 1 < n ? ',' : '\0')) return 0;
        v[i] = x;
        s = end + 1;
    }
    memcpy(out, v, (size_t)n * sizeof *out);
    return 1;
}

void cli_print_help(FILE *f, const char *tool, const char *synopsis, const char *summary,
                    const cli_option *opts, int n_opts, const char *epilogue) {
    fprintf(f, "usage: %s %s\n\n%s\n\noptions:\n", tool, synopsis, summary);
    for (int i = 0; i < n_opts; i++) {
        char left[64];
        if (opts[i].kind == CLI_FLAG)
            snprintf(left, sizeof left, "--%s", opts[i].name);
        else
            snprintf(left, sizeof left, "--%s %s", opts[i].name,
                     opts[i].value_name ? opts[i].value_name : "VALUE");
        fprintf(f, "  %-24s %s", left, opts[i].help);
        if (opts[i].kind == CLI_CHOICE) {
            fprintf(f, " (");
            for (int c = 0; opts[i].choices[c]; c++)
                fprintf(f, "%s%s", c ? "|" : "", opts[i].choices[c]);
            fprintf(f, ")");
        }
        fprintf(f, "\n");
    }
    fprintf(f, "  %-24s %s\n", "--help", "print this help and exit");
    if (epilogue) fprintf(f, "\n%s", epilogue);
}

/* ------------------------------------------------------------------------------------------ */

void cli_json_init(cli_json *j, FILE *f) {
    memset(j, 0, sizeof *j);
    j->f = f;
}

/* Separator before a value (or a key) at the current level. */
static void json_value_prefix(cli_json *j) {
    if (j->after_key) {
        j->after_key = 0;
        return;
    }
    if (j->count[j->depth]++) fputc(',', j->f);
    if (j->depth) fprintf(j->f, "\n%*s", 2 * j->depth, "");
}

static void json_open(cli_json *j, char c) {
    json_value_prefix(j);
    fputc(c, j->f);
    if (j->depth + 1 < CLI_JSON_MAX_DEPTH) j->depth++;
    j->count[j->depth] = 0;
}

static void json_close(cli_json *j, char c) {
    int had = j->count[j->depth];
    if (j->depth) j->depth--;
    if (had) fprintf(j->f, "\n%*s", 2 * j->depth, "");
    fputc(c, j->f);
    if (j->depth == 0) fputc('\n', j->f);
}

void cli_json_begin_object(cli_json *j) { json_open(j, '{'); }
void cli_json_end_object(cli_json *j) { json_close(j, '}'); }
void cli_json_begin_array(cli_json *j) { json_open(j, '['); }
void cli_json_end_array(cli_json *j) { json_close(j, ']'); }

static void json_quoted(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20) fprintf(f, "\\u%04x", *p);
            else fputc(*p, f);
        }
    }
    fputc('"', f);
}

void cli_json_key(cli_json *j, const char *key) {
    json_value_prefix(j);
    json_quoted(j->f, key);
    fputs(": ", j->f);
    j->after_key = 1;
}

void cli_json_string(cli_json *j, const char *s) {
    json_value_prefix(j);
    json_quoted(j->f, s);
}

void cli_json_int(cli_json *j, int64_t v) {
    json_value_prefix(j);
    fprintf(j->f, "%lld", (long long)v);
}

void cli_json_double(cli_json *j, double v) {
    json_value_prefix(j);
    if (isfinite(v)) fprintf(j->f, "%.9g", v);
    else fputs("null", j->f);
}

void cli_json_bool(cli_json *j, int v) {
    json_value_prefix(j);
    fputs(v ? "true" : "false", j->f);
}

void cli_json_null(cli_json *j) {
    json_value_prefix(j);
    fputs("null", j->f);
}

void cli_xml_escape(FILE *f, const char *s) {
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            /* Control characters other than tab and newline are not allowed in XML 1.0. */
            if (*p < 0x20 && *p != '\t' && *p != '\n') fputc('?', f);
            else fputc(*p, f);
        }
    }
}
