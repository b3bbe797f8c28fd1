/* Wires the OpenCL backend into the flashport backend interface. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backward.h"
#include "device_context.h"
#include "devices.h"
#include "feature_args.h"
#include "host.h"
#include "kernel_list.h"
#include "peaks.h"
#include "planner.h"
#include "program_cache.h"

static cl_mem as_mem(const void *handle) { return (cl_mem)(void *)(uintptr_t)handle; }

/* ---- backend level ---------------------------------------------------------------------- */

static int cl_probe(char *reason, size_t reason_len) { return fp_cl_enumerate(reason, reason_len); }

static const char *type_name(cl_device_type t) {
    if (t & CL_DEVICE_TYPE_GPU) return "gpu";
    if (t & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
    if (t & CL_DEVICE_TYPE_CPU) return "cpu";
    return "other";
}

static flashport_status backend_device_info(int device, flashport_device_info *out) {
    const fp_cl_device_desc *d = fp_cl_device(device);
    if (!d) return fp_cl_host->error(FLASHPORT_ERROR_NO_DEVICE, FP_CL_NAME, "no device %d", device);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", d->name);
    snprintf(out->vendor, sizeof out->vendor, "%s", d->vendor);
    out->kind = (d->type & CL_DEVICE_TYPE_GPU)           ? FLASHPORT_DEVICE_GPU
                : (d->type & CL_DEVICE_TYPE_ACCELERATOR) ? FLASHPORT_DEVICE_ACCELERATOR
                                                         : FLASHPORT_DEVICE_CPU;
    out->memory_bytes = d->global_mem;
    out->compute_units = (int)d->compute_units;
    snprintf(out->details, sizeof out->details,
             "platform=%s; platform_version=%s; device_version=%s; driver=%s; type=%s; "
             "local_mem=%llu (%s); max_work_group=%zu; max_alloc=%llu; clock_mhz=%u; "
             "preferred_vector_float=%u; fp16=%s; intel_subgroups=%s; khr_subgroup_shuffle=%s",
             d->platform_name, d->platform_version, d->device_version, d->driver_version,
             type_name(d->type), (unsigned long long)d->local_mem,
             d->local_mem_dedicated ? "dedicated" : "emulated in global", d->max_work_group,
             (unsigned long long)d->max_alloc, d->clock_mhz, d->preferred_vector_float,
             d->has_fp16 ? "yes" : "no", d->has_intel_subgroups ? "yes" : "no",
             d->has_khr_subgroup_shuffle ? "yes" : "no");
    if (d->is_nvidia) {
        /* What decides whether the tensor-core kernel nv_tf32x3 can run (8.0+). */
        size_t used = strlen(out->details);
        snprintf(out->details + used, sizeof out->details - used,
                 "; nv_compute_capability=%d.%d (nv_tf32x3 %s)", d->cc_major, d->cc_minor,
                 d->cc_major >= 8 ? "eligible for f32, d <= 128" : "needs 8.0+");
    }
    return FLASHPORT_OK;
}

static flashport_status cl_find_device(const char *selector, int *device) {
    int i = fp_cl_find_device(selector);
    if (i < 0)
        return fp_cl_host->error(FLASHPORT_ERROR_NO_DEVICE, FP_CL_NAME,
                                 "no OpenCL platform or device name contains \"%s\"", selector);
    *device = i;
    return FLASHPORT_OK;
}

/* ---- device level ----------------------------------------------------------------------- */

static void release_timer_events(fp_cl_dev *dev) {
    if (dev->first_event) dev->cl->clReleaseEvent(dev->first_event);
    if (dev->last_event) dev->cl->clReleaseEvent(dev->last_event);
    dev->first_event = dev->last_event = NULL;
}

/* Releases what open or open_queue took: a queue and context created here go, the caller's stay
 * with the caller's references. The caller's queue is not waited for: kernels, programs and
 * buffers still in use by queued commands live on until those commands complete (OpenCL keeps
 * them), and the caller decides when to wait for its own work. */
static void cl_close(void *d) {
    fp_cl_dev *dev = d;
    if (!dev->borrowed_queue) dev->cl->clFinish(dev->queue);
    release_timer_events(dev);
    fp_cl_release_programs(dev);
    if (dev->workspace) dev->cl->clReleaseMemObject(dev->workspace);
    dev->cl->clReleaseCommandQueue(dev->queue);
    dev->cl->clReleaseContext(dev->context);
    free(dev);
}

static flashport_status cl_buffer_alloc(void *d, size_t bytes, void **handle) {
    fp_cl_dev *dev = d;
    if (bytes > dev->desc->max_alloc)
        return fp_cl_host->error(FLASHPORT_ERROR_OUT_OF_MEMORY, FP_CL_NAME,
                                 "clCreateBuffer: %zu bytes requested, the device allows at most "
                                 "%llu in one buffer",
                                 bytes, (unsigned long long)dev->desc->max_alloc);
    cl_int err = CL_SUCCESS;
    cl_mem mem = dev->cl->clCreateBuffer(dev->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (!mem || err != CL_SUCCESS) {
        flashport_status st = fp_cl_fail(err, "clCreateBuffer");
        return fp_cl_host->error(st, FP_CL_NAME, "clCreateBuffer: %s, %zu bytes requested",
                                 fp_cl_error_name(err), bytes);
    }
    *handle = mem;
    return FLASHPORT_OK;
}

static void cl_buffer_free(void *d, void *handle) {
    fp_cl_dev *dev = d;
    dev->cl->clReleaseMemObject(as_mem(handle));
}

static flashport_status cl_upload(void *d, void *handle, size_t offset, const void *src,
                                  size_t bytes) {
    fp_cl_dev *dev = d;
    cl_int err = dev->cl->clEnqueueWriteBuffer(dev->queue, as_mem(handle), CL_TRUE, offset, bytes,
                                               src, 0, NULL, NULL);
    return err == CL_SUCCESS ? FLASHPORT_OK : fp_cl_fail(err, "clEnqueueWriteBuffer");
}

static flashport_status cl_download(void *d, const void *handle, size_t offset, void *dst,
                                    size_t bytes) {
    fp_cl_dev *dev = d;
    cl_int err = dev->cl->clEnqueueReadBuffer(dev->queue, as_mem(handle), CL_TRUE, offset, bytes,
                                              dst, 0, NULL, NULL);
    return err == CL_SUCCESS ? FLASHPORT_OK : fp_cl_fail(err, "clEnqueueReadBuffer");
}

/* A wrapped cl_mem must belong to this context; the wrapper holds a reference. */
static flashport_status cl_buffer_wrap(void *d, void *native, size_t bytes, void **handle) {
    fp_cl_dev *dev = d;
    cl_mem mem = native;
    cl_context context = NULL;
    size_t size = 0;
    cl_int err = dev->cl->clGetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof context, &context, NULL);
    if (err == CL_SUCCESS)
        err = dev->cl->clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (err != CL_SUCCESS) return fp_cl_fail(err, "clGetMemObjectInfo (wrapped buffer)");
    if (context != dev->context)
        return fp_cl_host->error(FLASHPORT_ERROR_MISMATCH, FP_CL_NAME,
                                 "the wrapped cl_mem belongs to another OpenCL context");
    if (size < bytes)
        return fp_cl_host->error(FLASHPORT_ERROR_MISMATCH, FP_CL_NAME,
                                 "the wrapped cl_mem holds %zu bytes, %zu were declared", size,
                                 bytes);
    err = dev->cl->clRetainMemObject(mem);
    if (err != CL_SUCCESS) return fp_cl_fail(err, "clRetainMemObject");
    *handle = mem;
    return FLASHPORT_OK;
}

static void cl_buffer_unwrap(void *d, void *handle) { cl_buffer_free(d, handle); }

static flashport_status cl_plan(void *d, const fp_problem *p, fp_op op, int forced, fp_plan *out) {
    if (p->seq_q > INT_MAX || p->seq_kv > INT_MAX || p->head_dim > INT_MAX ||
        p->heads_q > INT_MAX || p->batch > INT_MAX) {
        memset(out, 0, sizeof *out);
        snprintf(out->reason, sizeof out->reason,
                 "sizes above 2^31-1 are not supported by the OpenCL kernels");
        return fp_cl_host->error(FLASHPORT_ERROR_UNSUPPORTED, FP_CL_NAME, "%s", out->reason);
    }
    return op == FP_OP_BACKWARD ? fp_cl_plan_backward(d, p, out) : fp_cl_plan(d, p, forced, out);
}

flashport_status fp_cl_launch(fp_cl_dev *dev, cl_kernel kernel, const size_t global[3],
                              const size_t local[3]) {
    cl_event event = NULL;
    cl_int err = dev->cl->clEnqueueNDRangeKernel(dev->queue, kernel, 3, NULL, global, local, 0,
                                                 NULL, &event);
    if (err != CL_SUCCESS) return fp_cl_fail(err, "clEnqueueNDRangeKernel");
    if (dev->timers_running) {
        if (!dev->first_event) {
            dev->first_event = event;
        } else {
            if (dev->last_event) dev->cl->clReleaseEvent(dev->last_event);
            dev->last_event = event;
        }
    } else {
        dev->cl->clReleaseEvent(event);
    }
    return FLASHPORT_OK;
}

static flashport_status cl_run(void *d, const fp_plan *plan, const fp_problem *p,
                               const fp_args *a) {
    fp_cl_dev *dev = d;
    if (plan->op == FP_OP_BACKWARD) return fp_cl_backward_run(dev, plan, p, a);
    const fp_cl_api *cl = dev->cl;
    const fp_cl_kernel *variant = fp_cl_kernel_at(plan->variant);
    if (!variant)
        return fp_cl_host->error(FLASHPORT_ERROR_INTERNAL, FP_CL_NAME, "run: no variant %d",
                                 plan->variant);
    fp_cl_kernel_params params;
    memcpy(&params, plan->kernel_params.bytes, sizeof params);
    char options[512];
    variant->options(dev->desc, &params, p, options, sizeof options);
    const fp_cl_launch_shape shape = variant->shape(&params, p);
    const size_t threads = shape.threads, rows = shape.rows;
    cl_int slices = shape.slices;
    cl_kernel kernel = NULL;
    flashport_status st =
        fp_cl_get_kernel(dev, variant->source, options, variant->entry_point, &kernel);
    if (st != FLASHPORT_OK) return st;

    size_t kernel_limit = 0;
    cl_int err = cl->clGetKernelWorkGroupInfo(kernel, dev->desc->id, CL_KERNEL_WORK_GROUP_SIZE,
                                              sizeof kernel_limit, &kernel_limit, NULL);
    if (err != CL_SUCCESS) return fp_cl_fail(err, "clGetKernelWorkGroupInfo");
    if (kernel_limit < threads)
        return fp_cl_host->error(FLASHPORT_ERROR_UNSUPPORTED, FP_CL_NAME,
                                 "the compiled kernel allows %zu work-items per group, the tile "
                                 "needs %zu (try a smaller FLASHPORT_OPENCL_TILE)",
                                 kernel_limit, threads);

    /* Every kernel takes these arguments first (kernel_table.h). */
    cl_mem q = as_mem(a->q), k = as_mem(a->k), v = as_mem(a->v), o = as_mem(a->o);
    cl_mem lse = as_mem(a->lse);
    cl_int has_lse = lse != NULL;
    cl_int nq = (cl_int)p->seq_q, nkv = (cl_int)p->seq_kv, dim = (cl_int)p->head_dim;
    cl_int heads_q = (cl_int)p->heads_q, group = (cl_int)(p->heads_q / p->heads_kv);
    cl_int causal = p->causal != 0;
    cl_float q_sign = p->scale < 0.0f ? -1.0f : 1.0f;
    cl_float scale_log2 = (cl_float)(fabs((double)p->scale) * 1.4426950408889634);
    cl_long strides[12] = {p->q.batch, p->q.head, p->q.seq, p->k.batch, p->k.head, p->k.seq,
                           p->v.batch, p->v.head, p->v.seq, p->o.batch, p->o.head, p->o.seq};
    struct {
        size_t size;
        const void *value;
    } args[15 + 12] = {{sizeof q, &q},
                       {sizeof k, &k},
                       {sizeof v, &v},
                       {sizeof o, &o},
                       {sizeof lse, &lse},
                       {sizeof has_lse, &has_lse},
                       {sizeof nq, &nq},
                       {sizeof nkv, &nkv},
                       {sizeof dim, &dim},
                       {sizeof heads_q, &heads_q},
                       {sizeof group, &group},
                       {sizeof slices, &slices},
                       {sizeof causal, &causal},
                       {sizeof q_sign, &q_sign},
                       {sizeof scale_log2, &scale_log2}};
    for (int i = 0; i < 12; i++) {
        args[15 + i].size = sizeof strides[i];
        args[15 + i].value = &strides[i];
    }
    for (cl_uint i = 0; i < 27; i++) {
        err = cl->clSetKernelArg(kernel, i, args[i].size, args[i].value);
        if (err != CL_SUCCESS) return fp_cl_fail(err, "clSetKernelArg");
    }
    /* Kernels that implement features take their arguments next (feature_args.h). */
    if (variant->info.features != FP_FEATURES_NONE) {
        st = fp_cl_set_feature_args(cl, kernel, 27, p, a);
        if (st != FLASHPORT_OK) return st;
    }
    size_t tiles = ((size_t)p->seq_q + rows - 1) / rows;
    size_t global[3] = {tiles * threads, (size_t)p->heads_q, (size_t)p->batch * (size_t)slices};
    size_t local[3] = {threads, 1, 1};
    return fp_cl_launch(dev, kernel, global, local);
}

static flashport_status cl_synchronize(void *d) {
    fp_cl_dev *dev = d;
    cl_int err = dev->cl->clFinish(dev->queue);
    return err == CL_SUCCESS ? FLASHPORT_OK : fp_cl_fail(err, "clFinish");
}

/* Timers read the profiling stamps of the kernels queued while they run: from the start of
 * the first to the end of the last. Overlapping timers share those kernels. */
static flashport_status cl_timer_start(void *d, void **timer) {
    fp_cl_dev *dev = d;
    if (dev->timers_running == 0) release_timer_events(dev);
    dev->timers_running++;
    *timer = dev;
    return FLASHPORT_OK;
}

static flashport_status cl_timer_stop(void *d, void *timer, double *ms) {
    fp_cl_dev *dev = d;
    (void)timer;
    const fp_cl_api *cl = dev->cl;
    flashport_status st = FLASHPORT_OK;
    cl_int err = cl->clFinish(dev->queue);
    *ms = 0.0;
    if (err != CL_SUCCESS) {
        st = fp_cl_fail(err, "clFinish");
    } else if (dev->first_event) {
        cl_ulong start = 0, end = 0;
        cl_event last = dev->last_event ? dev->last_event : dev->first_event;
        err = cl->clGetEventProfilingInfo(dev->first_event, CL_PROFILING_COMMAND_START,
                                          sizeof start, &start, NULL);
        if (err == CL_SUCCESS)
            err =
                cl->clGetEventProfilingInfo(last, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL);
        if (err != CL_SUCCESS)
            st = fp_cl_fail(err, "clGetEventProfilingInfo");
        else
            *ms = end > start ? (double)(end - start) * 1e-6 : 0.0;
    }
    if (dev->timers_running > 0 && --dev->timers_running == 0) release_timer_events(dev);
    return st;
}

static flashport_status cl_measure_peaks(void *d, flashport_peaks *out) {
    return fp_cl_measure_peaks(d, out);
}

static flashport_status cl_measure_peaks_unprofiled(void *d, flashport_peaks *out) {
    (void)d;
    (void)out;
    return fp_cl_host->error(FLASHPORT_ERROR_UNSUPPORTED, FP_CL_NAME,
                             "the peak micro-benchmarks are timed by OpenCL profiling, and the "
                             "caller's queue was created without CL_QUEUE_PROFILING_ENABLE");
}

#define FP_CL_DEVICE_OPS(timer_start_fn, timer_stop_fn, measure_peaks_fn)                          \
    {                                                                                              \
        .close = cl_close, .buffer_alloc = cl_buffer_alloc, .buffer_free = cl_buffer_free,         \
        .buffer_upload = cl_upload, .buffer_download = cl_download, .buffer_wrap = cl_buffer_wrap, \
        .buffer_unwrap = cl_buffer_unwrap, .plan = cl_plan, .run = cl_run,                         \
        .synchronize = cl_synchronize, .timer_start = timer_start_fn, .timer_stop = timer_stop_fn, \
        .measure_peaks = measure_peaks_fn,                                                         \
    }

static const fp_device_ops device_ops =
    FP_CL_DEVICE_OPS(cl_timer_start, cl_timer_stop, cl_measure_peaks);
/* A caller's queue without profiling gives no kernel timestamps: without device timers the core
 * times with the host's clock around clFinish. */
static const fp_device_ops unprofiled_ops =
    FP_CL_DEVICE_OPS(NULL, NULL, cl_measure_peaks_unprofiled);

static flashport_status cl_open(int device, const fp_device_ops **ops, void **out) {
    const fp_cl_device_desc *desc = fp_cl_device(device);
    if (!desc)
        return fp_cl_host->error(FLASHPORT_ERROR_NO_DEVICE, FP_CL_NAME, "no device %d", device);
    fp_cl_dev *dev = calloc(1, sizeof *dev);
    if (!dev)
        return fp_cl_host->error(FLASHPORT_ERROR_OUT_OF_MEMORY, FP_CL_NAME,
                                 "out of host memory opening device %d", device);
    dev->cl = fp_cl_load(NULL, 0);
    dev->desc = desc;
    cl_int err = CL_SUCCESS;
    dev->context = dev->cl->clCreateContext(NULL, 1, &desc->id, NULL, NULL, &err);
    if (!dev->context || err != CL_SUCCESS) {
        free(dev);
        return fp_cl_fail(err, "clCreateContext");
    }
    dev->queue =
        dev->cl->clCreateCommandQueue(dev->context, desc->id, CL_QUEUE_PROFILING_ENABLE, &err);
    if (!dev->queue || err != CL_SUCCESS) {
        dev->cl->clReleaseContext(dev->context);
        free(dev);
        return fp_cl_fail(err, "clCreateCommandQueue");
    }
    *ops = &device_ops;
    *out = dev;
    return FLASHPORT_OK;
}

/* The caller's queue, its context and its device, found by asking the queue: programs are built
 * for that context and device, and buffers are created in that context. */
static flashport_status cl_open_queue(int *device, void *queue, const fp_device_ops **ops,
                                      void **out) {
    if (!queue)
        return fp_cl_host->error(FLASHPORT_ERROR_INVALID_ARGUMENT, FP_CL_NAME,
                                 "the queue is NULL: OpenCL has no default queue");
    const fp_cl_api *cl = fp_cl_load(NULL, 0);
    cl_command_queue q = queue;
    cl_context context = NULL;
    cl_device_id id = NULL;
    cl_command_queue_properties props = 0;
    cl_int err = cl->clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof context, &context, NULL);
    if (err == CL_SUCCESS)
        err = cl->clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof id, &id, NULL);
    if (err == CL_SUCCESS)
        err = cl->clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL);
    if (err != CL_SUCCESS) return fp_cl_fail(err, "clGetCommandQueueInfo");
    int index = -1;
    for (int i = 0; index < 0 && fp_cl_device(i); i++)
        if (fp_cl_device(i)->id == id) index = i;
    if (index < 0)
        return fp_cl_host->error(FLASHPORT_ERROR_NO_DEVICE, FP_CL_NAME,
                                 "the queue's device is none of the devices its platforms list "
                                 "(a sub-device?)");
    const fp_cl_device_desc *desc = fp_cl_device(index);
    if (*device >= 0 && *device != index)
        return fp_cl_host->error(FLASHPORT_ERROR_MISMATCH, FP_CL_NAME,
                                 "the queue is on device %d (%s), the spec names device %d (%s)",
                                 index, desc->name, *device, fp_cl_device(*device)->name);
    /* Uploads, runs and downloads follow one another by queue order alone. */
    if (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
        return fp_cl_host->error(FLASHPORT_ERROR_UNSUPPORTED, FP_CL_NAME,
                                 "the queue executes out of order; flashport needs an in-order "
                                 "queue");
    fp_cl_dev *dev = calloc(1, sizeof *dev);
    if (!dev)
        return fp_cl_host->error(FLASHPORT_ERROR_OUT_OF_MEMORY, FP_CL_NAME,
                                 "out of host memory opening device %d", index);
    err = cl->clRetainContext(context);
    if (err != CL_SUCCESS) {
        free(dev);
        return fp_cl_fail(err, "clRetainContext");
    }
    err = cl->clRetainCommandQueue(q);
    if (err != CL_SUCCESS) {
        cl->clReleaseContext(context);
        free(dev);
        return fp_cl_fail(err, "clRetainCommandQueue");
    }
    dev->cl = cl;
    dev->desc = desc;
    dev->context = context;
    dev->queue = q;
    dev->borrowed_queue = 1;
    *ops = props & CL_QUEUE_PROFILING_ENABLE ? &device_ops : &unprofiled_ops;
    *out = dev;
    *device = index;
    return FLASHPORT_OK;
}

#define FP_CL_COUNT_ONE(name) +1
static fp_variant variants[0 FP_CL_KERNELS(FP_CL_COUNT_ONE)];
#undef FP_CL_COUNT_ONE

static const fp_backend backend = {
    .abi = FP_BACKEND_ABI,
    .name = FP_CL_NAME,
    .kind = FLASHPORT_DEVICE_GPU,
    .host_memory = 0,
    .variants = variants,
    .n_variants = sizeof variants / sizeof variants[0],
    .probe = cl_probe,
    .device_info = backend_device_info,
    .find_device = cl_find_device,
    .open = cl_open,
    .open_queue = cl_open_queue,
};

FLASHPORT_API const fp_backend *flashport_backend_entry(const fp_host *host) {
    fp_cl_host = host;
    for (int i = 0; i < fp_cl_kernel_count(); i++) variants[i] = fp_cl_kernel_at(i)->info;
    return &backend;
}
