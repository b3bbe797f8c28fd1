/*
 * Planning and the attention calls of both APIs. The v1 calls convert their problem into the v2
 * descriptor and share one path: every field, buffer and host-readable table is checked here
 * before a backend sees the call, so that bad input fails with a specific status and touches
 * no output, and a feature no variant implements is declined by name.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp_core.h"

/* Member offsets of the buffers of a call, by fp_slot, in each of the three structs. */
#define SLOT_OFFSETS(T)                                                                            \
    {                                                                                              \
        offsetof(T, q), offsetof(T, k), offsetof(T, v), offsetof(T, o), offsetof(T, lse),          \
            offsetof(T, sinks), offsetof(T, alibi_slopes), offsetof(T, bias),                      \
            offsetof(T, cu_seqlens_q), offsetof(T, cu_seqlens_kv), offsetof(T, seqlens_kv),        \
            offsetof(T, block_table), offsetof(T, q_descale), offsetof(T, k_descale),              \
            offsetof(T, v_descale), offsetof(T, d_o), offsetof(T, d_q), offsetof(T, d_k),          \
            offsetof(T, d_v)                                                                       \
    }
static const size_t buffer_offsets[FP_SLOT_COUNT] = SLOT_OFFSETS(flashport_attention_args);
static const size_t host_offsets[FP_SLOT_COUNT] = SLOT_OFFSETS(flashport_attention_host_args);
static const size_t backend_offsets[FP_SLOT_COUNT] = SLOT_OFFSETS(fp_args);

static const void *member(const void *s, size_t offset) {
    const void *v;
    memcpy(&v, (const char *)s + offset, sizeof v);
    return v;
}

/* ---- planning ---- */

/* Loads, validates and normalises a descriptor, and looks up a forced kernel (-1: planner). */
static flashport_status prepare(flashport_context *ctx, fp_problem *p, int *forced,
                                const char *where) {
    if (!ctx) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "context is NULL");
    flashport_status st = fp_desc_check(p, where);
    if (st) return st;
    fp_desc_normalise(p);
    const char *kernel = p->kernel;
    const char *origin = "problem.kernel";
    if (!kernel || !kernel[0]) {
        kernel = getenv("FLASHPORT_KERNEL");
        origin = "FLASHPORT_KERNEL";
    }
    *forced = -1;
    p->kernel = NULL;
    if (kernel && kernel[0]) {
        const fp_backend *b = ctx->entry->backend;
        *forced = fp_variant_index(b, kernel);
        if (*forced < 0) {
            char known[1024] = "";
            for (int i = 0; i < b->n_variants; i++) {
                size_t used = strlen(known);
                snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
                         b->variants[i].name);
            }
            return fp_error(FLASHPORT_ERROR_UNKNOWN_KERNEL, where,
                            "%s: unknown kernel '%s' from %s (known: %s)", b->name, kernel, origin,
                            known);
        }
        p->kernel = b->variants[*forced].name;
    }
    return FLASHPORT_OK;
}

/* Names the features in `missing` ("ALiBi + paged KV cache"). */
static void feature_list(unsigned missing, char *out, size_t len) {
    out[0] = '\0';
    for (unsigned bit = 1; bit && bit <= missing; bit <<= 1)
        if (missing & bit) {
            size_t used = strlen(out);
            snprintf(out + used, len - used, "%s%s", used ? " + " : "", fp_feature_name(bit));
        }
}

/* The feature check every backend shares: the forced variant, or at least one variant, must
 * implement every feature of the problem. Writes the reason into plan->reason. */
