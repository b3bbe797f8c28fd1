/*
 * Backend selection from a spec string: "name[:device]" entries separated by commas, tried in
 * order; "auto" tries every backend in registry order. The whole list is parsed before anything
 * is opened, so a typo is reported as such and never papered over by a later entry.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp_core.h"

#define MAX_ENTRIES 16

typedef struct spec_entry {
    char name[32];
    char device[128]; /* "" when not given */
} spec_entry;

static void trim(char *s) {
    size_t n = strlen(s), a = 0;
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    while (s[a] && isspace((unsigned char)s[a])) a++;
    memmove(s, s + a, n - a + 1);
}

static flashport_status parse_spec(const char *spec, const char *origin, spec_entry *out, int *n) {
    static const char *where = "flashport_context_create";
    char buf[1024];
    if (strlen(spec) >= sizeof buf)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "%s is too long", origin);
    snprintf(buf, sizeof buf, "%s", spec);
    *n = 0;
    char *p = buf;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        char item[1024];
        snprintf(item, sizeof item, "%s", p);
        trim(item);
        if (!item[0])
            return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                            "malformed %s '%s': empty entry (expected name[:device],...)", origin,
                            spec);
        if (*n == MAX_ENTRIES)
            return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                            "%s '%s' has more than %d entries", origin, spec, MAX_ENTRIES);
        spec_entry *e = &out[(*n)++];
        char *colon = strchr(item, ':');
        if (colon) *colon = '\0';
        trim(item);
        size_t len = strlen(item);
        int ok = len > 0 && len < sizeof e->name;
        for (size_t i = 0; ok && i < len; i++)
            ok = islower((unsigned char)item[i]) || isdigit((unsigned char)item[i]) || item[i] == '_';
        if (!ok)
            return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                            "malformed %s '%s': '%s' is not a backend name (expected "
                            "name[:device],...)",
                            origin, spec, item);
        memcpy(e->name, item, len + 1); /* len < sizeof e->name, checked above */
        e->device[0] = '\0';
        if (colon) {
            char *dev = colon + 1;
            trim(dev);
            if (!dev[0] || strlen(dev) >= sizeof e->device)
                return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                                "malformed %s '%s': entry '%s' has an empty or overlong device",
                                origin, spec, e->name);
            snprintf(e->device, sizeof e->device, "%s", dev);
        }
        if (strcmp(e->name, "auto") == 0 && e->device[0])
            return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                            "malformed %s '%s': 'auto' takes no device", origin, spec);
        if (strcmp(e->name, "auto") != 0 && !fp_registry_find(e->name))
            return fp_error(FLASHPORT_ERROR_UNKNOWN_BACKEND, where,
                            "%s '%s': unknown backend '%s' (known: auto, %s)", origin, spec,
                            e->name, fp_registry_names());
        if (!comma) break;
        p = comma + 1;
    }
    return FLASHPORT_OK;
}

static void note(flashport_context *ctx, const char *fmt, const char *a, const char *b) {
    size_t used = strlen(ctx->selection);
    snprintf(ctx->selection + used, sizeof ctx->selection - used, fmt, a, b);
}

/* Resolves the device part of an entry to an index; on failure writes the reason. */
static flashport_status resolve_device(fp_registry_entry *e, const char *dev, int *index,
                                       char *why, size_t why_len) {
    if (!dev[0]) {
        *index = 0;
        return FLASHPORT_OK;
    }
    char *end;
    long v = strtol(dev, &end, 10);
    if (*end == '\0') {
        if (v < 0 || v >= e->device_count) {
            snprintf(why, why_len, "device %ld requested, %d present", v, e->device_count);
            return FLASHPORT_ERROR_NO_DEVICE;
        }
        *index = (int)v;
        return FLASHPORT_OK;
    }
    if (!e->backend->find_device) {
        snprintf(why, why_len, "device '%s' is not an index and %s matches devices by index only",
                 dev, e->name);
        return FLASHPORT_ERROR_NO_DEVICE;
    }
    if (e->backend->find_device(dev, index) != FLASHPORT_OK) {
        snprintf(why, why_len, "no device matches '%s': %s", dev, flashport_last_error());
        return FLASHPORT_ERROR_NO_DEVICE;
    }
    return FLASHPORT_OK;
}

