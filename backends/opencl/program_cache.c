/*
 * Built programs: kept per context in memory, and on disk across processes so that slow
 * compilers (PoCL compiles through LLVM) pay once. A disk entry is keyed by the source, the
 * build options, the device, the driver and the platform version; the file holds the full key
 * text and a checksum before the binary, so a hash collision, a stale or a damaged file is
 * detected and rebuilt.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host.h"
#include "program_cache.h"

struct fp_cl_program_entry {
    const char *source; /* one of the embedded sources: compared by address */
    char *options;
    char *kernel_name;
    cl_program program;
    cl_kernel kernel;
    fp_cl_program_entry *next;
};

static uint64_t fnv1a(const char *text, uint64_t h) {
    for (const unsigned char *s = (const unsigned char *)text; *s; s++) {
        h ^= *s;
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t fnv1a_bytes(const unsigned char *data, size_t len) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++) {
        h ^= data[i];
        h *= 1099511628211ull;
    }
    return h;
}

static char *dup_string(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* FLASHPORT_CACHE_DIR, else $XDG_CACHE_HOME/flashport, else ~/.cache/flashport; created if
 * missing. Returns 0 when there is no usable place (the cache is then skipped). */
static int cache_dir(char *buf, size_t len) {
    const char *env = getenv("FLASHPORT_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;
    if (env && *env)
        n = snprintf(buf, len, "%s", env);
    else if (xdg && *xdg)
        n = snprintf(buf, len, "%s/flashport", xdg);
    else if (home && *home)
        n = snprintf(buf, len, "%s/.cache/flashport", home);
    else
        return 0;
    if (n <= 0 || (size_t)n >= len) return 0;
    /* Create each missing level (mkdir -p). */
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(buf, 0755);
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
        static int warned; /* once per process: every build would repeat it */
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            fp_cl_host->log(FP_LOG_WARN, FP_CL_NAME,
                            "cannot create the program cache folder %s (%s); compiled programs "
                            "are not kept on disk",
                            buf, strerror(errno));
        return 0;
    }
    return 1;
}

static char *disk_key(const fp_cl_device_desc *d, const char *source, const char *options) {
    char hash[17];
    snprintf(hash, sizeof hash, "%016llx",
             (unsigned long long)fnv1a(source, 14695981039346656037ull));
    size_t len = strlen(d->name) + strlen(d->driver_version) + strlen(d->platform_name) +
                 strlen(d->platform_version) + strlen(options) + 128;
    char *key = malloc(len);
    if (key)
        snprintf(key, len, "flashport-opencl program 2\n%s\n%s\n%s\n%s\n%s\nsource %s\n", d->name,
                 d->driver_version, d->platform_name, d->platform_version, options, hash);
    return key;
}

static int cache_path(const char *key, char *buf, size_t len) {
    char dir[1024];
    if (!cache_dir(dir, sizeof dir)) return 0;
    int n = snprintf(buf, len, "%s/opencl-%016llx.bin", dir,
                     (unsigned long long)fnv1a(key, 14695981039346656037ull));
    return n > 0 && (size_t)n < len;
}

/* A program built from the cached binary, or NULL when there is none or it does not load. */
static cl_program load_cached(fp_cl_dev *dev, const char *key, const char *options) {
    char path[1200];
    if (!cache_path(key, path, sizeof path)) return NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    cl_program program = NULL;
    unsigned char *data = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    size_t key_len = strlen(key);
    const size_t sum_len = 17; /* 16 hex digits of the binary's checksum and a newline */
    if (size > (long)(key_len + sum_len) && fseek(f, 0, SEEK_SET) == 0 &&
        (data = malloc((size_t)size)) && fread(data, 1, (size_t)size, f) == (size_t)size &&
        memcmp(data, key, key_len) == 0) {
        const unsigned char *binary = data + key_len + sum_len;
        size_t binary_len = (size_t)size - key_len - sum_len;
        char sum[18];
        snprintf(sum, sizeof sum, "%016llx\n", (unsigned long long)fnv1a_bytes(binary, binary_len));
        if (memcmp(data + key_len, sum, sum_len) != 0) {
            fp_cl_host->log(FP_LOG_WARN, FP_CL_NAME, "cached program %s is damaged; rebuilding",
                            path);
            free(data);
            fclose(f);
            return NULL;
        }
        cl_int status = CL_SUCCESS, err = CL_SUCCESS;
        program = dev->cl->clCreateProgramWithBinary(dev->context, 1, &dev->desc->id, &binary_len,
                                                     &binary, &status, &err);
        if (program && (err != CL_SUCCESS || status != CL_SUCCESS ||
                        dev->cl->clBuildProgram(program, 1, &dev->desc->id, options, NULL, NULL) !=
                            CL_SUCCESS)) {
            dev->cl->clReleaseProgram(program);
            program = NULL;
        }
        if (!program)
            fp_cl_host->log(FP_LOG_WARN, FP_CL_NAME, "cached program %s did not load; rebuilding",
                            path);
    }
    free(data);
    fclose(f);
    return program;
}

/* The program's binary for dev's device (malloc'ed), or NULL. A program of a context with
 * several devices (a caller's context) has one binary slot per device, in the order of
 * CL_PROGRAM_DEVICES; only this device's slot is asked for. The program was built for this
 * device alone, so where the slot is empty and exactly one other is not (PoCL files the binary
 * in the first slot), that one is this build's. */
static unsigned char *program_binary(fp_cl_dev *dev, cl_program program, size_t *len) {
    const fp_cl_api *cl = dev->cl;
    cl_uint n = 0;
    if (cl->clGetProgramInfo(program, CL_PROGRAM_NUM_DEVICES, sizeof n, &n, NULL) != CL_SUCCESS ||
        n == 0)
        return NULL;
    cl_device_id *ids = calloc(n, sizeof *ids);
    size_t *sizes = calloc(n, sizeof *sizes);
    unsigned char **binaries = calloc(n, sizeof *binaries);
    cl_uint slot = n;
    if (ids && sizes && binaries &&
        cl->clGetProgramInfo(program, CL_PROGRAM_DEVICES, n * sizeof *ids, ids, NULL) ==
            CL_SUCCESS &&
        cl->clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, n * sizeof *sizes, sizes, NULL) ==
            CL_SUCCESS) {
        for (slot = 0; slot < n; slot++)
            if (ids[slot] == dev->desc->id) break;
        cl_uint filled = 0, last = n;
        for (cl_uint i = 0; i < n; i++) {
            if (sizes[i] == 0) continue;
            filled++;
            last = i;
        }
        if (slot < n && sizes[slot] == 0 && filled == 1) slot = last;
    }
    unsigned char *binary = NULL;
    if (slot < n && sizes[slot] > 0 && (binaries[slot] = malloc(sizes[slot])) &&
        cl->clGetProgramInfo(program, CL_PROGRAM_BINARIES, n * sizeof *binaries, binaries, NULL) ==
            CL_SUCCESS) {
        binary = binaries[slot];
        *len = sizes[slot];
    } else if (slot < n) {
        free(binaries[slot]);
    }
    free(ids);
    free(sizes);
    free(binaries);
    return binary;
}

