/*
 * The registry of backends: the built-in CPU backends and the GPU modules of backend_list.h,
 * in its order, which is auto-selection's. Modules are looked up on FLASHPORT_BACKEND_PATH,
 * then beside libflashport itself; a module that is missing, fails to load or has another
 * interface version leaves its backend unavailable with the reason, never a crash.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp_core.h"

/* The built-in backends' entry functions, declared weak: one left out of the build
 * (FLASHPORT_CPU_SIMD=OFF) is a null pointer here instead of an undefined symbol. */
#define FP_MODULE_BACKEND(backend)
#define FP_BUILTIN_BACKEND(backend, entry)                                                         \
    const fp_backend *entry(const fp_host *host) __attribute__((weak, visibility("hidden")));
#include "backend_list.h"
#undef FP_MODULE_BACKEND
#undef FP_BUILTIN_BACKEND

static fp_registry_entry entries[] = {
#define FP_MODULE_BACKEND(backend)         {.name = #backend, .is_module = 1},
#define FP_BUILTIN_BACKEND(backend, entry) {.name = #backend, .builtin_entry = entry},
#include "backend_list.h"
#undef FP_MODULE_BACKEND
#undef FP_BUILTIN_BACKEND
};
enum { N_ENTRIES = sizeof entries / sizeof entries[0] };

/* ", cuda, hip, ...": every name in registry order, for the messages that list them. */
static const char name_list[] =
#define FP_MODULE_BACKEND(backend)         ", " #backend
#define FP_BUILTIN_BACKEND(backend, entry) ", " #backend
#include "backend_list.h"
#undef FP_MODULE_BACKEND
#undef FP_BUILTIN_BACKEND
    ;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

/* Folder that holds libflashport, with a trailing '/', or "" when it cannot be found. */
static void core_dir(char *out, size_t len) {
    Dl_info info;
    out[0] = '\0';
    if (dladdr((void *)&core_dir, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash) snprintf(out, len, "%.*s/", (int)(slash - info.dli_fname), info.dli_fname);
    }
}

static int try_module(fp_registry_entry *e, const char *path, char *why, size_t why_len) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, why_len, "%s", dlerror());
        return 0;
    }
    fp_backend_entry_fn fn;
    void *sym = dlsym(h, FP_BACKEND_ENTRY_SYMBOL);
    memcpy(&fn, &sym, sizeof fn);
    if (!fn) {
        snprintf(why, why_len, "%s: no symbol %s", path, FP_BACKEND_ENTRY_SYMBOL);
        dlclose(h);
        return 0;
    }
    const fp_backend *b = fn(&fp_core_host);
    if (!b || b->abi != FP_BACKEND_ABI) {
        snprintf(why, why_len, "%s: backend interface version %d, this core needs %d", path,
                 b ? b->abi : -1, FP_BACKEND_ABI);
        dlclose(h);
        return 0;
    }
    if (strcmp(b->name, e->name) != 0) {
        snprintf(why, why_len, "%s: module names itself '%s', expected '%s'", path, b->name,
                 e->name);
        dlclose(h);
        return 0;
    }
    e->backend = b; /* the module stays loaded for the life of the process */
    snprintf(e->location, sizeof e->location, "%s", path);
    return 1;
}

static void load_module(fp_registry_entry *e) {
    char file[64], path[1024], why[1024] = "";
    int found = 0;
    snprintf(file, sizeof file, "libflashport-%s.so", e->name);
    const char *env = getenv("FLASHPORT_BACKEND_PATH");
    if (env && env[0]) {
        char *dirs = strdup(env);
        for (char *save = NULL, *d = dirs ? strtok_r(dirs, ":", &save) : NULL; d;
             d = strtok_r(NULL, ":", &save)) {
            snprintf(path, sizeof path, "%s/%s", d, file);
            FILE *f = fopen(path, "rb");
            if (!f) continue;
            fclose(f);
            /* The first file found is the module, as on PATH: a broken one is reported, not
             * silently replaced by another copy further down the search. */
            found = 1;
            try_module(e, path, why, sizeof why);
            break;
        }
        free(dirs);
        if (found) {
            if (!e->backend)
                snprintf(e->reason, sizeof e->reason, "%.*s", (int)sizeof e->reason - 1, why);
            return;
        }
    }
    /* Test hook (tests/README.md): FLASHPORT_TEST_MODULES_ON_PATH_ONLY=1 leaves out the folder
     * of libflashport, where the build puts its modules, so that a test can miss one. */
    const char *hook = getenv("FLASHPORT_TEST_MODULES_ON_PATH_ONLY");
    const int path_only = hook && strcmp(hook, "1") == 0;
    char dir[900] = "";
    if (!path_only) core_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s%s", dir, file);
    FILE *f = dir[0] ? fopen(path, "rb") : NULL;
    if (f) {
        fclose(f);
        if (try_module(e, path, why, sizeof why)) return;
    } else if (path_only) {
        snprintf(
            why, sizeof why,
            "module %s not found on FLASHPORT_BACKEND_PATH (FLASHPORT_TEST_MODULES_ON_PATH_ONLY "
            "leaves out the folder of libflashport)",
            file);
    } else if (!why[0]) {
        snprintf(why, sizeof why,
                 "module %s not found beside libflashport (%.400s) or on FLASHPORT_BACKEND_PATH; "
                 "this build may not include it",
                 file, dir[0] ? dir : "unknown folder");
    }
    /* Messages longer than the reason field are cut; the start names the cause. */
    snprintf(e->reason, sizeof e->reason, "%.*s", (int)sizeof e->reason - 1, why);
}

