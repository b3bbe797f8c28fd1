/*
 * What every flashport tool needs from its command line and its reports: typed long options
 * ("--name value" or "--name=value") with errors that name the option, a generated --help
 * listing, and a tiny streaming JSON writer.
 */
#ifndef FP_TOOLS_CLI_H
#define FP_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>

/* Exit codes shared by the tools (each tool's --help lists the ones it uses). */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAILURE = 1, /* the work ran and found a problem (conformance failures) */
    CLI_EXIT_USAGE = 2,   /* bad command line */
    CLI_EXIT_INPUT = 3,   /* input files missing, unreadable or malformed */
    CLI_EXIT_LIBRARY = 4  /* flashport reported an error (backend unavailable, unsupported, ...) */
};

typedef enum cli_kind {
    CLI_FLAG,   /* int *: set to 1 when present; takes no value */
    CLI_STRING, /* const char **: points into argv */
    CLI_INT,    /* int64_t *: decimal integer */
    CLI_DOUBLE, /* double *: finite number */
    CLI_CHOICE  /* int *: index of the value in choices (a NULL-terminated list) */
} cli_kind;

typedef struct cli_option {
    const char *name;  /* without the leading "--" */
    cli_kind kind;
    void *target;
    const char *value_name; /* shown in --help, e.g. "FILE" */
    const char *help;
    const char *const *choices; /* CLI_CHOICE only */
} cli_option;

typedef enum cli_result { CLI_PARSED = 0, CLI_HELP = 1, CLI_ERROR = 2 } cli_result;

/* Parses argv[1..argc-1] against opts. "--help" or "-h" returns CLI_HELP. Any other problem
 * (unknown option, missing or malformed value, positional argument) prints one line on stderr
 * naming the tool and the option and returns CLI_ERROR. */
cli_result cli_parse(const char *tool, int argc, char **argv, const cli_option *opts, int n_opts);

/* Parses exactly n comma-separated decimal integers ("4095,0" for n = 2) into out; returns 0,
 * leaving out alone, when s is anything else. For options that take a pair or a list. */
int cli_parse_ints(const char *s, int64_t *out, int n);

/* Prints "usage: <tool> <synopsis>", the summary, every option with its help, then epilogue. */
void cli_print_help(FILE *f, const char *tool, const char *synopsis, const char *summary,
                    const cli_option *opts, int n_opts, const char *epilogue);

/* ------------------------------------------------------------------------------------------
 * JSON writer: call cli_json_key before each value inside an object; commas, quoting and
 * escaping are handled. Non-finite doubles are written as null (JSON has no NaN).
 * ---------------------------------------------------------------------------------------- */
#define CLI_JSON_MAX_DEPTH 32

typedef struct cli_json {
    FILE *f;
    int depth;
    int count[CLI_JSON_MAX_DEPTH]; /* values written so far at each level */
    int after_key;
} cli_json;

void cli_json_init(cli_json *j, FILE *f);
void cli_json_begin_object(cli_json *j);
void cli_json_end_object(cli_json *j);
void cli_json_begin_array(cli_json *j);
void cli_json_end_array(cli_json *j);
void cli_json_key(cli_json *j, const char *key);
void cli_json_string(cli_json *j, const char *s);
void cli_json_int(cli_json *j, int64_t v);
void cli_json_double(cli_json *j, double v);
void cli_json_bool(cli_json *j, int v);
void cli_json_null(cli_json *j);

/* Writes s escaped for XML text and attributes (used by JUnit reports). */
void cli_xml_escape(FILE *f, const char *s);

#endif /* FP_TOOLS_CLI_H */