static void store_cached(fp_cl_dev *dev, cl_program program, const char *key) {
    char path[1200], tmp[1300];
    size_t binary_len = 0;
    if (!cache_path(key, path, sizeof path)) {
        return;
    }
    unsigned char *binary = program_binary(dev, program, &binary_len);
    if (!binary) {
        fp_cl_host->log(FP_LOG_WARN, FP_CL_NAME, "the driver gives no program binary to cache");
        return;
    }
    /* Written under a name unique to the process and the call, and renamed, so that concurrent
     * processes and threads (contexts of their own) never read or write a partial file. */
    static unsigned writes;
    snprintf(tmp, sizeof tmp, "%s.%ld.%u.tmp", path, (long)getpid(),
             __atomic_fetch_add(&writes, 1, __ATOMIC_RELAXED));
    FILE *f = fopen(tmp, "wb");
    int ok = 0;
    if (f) {
        size_t key_len = strlen(key);
        char sum[18];
        snprintf(sum, sizeof sum, "%016llx\n", (unsigned long long)fnv1a_bytes(binary, binary_len));
        ok = fwrite(key, 1, key_len, f) == key_len && fwrite(sum, 1, 17, f) == 17 &&
             fwrite(binary, 1, binary_len, f) == binary_len;
        ok = (fclose(f) == 0) && ok;
        ok = ok && rename(tmp, path) == 0;
        if (!ok) remove(tmp);
    }
    if (!ok)
        fp_cl_host->log(FP_LOG_WARN, FP_CL_NAME, "could not write the program cache file %s: %s",
                        path, strerror(errno));
    free(binary);
}

/* The program's build log (malloc'ed, possibly empty), or NULL when it cannot be read. */
static char *build_log(fp_cl_dev *dev, cl_program program) {
    const fp_cl_api *cl = dev->cl;
    size_t log_len = 0;
    char *log = NULL;
    if (cl->clGetProgramBuildInfo(program, dev->desc->id, CL_PROGRAM_BUILD_LOG, 0, NULL,
                                  &log_len) == CL_SUCCESS &&
        (log = malloc(log_len + 1)) &&
        cl->clGetProgramBuildInfo(program, dev->desc->id, CL_PROGRAM_BUILD_LOG, log_len, log,
                                  NULL) == CL_SUCCESS)
        log[log_len] = '\0';
    else if (log)
        log[0] = '\0';
    return log;
}