static void probe(fp_registry_entry *e) {
    if (e->probed) return;
    e->probed = 1;
    if (!e->is_module) {
        snprintf(e->location, sizeof e->location, "built-in");
        if (e->builtin_entry) e->backend = e->builtin_entry(&fp_core_host);
        if (!e->backend) {
            char option[32]; /* the backend's CMake option: FLASHPORT_<NAME> */
            size_t n = 0;
            for (; e->name[n] && n + 1 < sizeof option; n++)
                option[n] = (char)toupper((unsigned char)e->name[n]);
            option[n] = '\0';
            snprintf(e->reason, sizeof e->reason, "not built (FLASHPORT_%s=OFF or no toolchain)",
                     option);
        }
    } else {
        load_module(e);
    }
    if (e->backend) {
        e->device_count = e->backend->probe(e->reason, sizeof e->reason);
        if (e->device_count < 0) e->device_count = 0;
        if (e->device_count > 0)
            e->reason[0] = '\0';
        else if (!e->reason[0])
            snprintf(e->reason, sizeof e->reason, "no devices");
    }
    fp_log(FP_LOG_DEBUG, "registry", "%s: %s (%d device%s)%s%s", e->name, e->location,
           e->device_count, e->device_count == 1 ? "" : "s", e->reason[0] ? ": " : "", e->reason);
}

int fp_registry_count(void) { return N_ENTRIES; }

const char *fp_registry_names(void) { return name_list + 2; }

fp_registry_entry *fp_registry_get(int index) {
    if (index < 0 || index >= N_ENTRIES) return NULL;
    pthread_mutex_lock(&registry_lock);
    probe(&entries[index]);
    pthread_mutex_unlock(&registry_lock);
    return &entries[index];
}

fp_registry_entry *fp_registry_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < N_ENTRIES; i++)
        if (strcmp(entries[i].name, name) == 0) return fp_registry_get(i);
    return NULL;
}

int fp_variant_index(const fp_backend *b, const char *name) {
    for (int i = 0; b && name && i < b->n_variants; i++)
        if (strcmp(b->variants[i].name, name) == 0) return i;
    return -1;
}

/* ---- public introspection ---- */

FLASHPORT_API int flashport_backend_count(void) { return N_ENTRIES; }

FLASHPORT_API flashport_status flashport_backend_get_info(int index, flashport_backend_info *out) {
    static const char *where = "flashport_backend_get_info";
    if (!out) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "out is NULL");
    fp_registry_entry *e = fp_registry_get(index);
    if (!e)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "index %d is outside 0..%d", index,
                        N_ENTRIES - 1);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", e->name);
    out->available = e->device_count > 0;
    out->device_count = e->device_count;
    out->is_module = e->is_module;
    snprintf(out->reason, sizeof out->reason, "%s", e->reason);
    snprintf(out->location, sizeof out->location, "%s", e->location);
    return FLASHPORT_OK;
}

FLASHPORT_API flashport_status flashport_backend_find(const char *name, int *index) {
    static const char *where = "flashport_backend_find";
    if (!name || !index) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "NULL argument");
    for (int i = 0; i < N_ENTRIES; i++)
        if (strcmp(entries[i].name, name) == 0) {
            *index = i;
            return FLASHPORT_OK;
        }
    return fp_error(FLASHPORT_ERROR_UNKNOWN_BACKEND, where, "unknown backend '%s' (known: %s)",
                    name, fp_registry_names());
}

static flashport_status backend_by_name(const char *name, const char *where, const fp_backend **b) {
    if (!name) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "backend name is NULL");
    fp_registry_entry *e = fp_registry_find(name);
    if (!e)
        return fp_error(FLASHPORT_ERROR_UNKNOWN_BACKEND, where, "unknown backend '%s' (known: %s)",
                        name, fp_registry_names());
    if (!e->backend)
        return fp_error(FLASHPORT_ERROR_BACKEND_UNAVAILABLE, where, "%s unavailable: %s", name,
                        e->reason);
    *b = e->backend;
    return FLASHPORT_OK;
}

FLASHPORT_API flashport_status flashport_device_get_info(const char *backend, int device,
                                                         flashport_device_info *out) {
    static const char *where = "flashport_device_get_info";
    const fp_backend *b = NULL;
    if (!out) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "out is NULL");
    flashport_status st = backend_by_name(backend, where, &b);
    if (st) return st;
    fp_registry_entry *e = fp_registry_find(backend);
    if (device < 0 || device >= e->device_count)
        return fp_error(FLASHPORT_ERROR_NO_DEVICE, where, "%s has %d device(s); %d requested",
                        backend, e->device_count, device);
    flashport_device_info tmp;
    memset(&tmp, 0, sizeof tmp);
    st = b->device_info(device, &tmp);
    if (st == FLASHPORT_OK) *out = tmp;
    return st;
}

FLASHPORT_API int flashport_kernel_count(const char *backend) {
    const fp_backend *b = NULL;
    if (backend_by_name(backend, "flashport_kernel_count", &b)) return -1;
    return b->n_variants;
}

FLASHPORT_API flashport_status flashport_kernel_get_info(const char *backend, int index,
                                                         flashport_kernel_info *out) {
    static const char *where = "flashport_kernel_get_info";
    const fp_backend *b = NULL;
    if (!out) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "out is NULL");
    flashport_status st = backend_by_name(backend, where, &b);
    if (st) return st;
    if (index < 0 || index >= b->n_variants)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                        "%s has %d kernel variants; index %d requested", backend, b->n_variants,
                        index);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", b->variants[index].name);
    snprintf(out->description, sizeof out->description, "%s", b->variants[index].description);
    out->precision = b->variants[index].precision;
    return FLASHPORT_OK;
}