static int features_covered(const fp_backend *b, unsigned features, int forced, fp_plan *plan) {
    char names[192];
    if (forced >= 0) {
        const unsigned missing = features & ~b->variants[forced].features;
        if (!missing) return 1;
        feature_list(missing, names, sizeof names);
        snprintf(plan->reason, sizeof plan->reason, "kernel %s does not implement %s",
                 b->variants[forced].name, names);
        return 0;
    }
    unsigned nowhere = features;
    for (int i = 0; i < b->n_variants; i++) {
        if (!(features & ~b->variants[i].features)) return 1;
        nowhere &= ~b->variants[i].features;
    }
    if (nowhere) {
        feature_list(nowhere, names, sizeof names);
        snprintf(plan->reason, sizeof plan->reason, "no %s kernel implements %s", b->name, names);
    } else {
        feature_list(features, names, sizeof names);
        snprintf(plan->reason, sizeof plan->reason, "no %s kernel implements %s together", b->name,
                 names);
    }
    return 0;
}

static flashport_status make_plan(flashport_context *ctx, const fp_problem *p, fp_op op, int forced,
                                  fp_plan *plan, const char *where) {
    memset(plan, 0, sizeof *plan);
    plan->variant = -1;
    const fp_backend *b = ctx->entry->backend;
    const char *name = ctx->entry->name;
    const unsigned features = fp_problem_features(p, op);
    flashport_status st = FLASHPORT_ERROR_UNSUPPORTED;
    if (features_covered(b, features, forced, plan)) {
        pthread_mutex_lock(&ctx->lock);
        st = ctx->ops->plan(ctx->dev, p, op, forced, plan);
        pthread_mutex_unlock(&ctx->lock);
    }
    if (st == FLASHPORT_ERROR_UNSUPPORTED)
        return fp_error(st, where, "%s: %s%s unsupported: %s", name, forced >= 0 ? "kernel " : "",
                        forced >= 0 ? p->kernel : "problem",
                        plan->reason[0] ? plan->reason : "no variant accepts it");
    if (st) return st;
    if (plan->variant < 0 || plan->variant >= b->n_variants)
        return fp_error(FLASHPORT_ERROR_INTERNAL, where, "%s planner returned variant %d", name,
                        plan->variant);
    if (features & ~b->variants[plan->variant].features)
        return fp_error(FLASHPORT_ERROR_INTERNAL, where,
                        "%s planner chose %s, which lacks a feature of the problem", name,
                        b->variants[plan->variant].name);
    plan->op = op;
    fp_log(FP_LOG_INFO, name,
           "%sB=%lld Hq=%lld Hkv=%lld Nq=%lld Nkv=%lld d=%lld %s%s: kernel %s (%s)",
           op == FP_OP_BACKWARD ? "backward " : "", (long long)p->batch, (long long)p->heads_q,
           (long long)p->heads_kv, (long long)p->seq_q, (long long)p->seq_kv,
           (long long)p->head_dim, flashport_dtype_name(p->dtype), p->causal ? " causal" : "",
           b->variants[plan->variant].name, plan->reason);
    return FLASHPORT_OK;
}

static flashport_status plan_info(flashport_context *ctx, fp_problem *p, fp_op op,
                                  flashport_plan_info *out, const char *where) {
    if (!out) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "out is NULL");
    int forced = -1;
    flashport_status st = prepare(ctx, p, &forced, where);
    if (st) return st;
    fp_plan plan;
    st = make_plan(ctx, p, op, forced, &plan, where);
    memset(out, 0, sizeof *out);
    if (st == FLASHPORT_OK)
        snprintf(out->kernel, sizeof out->kernel, "%s",
                 ctx->entry->backend->variants[plan.variant].name);
    snprintf(out->reason, sizeof out->reason, "%s", plan.reason);
    out->workspace_bytes = plan.workspace_bytes;
    return st;
}

FLASHPORT_API flashport_status flashport_plan(flashport_context *ctx, const flashport_problem *p,
                                              flashport_plan_info *out) {
    static const char *where = "flashport_plan";
    flashport_status st = fp_problem_check(p, where);
    if (st) return st;
    fp_problem d;
    fp_problem_from_v1(p, &d);
    return plan_info(ctx, &d, FP_OP_FORWARD, out, where);
}