static flashport_status build_from_source(fp_cl_dev *dev, const char *source,
                                          const char *given_options, cl_program *out) {
    const fp_cl_api *cl = dev->cl;
    /* Test hook (tests/README.md): FLASHPORT_TEST_OPENCL_BUILD_OPTIONS is appended to the
     * options of every build from source, so that a test can make one fail. */
    const char *hook = getenv("FLASHPORT_TEST_OPENCL_BUILD_OPTIONS");
    char options[2048];
    snprintf(options, sizeof options, "%s%s%s", given_options, hook && hook[0] ? " " : "",
             hook ? hook : "");
    cl_int err = CL_SUCCESS;
    cl_program program = cl->clCreateProgramWithSource(dev->context, 1, &source, NULL, &err);
    if (!program || err != CL_SUCCESS) return fp_cl_fail(err, "clCreateProgramWithSource");
    err = cl->clBuildProgram(program, 1, &dev->desc->id, options, NULL, NULL);
    char *log = build_log(dev, program);
    if (err != CL_SUCCESS) {
        /* Also at the info level: a caller may fall back to another kernel and not report the
         * error (the planner does for the NVIDIA tensor-core program). */
        fp_cl_host->log(FP_LOG_INFO, FP_CL_NAME,
                        "clBuildProgram: %s (options \"%s\"); compiler log:\n%s",
                        fp_cl_error_name(err), options, log ? log : "(unavailable)");
        flashport_status st =
            fp_cl_host->error(FLASHPORT_ERROR_DEVICE, FP_CL_NAME,
                              "clBuildProgram: %s (options \"%s\"); compiler log:\n%s",
                              fp_cl_error_name(err), options, log ? log : "(unavailable)");
        free(log);
        cl->clReleaseProgram(program);
        return st;
    }
    /* A successful build's log says how the compiler fared (registers and spills on NVIDIA
     * with -cl-nv-verbose). */
    size_t used = log ? strspn(log, " \t\r\n") : 0;
    if (log && log[used])
        fp_cl_host->log(FP_LOG_INFO, FP_CL_NAME, "built with \"%s\":\n%s", options, log + used);
    free(log);
    *out = program;
    return FLASHPORT_OK;
}

flashport_status fp_cl_get_kernel(fp_cl_dev *dev, const char *source, const char *options,
                                  const char *kernel_name, cl_kernel *out) {
    for (fp_cl_program_entry *e = dev->programs; e; e = e->next) {
        if (e->source == source && strcmp(e->options, options) == 0 &&
            strcmp(e->kernel_name, kernel_name) == 0) {
            *out = e->kernel;
            return FLASHPORT_OK;
        }
    }
    fp_cl_program_entry *entry = calloc(1, sizeof *entry);
    char *key = disk_key(dev->desc, source, options);
    if (entry) {
        entry->options = dup_string(options);
        entry->kernel_name = dup_string(kernel_name);
    }
    if (!entry || !key || !entry->options || !entry->kernel_name) {
        if (entry) {
            free(entry->options);
            free(entry->kernel_name);
        }
        free(entry);
        free(key);
        return fp_cl_host->error(FLASHPORT_ERROR_OUT_OF_MEMORY, FP_CL_NAME,
                                 "out of host memory while building a program");
    }
    flashport_status st = FLASHPORT_OK;
    cl_program program = load_cached(dev, key, options);
    if (!program) {
        st = build_from_source(dev, source, options, &program);
        if (st == FLASHPORT_OK) store_cached(dev, program, key);
    }
    free(key);
    cl_int err = CL_SUCCESS;
    if (st == FLASHPORT_OK) {
        entry->kernel = dev->cl->clCreateKernel(program, kernel_name, &err);
        if (!entry->kernel || err != CL_SUCCESS) {
            st = fp_cl_fail(err, "clCreateKernel");
            dev->cl->clReleaseProgram(program);
        }
    }
    if (st != FLASHPORT_OK) {
        free(entry->options);
        free(entry->kernel_name);
        free(entry);
        return st;
    }
    entry->source = source;
    entry->program = program;
    entry->next = dev->programs;
    dev->programs = entry;
    *out = entry->kernel;
    return FLASHPORT_OK;
}

void fp_cl_release_programs(fp_cl_dev *dev) {
    fp_cl_program_entry *e = dev->programs;
    while (e) {
        fp_cl_program_entry *next = e->next;
        dev->cl->clReleaseKernel(e->kernel);
        dev->cl->clReleaseProgram(e->program);
        free(e->options);
        free(e->kernel_name);
        free(e);
        e = next;
    }
    dev->programs = NULL;
}