/* Tries one backend/device; on failure writes the reason and returns its status. */
static flashport_status try_open(flashport_context *ctx, fp_registry_entry *e, const char *dev,
                                 int is_auto, char *why, size_t why_len) {
    if (!e->backend || e->device_count == 0) {
        snprintf(why, why_len, "unavailable: %s", e->reason);
        return FLASHPORT_ERROR_BACKEND_UNAVAILABLE;
    }
    /* Auto wants an accelerator from the GPU modules: a CPU reached through one of them (PoCL)
     * is far slower than cpu_simd on the same cores, which comes later in the order. */
    flashport_device_info di;
    if (is_auto && e->is_module && e->backend->device_info(0, &di) == FLASHPORT_OK &&
        di.kind == FLASHPORT_DEVICE_CPU) {
        snprintf(why, why_len, "its first device (%.200s) is a CPU; auto leaves CPUs to cpu_simd",
                 di.name);
        return FLASHPORT_ERROR_BACKEND_UNAVAILABLE;
    }
    int index;
    flashport_status st = resolve_device(e, dev, &index, why, why_len);
    if (st) return st;
    st = e->backend->open(index, &ctx->ops, &ctx->dev);
    if (st) {
        snprintf(why, why_len, "open device %d failed: %s", index, flashport_last_error());
        return st;
    }
    ctx->entry = e;
    ctx->device = index;
    return FLASHPORT_OK;
}

flashport_status fp_select(const char *spec, flashport_context *ctx) {
    static const char *where = "flashport_context_create";
    const char *origin = "backend spec";
    if (!spec || !spec[0]) {
        spec = getenv("FLASHPORT_BACKEND");
        origin = "FLASHPORT_BACKEND";
        if (!spec || !spec[0]) {
            spec = "auto";
            origin = "default";
        }
    }
    spec_entry list[MAX_ENTRIES];
    int n = 0;
    flashport_status st = parse_spec(spec, origin, list, &n);
    if (st) return st;

    char failures[1536] = "";
    flashport_status last = FLASHPORT_ERROR_BACKEND_UNAVAILABLE;
    ctx->selection[0] = '\0';
    note(ctx, "%s '%s':", origin, spec);
    for (int i = 0; i < n; i++) {
        int is_auto = strcmp(list[i].name, "auto") == 0;
        for (int j = 0; j < (is_auto ? fp_registry_count() : 1); j++) {
            fp_registry_entry *e = is_auto ? fp_registry_get(j) : fp_registry_find(list[i].name);
            char why[600];
            st = try_open(ctx, e, list[i].device, is_auto, why, sizeof why);
            char label[192];
            snprintf(label, sizeof label, "%s%s%s", e->name, list[i].device[0] ? ":" : "",
                     list[i].device);
            if (st == FLASHPORT_OK) {
                char chosen[256];
                snprintf(chosen, sizeof chosen, "device %d%s", ctx->device,
                         is_auto ? " (first available in auto order)" : "");
                note(ctx, " %s chosen, %s.", label, chosen);
                fp_log(FP_LOG_INFO, "select", "%s", ctx->selection);
                return FLASHPORT_OK;
            }
            last = st;
            note(ctx, " %s: %s;", label, why);
            fp_log(is_auto ? FP_LOG_INFO : FP_LOG_WARN, "select", "%s: %s%s", label, why,
                   is_auto ? " (auto falls back to the next backend)" : "");
            size_t used = strlen(failures);
            snprintf(failures + used, sizeof failures - used, "%s%s: %s", used ? "; " : "", label,
                     why);
        }
    }
    return fp_error(n == 1 && strcmp(list[0].name, "auto") != 0 ? last
                                                                 : FLASHPORT_ERROR_BACKEND_UNAVAILABLE,
                    where, "no entry of %s '%s' can be used: %s", origin, spec, failures);
}

flashport_status fp_select_queue(const char *spec, void *queue, flashport_context *ctx) {
    static const char *where = "flashport_context_create_on_queue";
    spec_entry list[MAX_ENTRIES];
    int n = 0;
    flashport_status st = parse_spec(spec, "backend spec", list, &n);
    if (st) return st;
    if (n != 1 || strcmp(list[0].name, "auto") == 0)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                        "spec '%s' must name exactly one backend: a queue belongs to one", spec);
    fp_registry_entry *e = fp_registry_find(list[0].name);
    if (!e->backend || e->device_count == 0)
        return fp_error(FLASHPORT_ERROR_BACKEND_UNAVAILABLE, where, "%s unavailable: %s", e->name,
                        e->reason);
    if (!e->backend->open_queue)
        return fp_error(FLASHPORT_ERROR_UNSUPPORTED, where,
                        "%s has no queues to share (it runs synchronously on the host)", e->name);
    int index = -1;
    char why[600];
    if (list[0].device[0] &&
        (st = resolve_device(e, list[0].device, &index, why, sizeof why)) != FLASHPORT_OK)
        return fp_error(st, where, "%s: %s", spec, why);
    st = e->backend->open_queue(&index, queue, &ctx->ops, &ctx->dev);
    if (st) return st;
    ctx->entry = e;
    ctx->device = index;
    snprintf(ctx->selection, sizeof ctx->selection, "%s on the caller's queue", spec);
    return FLASHPORT_OK;
}