FLASHPORT_API flashport_status flashport_attention_plan(flashport_context *ctx,
                                                        const flashport_attention_desc *desc,
                                                        flashport_plan_info *out) {
    static const char *where = "flashport_attention_plan";
    fp_problem d;
    flashport_status st = fp_desc_load(desc, &d, where);
    return st ? st : plan_info(ctx, &d, FP_OP_FORWARD, out, where);
}

FLASHPORT_API flashport_status flashport_attention_backward_plan(
    flashport_context *ctx, const flashport_attention_desc *desc, flashport_plan_info *out) {
    static const char *where = "flashport_attention_backward_plan";
    fp_problem d;
    flashport_status st = fp_desc_load(desc, &d, where);
    return st ? st : plan_info(ctx, &d, FP_OP_BACKWARD, out, where);
}

/* ---- buffers of a call ---- */

/* Checks an arguments struct's struct_size the way fp_desc_load checks the descriptor's. */
static flashport_status check_struct_size(const void *s, size_t size, size_t known,
                                          const char *what, const char *where) {
    if (!s) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "%s is NULL", what);
    if (size < known)
        return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                        "%s.struct_size is %zu; it must be sizeof the struct (%zu in this "
                        "version, the first)",
                        what, size, known);
    for (size_t i = known; i < size; i++)
        if (((const unsigned char *)s)[i])
            return fp_error(FLASHPORT_ERROR_UNSUPPORTED, where,
                            "%s has a member past byte %zu set, which this library (%s) does not "
                            "know",
                            what, known, flashport_version_string());
    return FLASHPORT_OK;
}

/* Every buffer the problem uses is present and no other: the descriptor says what is
 * computed, and a buffer it does not ask for would otherwise be silently ignored. */
static flashport_status check_presence(const fp_problem *p, fp_op op,
                                       const void *const given[FP_SLOT_COUNT], const char *where) {
    for (int s = 0; s < FP_SLOT_COUNT; s++) {
        const fp_slot_use u = fp_slot_need(p, op, (fp_slot)s);
        if (u.use == FP_SLOT_UNUSED && given[s])
            return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                            "args.%s is set, but the descriptor%s does not use it",
                            fp_slot_name((fp_slot)s),
                            op == FP_OP_BACKWARD ? "" : " (forward pass)");
        if (u.use == FP_SLOT_REQUIRED && !given[s])
            return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where,
                            "args.%s is NULL; the descriptor%s needs it", fp_slot_name((fp_slot)s),
                            op == FP_OP_BACKWARD ? " (backward pass)" : "");
    }
    return FLASHPORT_OK;
}

static int ranges_overlap(const flashport_context *ctx, const flashport_buffer *a,
                          const flashport_buffer *b) {
    if (!a || !b) return 0;
    if (a == b || a->handle == b->handle) return 1;
    if (ctx->ops->buffer_wrap) return 0; /* opaque handles (cl_mem) do not share storage */
    const char *pa = a->handle, *pb = b->handle;
    return pa < pb + b->bytes && pb < pa + a->bytes;
}

