/*
 * The program cache driven directly: a program that does not compile fails with the
 * compiler's log in the message and leaves nothing on disk; one that compiles is written once
 * and then reused from this context's programs.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "program_cache.h"

static int failures, checks;
static char last_message[8192];

#define CHECK(cond)                                                                  \
    do {                                                                             \
        checks++;                                                                    \
        if (!(cond)) {                                                               \
            failures++;                                                              \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

static flashport_status record_error(flashport_status status, const char *backend,
                                     const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(last_message, sizeof last_message, "%s: ", backend);
    vsnprintf(last_message + n, sizeof last_message - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

static void print_log(int level, const char *backend, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[%d %s] ", level, backend);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strncmp(e->d_name, "opencl-", 7) == 0) n++;
    closedir(d);
    return n;
}

static void remove_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "opencl-", 7) != 0) continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        remove(path);
    }
    closedir(d);
}

int main(void) {
    static const fp_host host = {FP_BACKEND_ABI, record_error, print_log};
    const fp_backend *backend = flashport_backend_entry(&host);
    char reason[512] = "";
    int devices = backend->probe(reason, sizeof reason);
    CHECK(devices > 0);
    if (devices <= 0) {
        fprintf(stderr, "no OpenCL device: %s\n", reason);
        return 1;
    }
    char dir[] = "/tmp/flashport-opencl-cache-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    setenv("FLASHPORT_CACHE_DIR", dir, 1);

    const fp_device_ops *ops = NULL;
    void *handle = NULL;
    CHECK(backend->open(0, &ops, &handle) == FLASHPORT_OK);
    if (!handle) return 1;
    fp_cl_dev *dev = handle;

    static const char broken[] =
        "__kernel void broken(__global float *x) { x[0] = no_such_identifier; }\n";
    cl_kernel kernel = NULL;
    flashport_status st = fp_cl_get_kernel(dev, broken, "-cl-std=CL1.2", "broken", &kernel);
    CHECK(st == FLASHPORT_ERROR_DEVICE);
    CHECK(strstr(last_message, "clBuildProgram") != NULL);
    CHECK(strstr(last_message, "no_such_identifier") != NULL); /* from the compiler's log */
    CHECK(count_files(dir) == 0);
    printf("build failure message:\n%s\n", last_message);

    static const char fine[] = "__kernel void fine(__global float *x) { x[0] = 1.0f; }\n";
    cl_kernel first = NULL, again = NULL;
    CHECK(fp_cl_get_kernel(dev, fine, "-cl-std=CL1.2", "fine", &first) == FLASHPORT_OK);
    CHECK(count_files(dir) == 1);
    CHECK(fp_cl_get_kernel(dev, fine, "-cl-std=CL1.2", "fine", &again) == FLASHPORT_OK);
    CHECK(first != NULL && first == again);
    /* Other options are another program. */
    CHECK(fp_cl_get_kernel(dev, fine, "-cl-std=CL1.2 -DUNUSED=1", "fine", &again) == FLASHPORT_OK);
    CHECK(again != first && count_files(dir) == 2);

    ops->close(handle);
    remove_files(dir);
    rmdir(dir);
    printf("test_opencl_program_cache: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
