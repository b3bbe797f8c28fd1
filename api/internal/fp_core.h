/* Internal declarations shared by the core's source files (not by backends). */
#ifndef FP_CORE_H
#define FP_CORE_H

#include "fp_backend.h"

/* errors.c */
extern const fp_host fp_core_host;
flashport_status fp_error(flashport_status status, const char *where, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void fp_log(int level, const char *where, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int fp_log_enabled(int level);

/* registry.c: the backends of backend_list.h, probed once on first use. */
typedef struct fp_registry_entry {
    const char *name;
    const fp_backend *backend; /* NULL when the module could not be loaded */
    int probed;
    int device_count;
    int is_module;
    fp_backend_entry_fn builtin_entry; /* built-in backends; NULL when left out of the build */
    char reason[512];
    char location[512];
} fp_registry_entry;

int fp_registry_count(void);
const char *fp_registry_names(void); /* "cuda, hip, ...", in registry order */
fp_registry_entry *fp_registry_get(int index); /* probed */
fp_registry_entry *fp_registry_find(const char *name); /* probed; NULL when unknown */
int fp_variant_index(const fp_backend *b, const char *name); /* -1 when unknown */

/* problem.c */
flashport_status fp_problem_check(const flashport_problem *p, const char *where);

/* context.c / selection.c */
struct flashport_context {
    fp_registry_entry *entry;
    int device;
    const fp_device_ops *ops;
    void *dev;
    char selection[2048];
};

flashport_status fp_select(const char *spec, flashport_context *ctx);

#endif /* FP_CORE_H */
