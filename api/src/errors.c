/* Status strings, the thread-local last error, and FLASHPORT_LOG. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp_core.h"

static _Thread_local char last_error[2048];
enum { MESSAGE_MAX = 1800 }; /* leaves room for the "<where>: " prefix */

FLASHPORT_API const char *flashport_status_string(flashport_status status) {
    switch (status) {
    case FLASHPORT_OK: return "ok";
    case FLASHPORT_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case FLASHPORT_ERROR_SIZE_OVERFLOW: return "size overflow";
    case FLASHPORT_ERROR_UNSUPPORTED: return "unsupported";
    case FLASHPORT_ERROR_UNKNOWN_BACKEND: return "unknown backend";
    case FLASHPORT_ERROR_UNKNOWN_KERNEL: return "unknown kernel";
    case FLASHPORT_ERROR_BACKEND_UNAVAILABLE: return "backend unavailable";
    case FLASHPORT_ERROR_NO_DEVICE: return "no such device";
    case FLASHPORT_ERROR_OUT_OF_MEMORY: return "out of memory";
    case FLASHPORT_ERROR_DEVICE: return "device error";
    case FLASHPORT_ERROR_MISMATCH: return "buffer mismatch";
    case FLASHPORT_ERROR_INTERNAL: return "internal error";
    case FLASHPORT_ERROR_BAD_TABLE: return "bad table content";
    }
    return "unknown status";
}

FLASHPORT_API const char *flashport_last_error(void) { return last_error; }

FLASHPORT_API void flashport_clear_error(void) { last_error[0] = '\0'; }

FLASHPORT_API const char *flashport_version_string(void) {
#define FP_STR2(x) #x
#define FP_STR(x)  FP_STR2(x)
    return FP_STR(FLASHPORT_VERSION_MAJOR) "." FP_STR(FLASHPORT_VERSION_MINOR) "." FP_STR(
        FLASHPORT_VERSION_PATCH);
}

FLASHPORT_API int flashport_version(void) { return FLASHPORT_VERSION; }

static flashport_status verror(flashport_status status, const char *where, const char *fmt,
                               va_list ap) {
    char msg[MESSAGE_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (where && where[0])
        snprintf(last_error, sizeof last_error, "%.200s: %s", where, msg);
    else
        snprintf(last_error, sizeof last_error, "%s", msg);
    fp_log(FP_LOG_DEBUG, "error", "%s (%s)", last_error, flashport_status_string(status));
    return status;
}

flashport_status fp_error(flashport_status status, const char *where, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    verror(status, where, fmt, ap);
    va_end(ap);
    return status;
}

/* FLASHPORT_LOG is read once per process (under pthread_once: the first calls may come from
 * several threads at once); an unknown value falls back to "warn" and says so. */
static int threshold = FP_LOG_WARN;
static pthread_once_t threshold_once = PTHREAD_ONCE_INIT;

static void read_threshold(void) {
    const char *v = getenv("FLASHPORT_LOG");
    static const char *names[] = {"error", "warn", "info", "debug"};
    if (!v || !v[0]) return;
    for (int i = 0; i < 4; i++)
        if (strcmp(v, names[i]) == 0) {
            threshold = i;
            return;
        }
    fprintf(stderr, "flashport: FLASHPORT_LOG=%s is not one of error|warn|info|debug; using warn\n",
            v);
}

static int log_threshold(void) {
    pthread_once(&threshold_once, read_threshold);
    return threshold;
}

int fp_log_enabled(int level) { return level <= log_threshold(); }

void fp_log(int level, const char *where, const char *fmt, ...) {
    if (!fp_log_enabled(level)) return;
    static const char *tags[] = {"error", "warn", "info", "debug"};
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "flashport[%s] %s: %s\n", where ? where : "core", tags[level], msg);
}

static flashport_status host_error(flashport_status status, const char *backend, const char *fmt,
                                   ...) {
    va_list ap;
    va_start(ap, fmt);
    verror(status, backend, fmt, ap);
    va_end(ap);
    return status;
}

static void host_log(int level, const char *backend, const char *fmt, ...) {
    if (!fp_log_enabled(level)) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fp_log(level, backend, "%s", msg);
}

const fp_host fp_core_host = {FP_BACKEND_ABI, host_error, host_log};
