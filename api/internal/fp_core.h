/* Internal declarations shared by the core's source files (not by backends). */
#ifndef FP_CORE_H
#define FP_CORE_H

#include <pthread.h>

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
const char *fp_registry_names(void);                   /* "cuda, hip, ...", in registry order */
fp_registry_entry *fp_registry_get(int index);         /* probed */
fp_registry_entry *fp_registry_find(const char *name); /* probed; NULL when unknown */
int fp_variant_index(const fp_backend *b, const char *name); /* -1 when unknown */

/* a * b, or INT64_MAX when it overflows: the init and set_* helpers fill strides from any
 * sizes the caller gives, and a stride that overflowed belongs to a tensor whose size overflows
 * too, which validation then reports (SIZE_OVERFLOW, or the negative size first). */
static inline int64_t fp_mul_sat(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

/* problem.c: the v1 descriptor */
flashport_status fp_problem_check(const flashport_problem *p, const char *where);

/* attention_desc.c: the v2 descriptor, which the v1 one converts into */
void fp_problem_from_v1(const flashport_problem *p, fp_problem *out);
/* Copies the caller's struct (checking struct_size) into a full fp_problem. */
flashport_status fp_desc_load(const flashport_attention_desc *d, fp_problem *out,
                              const char *where);
flashport_status fp_desc_check(const fp_problem *p, const char *where);
/* Resolves scale 0 and spells the window as backends see it (fp_backend.h). */
void fp_desc_normalise(fp_problem *p);

/* Every buffer of a call, in the order of flashport_attention_args and fp_args. */
typedef enum fp_slot {
    FP_SLOT_Q,
    FP_SLOT_K,
    FP_SLOT_V,
    FP_SLOT_O,
    FP_SLOT_LSE,
    FP_SLOT_SINKS,
    FP_SLOT_ALIBI,
    FP_SLOT_BIAS,
    FP_SLOT_CU_SEQLENS_Q,
    FP_SLOT_CU_SEQLENS_KV,
    FP_SLOT_SEQLENS_KV,
    FP_SLOT_BLOCK_TABLE,
    FP_SLOT_Q_DESCALE,
    FP_SLOT_K_DESCALE,
    FP_SLOT_V_DESCALE,
    FP_SLOT_DO,
    FP_SLOT_DQ,
    FP_SLOT_DK,
    FP_SLOT_DV,
    FP_SLOT_COUNT
} fp_slot;

enum { FP_SLOT_UNUSED = 0, FP_SLOT_REQUIRED = 1, FP_SLOT_OPTIONAL = 2 };
typedef struct fp_slot_use {
    int use;        /* FP_SLOT_UNUSED, _REQUIRED or _OPTIONAL for this problem and op */
    int output;     /* written by the call */
    uint64_t bytes; /* the least the buffer must hold */
    int overflow;   /* bytes does not fit in 64 bits (fp_desc_check rejects such problems) */
} fp_slot_use;
fp_slot_use fp_slot_need(const fp_problem *p, fp_op op, fp_slot slot);
const char *fp_slot_name(fp_slot slot); /* the flashport_attention_args member */

/* tables.c: cu_seqlens, seqlens_kv and block_table content against the descriptor. tables[]
 * holds host copies indexed by fp_slot (NULL where the problem has no such table). */
flashport_status fp_check_tables(const fp_problem *p, const int32_t *const tables[FP_SLOT_COUNT],
                                 const char *where);

/* context.c / selection.c */
struct flashport_context {
    fp_registry_entry *entry;
    int device;
    const fp_device_ops *ops;
    void *dev;
    char selection[2048];
    /* Held around every call into ops: a context is one queue, and backends keep per-device
     * state (built programs, scratch, timer events) that one call at a time may touch, so
     * threads sharing a context take turns (the contract in flashport.h). */
    pthread_mutex_t lock;
};

struct flashport_buffer {
    flashport_context *ctx;
    void *handle;
    size_t bytes;
    int wrapped;
};

flashport_status fp_select(const char *spec, flashport_context *ctx);
/* One backend entry of spec ("cuda", "cuda:1"), opened on the caller's queue. */
flashport_status fp_select_queue(const char *spec, void *queue, flashport_context *ctx);

#endif /* FP_CORE_H */