static flashport_status check_buffers(flashport_context *ctx, const fp_problem *p, fp_op op,
                                      const flashport_buffer *const bufs[FP_SLOT_COUNT],
                                      const char *where) {
    flashport_status st = check_presence(p, op, (const void *const *)bufs, where);
    if (st) return st;
    for (int s = 0; s < FP_SLOT_COUNT; s++) {
        if (!bufs[s]) continue;
        const fp_slot_use u = fp_slot_need(p, op, (fp_slot)s);
        if (bufs[s]->ctx != ctx)
            return fp_error(FLASHPORT_ERROR_MISMATCH, where, "buffer %s belongs to another context",
                            fp_slot_name((fp_slot)s));
        if (bufs[s]->bytes < u.bytes)
            return fp_error(FLASHPORT_ERROR_MISMATCH, where,
                            "buffer %s holds %zu bytes; the problem reaches %llu",
                            fp_slot_name((fp_slot)s), bufs[s]->bytes, (unsigned long long)u.bytes);
    }
    for (int out = 0; out < FP_SLOT_COUNT; out++) {
        if (!bufs[out] || !fp_slot_need(p, op, (fp_slot)out).output) continue;
        for (int other = 0; other < FP_SLOT_COUNT; other++)
            if (other != out && ranges_overlap(ctx, bufs[out], bufs[other]))
                return fp_error(FLASHPORT_ERROR_MISMATCH, where, "output %s shares storage with %s",
                                fp_slot_name((fp_slot)out), fp_slot_name((fp_slot)other));
    }
    return FLASHPORT_OK;
}

static int is_table(int s) {
    return s == FP_SLOT_CU_SEQLENS_Q || s == FP_SLOT_CU_SEQLENS_KV || s == FP_SLOT_SEQLENS_KV ||
           s == FP_SLOT_BLOCK_TABLE;
}

/* Tables in host memory are always checked; device tables only with FLASHPORT_CHECK=1, since
 * reading them back costs a synchronisation. */
static flashport_status check_buffer_tables(flashport_context *ctx, const fp_problem *p, fp_op op,
                                            const flashport_buffer *const bufs[FP_SLOT_COUNT],
                                            const char *where) {
    const int32_t *tables[FP_SLOT_COUNT] = {0};
    void *copies[FP_SLOT_COUNT] = {0};
    const char *check = getenv("FLASHPORT_CHECK");
    const int host = ctx->entry->backend->host_memory;
    flashport_status st = FLASHPORT_OK;
    for (int s = 0; s < FP_SLOT_COUNT && st == FLASHPORT_OK; s++) {
        if (!is_table(s) || !bufs[s]) continue;
        if (host) {
            tables[s] = bufs[s]->handle;
            continue;
        }
        if (!check || strcmp(check, "1") != 0) continue;
        const size_t bytes = (size_t)fp_slot_need(p, op, (fp_slot)s).bytes;
        copies[s] = malloc(bytes ? bytes : 1);
        if (!copies[s])
            st = fp_error(FLASHPORT_ERROR_OUT_OF_MEMORY, where, "cannot allocate %zu bytes", bytes);
        else if (bytes)
            st = flashport_buffer_download(bufs[s], 0, copies[s], bytes);
        tables[s] = copies[s];
    }
    if (st == FLASHPORT_OK) st = fp_check_tables(p, tables, where);
    for (int s = 0; s < FP_SLOT_COUNT; s++) free(copies[s]);
    return st;
}

/* The checked call on buffers: everything but the queueing itself. */
static flashport_status run_buffers(flashport_context *ctx, fp_problem *p, fp_op op,
                                    const flashport_buffer *const bufs[FP_SLOT_COUNT],
                                    const char *where) {
    int forced = -1;
    flashport_status st = prepare(ctx, p, &forced, where);
    if (st) return st;
    if ((st = check_buffers(ctx, p, op, bufs, where))) return st;
    if ((st = check_buffer_tables(ctx, p, op, bufs, where))) return st;
    fp_plan plan;
    if ((st = make_plan(ctx, p, op, forced, &plan, where))) return st;
    fp_args args;
    memset(&args, 0, sizeof args);
    for (int s = 0; s < FP_SLOT_COUNT; s++) {
        const void *h = bufs[s] ? bufs[s]->handle : NULL;
        memcpy((char *)&args + backend_offsets[s], &h, sizeof h);
    }
    pthread_mutex_lock(&ctx->lock);
    st = ctx->ops->run(ctx->dev, &plan, p, &args);
    pthread_mutex_unlock(&ctx->lock);
    return st;
}

/* Loads the descriptor and gathers the members of an arguments struct of either kind (both
 * start with struct_size), by fp_slot. */
static flashport_status load_call(const flashport_attention_desc *desc, const void *args,
                                  size_t known_size, const size_t offsets[FP_SLOT_COUNT],
                                  fp_problem *p, const void *members[FP_SLOT_COUNT],
                                  const char *where) {
    flashport_status st = fp_desc_load(desc, p, where);
    if (st) return st;
    size_t size = 0;
    if (args) memcpy(&size, args, sizeof size);
    if ((st = check_struct_size(args, size, known_size, "args", where))) return st;
    for (int s = 0; s < FP_SLOT_COUNT; s++) members[s] = member(args, offsets[s]);
    return FLASHPORT_OK;
}

static flashport_status run_args(flashport_context *ctx, const flashport_attention_desc *desc,
                                 const flashport_attention_args *a, fp_op op, const char *where) {
    fp_problem p;
    const void *members[FP_SLOT_COUNT];
    flashport_status st = load_call(desc, a, sizeof *a, buffer_offsets, &p, members, where);
    if (st) return st;
    const flashport_buffer *bufs[FP_SLOT_COUNT];
    for (int s = 0; s < FP_SLOT_COUNT; s++) bufs[s] = members[s];
    return run_buffers(ctx, &p, op, bufs, where);
}

FLASHPORT_API flashport_status flashport_attention_run(flashport_context *ctx,
                                                       const flashport_attention_desc *d,
                                                       const flashport_attention_args *args) {
    return run_args(ctx, d, args, FP_OP_FORWARD, "flashport_attention_run");
}

FLASHPORT_API flashport_status flashport_attention_backward(flashport_context *ctx,
                                                            const flashport_attention_desc *d,
                                                            const flashport_attention_args *args) {
    return run_args(ctx, d, args, FP_OP_BACKWARD, "flashport_attention_backward");
}

FLASHPORT_API flashport_status flashport_attention(flashport_context *ctx,
                                                   const flashport_problem *p,
                                                   const flashport_buffer *q,
                                                   const flashport_buffer *k,
                                                   const flashport_buffer *v, flashport_buffer *o,
                                                   flashport_buffer *lse) {
    static const char *where = "flashport_attention";
    flashport_status st = fp_problem_check(p, where);
    if (st) return st;
    fp_problem d;
    fp_problem_from_v1(p, &d);
    const flashport_buffer *bufs[FP_SLOT_COUNT] = {q, k, v, o, lse};
    return run_buffers(ctx, &d, FP_OP_FORWARD, bufs, where);
}

/* ---- synchronous calls on host arrays ---- */

/* Device path: copies every array in (outputs too, so that gaps in strided outputs keep the
 * caller's bytes), runs, and copies the outputs back only once everything succeeded. */
static flashport_status run_via_device(flashport_context *ctx, fp_problem *p, fp_op op,
                                       const void *const host[FP_SLOT_COUNT], const char *where) {
    flashport_buffer *bufs[FP_SLOT_COUNT] = {0};
    void *scratch[FP_SLOT_COUNT] = {0};
    size_t bytes[FP_SLOT_COUNT] = {0};
    flashport_status st = FLASHPORT_OK;
    for (int s = 0; s < FP_SLOT_COUNT && st == FLASHPORT_OK; s++) {
        if (!host[s]) continue;
        bytes[s] = (size_t)fp_slot_need(p, op, (fp_slot)s).bytes;
        st = flashport_buffer_alloc(ctx, bytes[s] ? bytes[s] : 16, &bufs[s]);
        if (st == FLASHPORT_OK && bytes[s])
            st = flashport_buffer_upload(bufs[s], 0, host[s], bytes[s]);
    }
    if (st == FLASHPORT_OK)
        st = run_buffers(ctx, p, op, (const flashport_buffer *const *)bufs, where);
    if (st == FLASHPORT_OK) st = flashport_synchronize(ctx);
    for (int s = 0; s < FP_SLOT_COUNT && st == FLASHPORT_OK; s++) {
        if (!host[s] || !bytes[s] || !fp_slot_need(p, op, (fp_slot)s).output) continue;
        scratch[s] = malloc(bytes[s]);
        st = scratch[s] ? flashport_buffer_download(bufs[s], 0, scratch[s], bytes[s])
                        : fp_error(FLASHPORT_ERROR_OUT_OF_MEMORY, where,
                                   "cannot allocate %zu host bytes", bytes[s]);
    }
    for (int s = 0; s < FP_SLOT_COUNT; s++) {
        if (st == FLASHPORT_OK && scratch[s]) memcpy((void *)host[s], scratch[s], bytes[s]);
        free(scratch[s]);
        flashport_buffer_free(bufs[s]);
    }
    return st;
}

static flashport_status run_host(flashport_context *ctx, fp_problem *p, fp_op op,
                                 const void *const host[FP_SLOT_COUNT], const char *where) {
    if (!ctx) return fp_error(FLASHPORT_ERROR_INVALID_ARGUMENT, where, "context is NULL");
    flashport_status st = fp_desc_check(p, where);
    if (st) return st;
    if ((st = check_presence(p, op, host, where))) return st;
    const int32_t *tables[FP_SLOT_COUNT] = {0};
    for (int s = 0; s < FP_SLOT_COUNT; s++)
        if (is_table(s)) tables[s] = host[s];
    if ((st = fp_check_tables(p, tables, where))) return st;
    if (!ctx->entry->backend->host_memory)
        st = run_via_device(ctx, p, op, host, where);
    else {
        /* Host-memory backends read and write the caller's arrays in place. */
        flashport_buffer wrapped[FP_SLOT_COUNT];
        const flashport_buffer *bufs[FP_SLOT_COUNT] = {0};
        for (int s = 0; s < FP_SLOT_COUNT; s++) {
            if (!host[s]) continue;
            wrapped[s] = (flashport_buffer){ctx, (void *)host[s],
                                            (size_t)fp_slot_need(p, op, (fp_slot)s).bytes, 1};
            bufs[s] = &wrapped[s];
        }
        st = run_buffers(ctx, p, op, bufs, where);
    }
    return st ? st : flashport_synchronize(ctx);
}

static flashport_status run_host_args(flashport_context *ctx, const flashport_attention_desc *desc,
                                      const flashport_attention_host_args *a, fp_op op,
                                      const char *where) {
    fp_problem p;
    const void *host[FP_SLOT_COUNT];
    flashport_status st = load_call(desc, a, sizeof *a, host_offsets, &p, host, where);
    return st ? st : run_host(ctx, &p, op, host, where);
}

FLASHPORT_API flashport_status
flashport_attention_run_host(flashport_context *ctx, const flashport_attention_desc *d,
                             const flashport_attention_host_args *args) {
    return run_host_args(ctx, d, args, FP_OP_FORWARD, "flashport_attention_run_host");
}

FLASHPORT_API flashport_status
flashport_attention_backward_host(flashport_context *ctx, const flashport_attention_desc *d,
                                  const flashport_attention_host_args *args) {
    return run_host_args(ctx, d, args, FP_OP_BACKWARD, "flashport_attention_backward_host");
}

FLASHPORT_API flashport_status flashport_attention_host(flashport_context *ctx,
                                                        const flashport_problem *p, const void *q,
                                                        const void *k, const void *v, void *o,
                                                        float *lse) {
    static const char *where = "flashport_attention_host";
    flashport_status st = fp_problem_check(p, where);
    if (st) return st;
    fp_problem d;
    fp_problem_from_v1(p, &d);
    const void *host[FP_SLOT_COUNT] = {q, k, v, o, lse};
    return run_host(ctx, &d, FP_OP_FORWARD, host, where);
}
