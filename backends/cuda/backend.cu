/*
 * The CUDA backend module: devices, buffers, streams, timers and the call into the planner's
 * chosen kernel. Written against the portability names of vendors/gpu.h, so the HIP build can
 * compile this same file. Every runtime call and launch is checked; a failure becomes a
 * flashport status whose message names the call and carries the runtime's error string.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp_backend.h"
#include "kernel_list.h"
#include "peaks.h"
#include "planner.h"

static const char NAME[] = FP_GPU_BACKEND_NAME;
static const fp_host *host;

struct gpu_device {
    int index;
    gpuStream_t stream;
    bool borrowed;       /* the caller's stream (open_queue): close leaves it alone */
    bool stream_ordered; /* the device has memory pools: allocations are queued on the stream */
    fp_gpu_device_props props = {};
    void *workspace; /* grows to the largest plan's need; released on close */
    size_t workspace_bytes;
};

struct gpu_timer {
    gpuEvent_t start, stop;
};

/* "1.5 GiB"-style size for messages. */
static void format_bytes(char *out, size_t len, size_t bytes) {
    const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(out, len, "%zu bytes", bytes);
    else
        snprintf(out, len, "%.1f %s", v, unit[u]);
}

/* Turns a runtime error into a status: "cudaMalloc: out of memory, 4.0 GiB requested". */
static flashport_status gpu_failed(gpuError_t e, const char *call, const char *detail) {
    const flashport_status st =
        e == gpuErrorMemoryAllocation ? FLASHPORT_ERROR_OUT_OF_MEMORY : FLASHPORT_ERROR_DEVICE;
    (void)gpuGetLastError(); /* clear it, so a later launch check does not report it again */
    return host->error(st, NAME, "%s%s: %s%s%s", FP_GPU_API_PREFIX, call, gpuGetErrorString(e),
                       detail ? ", " : "", detail ? detail : "");
}

#define GPU_CHECK(expr, call)                                                                      \
    do {                                                                                           \
        gpuError_t gpu_check_e = (expr);                                                           \
        if (gpu_check_e != gpuSuccess) return gpu_failed(gpu_check_e, call, NULL);                 \
    } while (0)

/* Teardown paths cannot return a status; they report through the log instead. */
static void gpu_log_failure(gpuError_t e, const char *call) {
    if (e == gpuSuccess) return;
    (void)gpuGetLastError();
    host->log(FP_LOG_WARN, NAME, "%s%s: %s", FP_GPU_API_PREFIX, call, gpuGetErrorString(e));
}

/* ---- backend level ---- */

static int probe(char *reason, size_t len) {
    int n = 0;
    const gpuError_t e = gpuGetDeviceCount(&n);
    if (e != gpuSuccess) {
        (void)gpuGetLastError();
        snprintf(reason, len, "%s unavailable: %s", NAME, gpuGetErrorString(e));
        return 0;
    }
    if (n == 0) snprintf(reason, len, "%s unavailable: the runtime reports no devices", NAME);
    return n;
}

/* Reads what the planner and kernels need through device attributes, which both vendors
 * provide under the names vendors/ maps (their property structs differ between versions). */
static flashport_status read_props(int device, fp_gpu_device_props *out) {
    static const gpuDeviceAttr_t wanted[] = {
        gpuDevAttrComputeCapabilityMajor,
        gpuDevAttrComputeCapabilityMinor,
        gpuDevAttrMultiProcessorCount,
        gpuDevAttrWarpSize,
        gpuDevAttrMaxSharedMemoryPerBlockOptin,
        gpuDevAttrMaxSharedMemoryPerMultiprocessor,
        gpuDevAttrMaxRegistersPerMultiprocessor,
        gpuDevAttrMaxThreadsPerMultiProcessor,
        gpuDevAttrL2CacheSize,
    };
    int v[sizeof wanted / sizeof wanted[0]];
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++)
        GPU_CHECK(gpuDeviceGetAttribute(&v[i], wanted[i], device), "DeviceGetAttribute");
    out->cc_major = v[0];
    out->cc_minor = v[1];
    out->sm_count = v[2];
    out->warp_size = v[3];
    out->smem_per_block_optin = (size_t)v[4];
    out->smem_per_sm = (size_t)v[5];
    out->regs_per_sm = v[6];
    out->max_threads_per_sm = v[7];
    out->l2_bytes = (size_t)v[8];
    /* The target's name, which neither vendor offers as an attribute: "sm_90", "gfx90a:...". */
    GPU_CHECK(fp_gpu_arch_name(device, out->arch, sizeof out->arch), "GetDeviceProperties");
    return FLASHPORT_OK;
}

static flashport_status device_info(int device, flashport_device_info *out) {
    gpuDeviceProp_t prop;
    fp_gpu_device_props props = {};
    flashport_status st = read_props(device, &props);
    if (st) return st;
    GPU_CHECK(gpuGetDeviceProperties(&prop, device), "GetDeviceProperties");
    int sm_clock = 0, mem_clock = 0, bus_width = 0, driver = 0, runtime = 0;
    GPU_CHECK(gpuDeviceGetAttribute(&sm_clock, gpuDevAttrClockRate, device), "DeviceGetAttribute");
    GPU_CHECK(gpuDeviceGetAttribute(&mem_clock, gpuDevAttrMemoryClockRate, device),
              "DeviceGetAttribute");
    GPU_CHECK(gpuDeviceGetAttribute(&bus_width, gpuDevAttrGlobalMemoryBusWidth, device),
              "DeviceGetAttribute");
    GPU_CHECK(gpuDriverGetVersion(&driver), "DriverGetVersion");
    GPU_CHECK(gpuRuntimeGetVersion(&runtime), "RuntimeGetVersion");

    snprintf(out->name, sizeof out->name, "%s", prop.name);
    snprintf(out->vendor, sizeof out->vendor, "%s", FP_GPU_VENDOR);
    out->kind = FLASHPORT_DEVICE_GPU;
    out->memory_bytes = (uint64_t)prop.totalGlobalMem;
    out->compute_units = props.sm_count;
    snprintf(out->details, sizeof out->details,
             "arch=%s; cc=%d.%d; sms=%d; warp_size=%d; smem_per_block_optin=%zu; smem_per_sm=%zu; "
             "regs_per_sm=%d; max_threads_per_sm=%d; l2_bytes=%zu; sm_clock_khz=%d; "
             "mem_clock_khz=%d; bus_width_bits=%d; driver=%d; runtime=%d",
             props.arch, props.cc_major, props.cc_minor, props.sm_count, props.warp_size,
             props.smem_per_block_optin, props.smem_per_sm, props.regs_per_sm,
             props.max_threads_per_sm, props.l2_bytes, sm_clock, mem_clock, bus_width, driver,
             runtime);
    return FLASHPORT_OK;
}

/* ---- device level ---- */

/* The calling thread may have another device current. Every entry point makes ours current and
 * gives the caller's back on return: a framework that shares its stream also keeps allocating on
 * its own current device. */
struct device_scope {
    int previous = -1;
    gpuError_t error;
    explicit device_scope(int device) {
        error = gpuGetDevice(&previous);
        if (error != gpuSuccess || previous == device) {
            previous = -1;
            return;
        }
        error = gpuSetDevice(device);
        if (error != gpuSuccess) previous = -1;
    }
    ~device_scope() {
        if (previous >= 0) gpu_log_failure(gpuSetDevice(previous), "SetDevice");
    }
};
#define SELECT(dev)                                                                                \
    device_scope selected_device((dev)->index);                                                    \
    GPU_CHECK(selected_device.error, "SetDevice")

/* Memory of the context: queued on its stream where the device has memory pools, so that
 * neither allocating nor freeing waits for work of other streams (gpuMalloc and gpuFree
 * synchronise the whole device). A freed block stays valid for the work queued before the free.
 * Every use of a context's memory is queued on its stream, so the order is always kept. */
static gpuError_t dev_malloc(gpu_device *dev, void **ptr, size_t bytes) {
    return dev->stream_ordered ? gpuMallocAsync(ptr, bytes, dev->stream) : gpuMalloc(ptr, bytes);
}

static gpuError_t dev_free(gpu_device *dev, void *ptr) {
    return dev->stream_ordered ? gpuFreeAsync(ptr, dev->stream) : gpuFree(ptr);
}

static const char *malloc_call(const gpu_device *dev) {
    return dev->stream_ordered ? "MallocAsync" : "Malloc";
}

static const char *free_call(const gpu_device *dev) {
    return dev->stream_ordered ? "FreeAsync" : "Free";
}

/* A borrowed stream is neither waited for nor destroyed: the caller's work on it goes on, and
 * the workspace's free is queued behind the kernels that use it. */
static void dev_close(void *d) {
    gpu_device *dev = (gpu_device *)d;
    if (!dev) return;
    device_scope selected_device(dev->index);
    gpu_log_failure(selected_device.error, "SetDevice");
    if (dev->workspace) gpu_log_failure(dev_free(dev, dev->workspace), free_call(dev));
    if (!dev->borrowed) {
        gpu_log_failure(gpuStreamSynchronize(dev->stream), "StreamSynchronize");
        gpu_log_failure(gpuStreamDestroy(dev->stream), "StreamDestroy");
    }
    free(dev);
}

static flashport_status buffer_alloc(void *d, size_t bytes, void **handle) {
    gpu_device *dev = (gpu_device *)d;
    SELECT(dev);
    const gpuError_t e = dev_malloc(dev, handle, bytes);
    if (e != gpuSuccess) {
        char size[64], detail[96];
        format_bytes(size, sizeof size, bytes);
        snprintf(detail, sizeof detail, "%s requested", size);
        *handle = NULL;
        return gpu_failed(e, malloc_call(dev), detail);
    }
    return FLASHPORT_OK;
}

static void buffer_free(void *d, void *handle) {
    gpu_device *dev = (gpu_device *)d;
    device_scope selected_device(dev->index);
    gpu_log_failure(selected_device.error, "SetDevice");
    gpu_log_failure(dev_free(dev, handle), free_call(dev));
}

/* Copies are ordered after the queued work and complete before the call returns. */
static flashport_status buffer_upload(void *d, void *handle, size_t offset, const void *src,
                                      size_t bytes) {
    gpu_device *dev = (gpu_device *)d;
    SELECT(dev);
    GPU_CHECK(
        gpuMemcpyAsync((char *)handle + offset, src, bytes, gpuMemcpyHostToDevice, dev->stream),
        "MemcpyAsync");
    GPU_CHECK(gpuStreamSynchronize(dev->stream), "StreamSynchronize");
    return FLASHPORT_OK;
}

static flashport_status buffer_download(void *d, const void *handle, size_t offset, void *dst,
                                        size_t bytes) {
    gpu_device *dev = (gpu_device *)d;
    SELECT(dev);
    GPU_CHECK(gpuMemcpyAsync(dst, (const char *)handle + offset, bytes, gpuMemcpyDeviceToHost,
                             dev->stream),
              "MemcpyAsync");
    GPU_CHECK(gpuStreamSynchronize(dev->stream), "StreamSynchronize");
    return FLASHPORT_OK;
}

static flashport_status plan(void *d, const fp_problem *p, fp_op op, int forced, fp_plan *out) {
    return fp_gpu_plan(&((gpu_device *)d)->props, p, op, forced, out);
}

static flashport_status ensure_workspace(gpu_device *dev, size_t bytes) {
    if (bytes <= dev->workspace_bytes) return FLASHPORT_OK;
    if (dev->workspace) {
        /* Queued kernels are done with the old buffer before it goes: its free is queued behind
         * them, or (without memory pools) gpuFree waits for the device. */
        GPU_CHECK(dev_free(dev, dev->workspace), free_call(dev));
        dev->workspace = NULL;
        dev->workspace_bytes = 0;
    }
    const gpuError_t e = dev_malloc(dev, &dev->workspace, bytes);
    if (e != gpuSuccess) {
        char size[64], detail[96];
        format_bytes(size, sizeof size, bytes);
        snprintf(detail, sizeof detail, "%s of workspace requested", size);
        dev->workspace = NULL;
        return gpu_failed(e, malloc_call(dev), detail);
    }
    dev->workspace_bytes = bytes;
    return FLASHPORT_OK;
}

static flashport_status run(void *d, const fp_plan *pl, const fp_problem *p, const fp_args *args) {
    gpu_device *dev = (gpu_device *)d;
    const fp_gpu_kernel *k = fp_gpu_kernel_at(pl->variant);
    if (!k) return host->error(FLASHPORT_ERROR_INTERNAL, NAME, "run: no variant %d", pl->variant);
    SELECT(dev);
    flashport_status st = ensure_workspace(dev, pl->workspace_bytes);
    if (st) return st;

    fp_gpu_kernel_params params;
    memcpy(&params, pl->kernel_params.bytes, sizeof params);
    fp_gpu_launch L;
    L.p = *p;
    L.q = args->q;
    L.k = args->k;
    L.v = args->v;
    L.o = args->o;
    L.lse = (float *)args->lse;
    L.workspace = pl->workspace_bytes ? dev->workspace : NULL;
    L.params = &params;
    L.args = args;
    L.stream = dev->stream;
    L.props = &dev->props;
    const gpuError_t e = k->launch(&L);
    if (e != gpuSuccess) {
        char call[96];
        snprintf(call, sizeof call, "LaunchKernel (%s)", k->info.name);
        return gpu_failed(e, call, NULL);
    }
    return FLASHPORT_OK;
}

static flashport_status synchronize(void *d) {
    gpu_device *dev = (gpu_device *)d;
    SELECT(dev);
    GPU_CHECK(gpuStreamSynchronize(dev->stream), "StreamSynchronize");
    return FLASHPORT_OK;
}

static flashport_status timer_start(void *d, void **timer) {
    gpu_device *dev = (gpu_device *)d;
    SELECT(dev);
    gpu_timer *t = (gpu_timer *)calloc(1, sizeof *t);
    if (!t) return host->error(FLASHPORT_ERROR_OUT_OF_MEMORY, NAME, "timer: malloc failed");
    gpuError_t e = gpuEventCreate(&t->start);
    const char *call = "EventCreate";
    if (e == gpuSuccess) e = gpuEventCreate(&t->stop);
    if (e == gpuSuccess) {
        call = "EventRecord";
        e = gpuEventRecord(t->start, dev->stream);
    }
    if (e != gpuSuccess) {
        if (t->start) (void)gpuEventDestroy(t->start);
        if (t->stop) (void)gpuEventDestroy(t->stop);
        free(t);
        return gpu_failed(e, call, NULL);
    }
    *timer = t;
    return FLASHPORT_OK;
}

static flashport_status timer_stop(void *d, void *timer, double *ms) {
    gpu_device *dev = (gpu_device *)d;
    gpu_timer *t = (gpu_timer *)timer;
    float elapsed = 0.0f;
    const char *call = "SetDevice";
    device_scope selected_device(dev->index);
    gpuError_t e = selected_device.error;
    if (e == gpuSuccess) {
        call = "EventRecord";
        e = gpuEventRecord(t->stop, dev->stream);
    }
    if (e == gpuSuccess) {
        call = "EventSynchronize";
        e = gpuEventSynchronize(t->stop);
    }
    if (e == gpuSuccess) {
        call = "EventElapsedTime";
        e = gpuEventElapsedTime(&elapsed, t->start, t->stop);
    }
    gpu_log_failure(gpuEventDestroy(t->start), "EventDestroy");
    gpu_log_failure(gpuEventDestroy(t->stop), "EventDestroy");
    free(t);
    if (e != gpuSuccess) return gpu_failed(e, call, NULL);
    *ms = elapsed;
    return FLASHPORT_OK;
}

static flashport_status measure_peaks(void *d, flashport_peaks *out) {
    gpu_device *dev = (gpu_device *)d;
    SELECT(dev);
    memset(out, 0, sizeof *out);
    const char *call = "";
    const gpuError_t e = fp_gpu_measure_peaks(dev->stream, &dev->props, out, &call);
    if (e != gpuSuccess) return gpu_failed(e, call, "while measuring peaks");
    return FLASHPORT_OK;
}

static fp_device_ops ops;

/* Opens device on the caller's stream, or on a stream of its own when borrowed is NULL. */
/* borrow: run on the caller's stream (0 is the legacy default stream) instead of a new one. */
static flashport_status open_on(int device, bool borrow, gpuStream_t borrowed,
                                const fp_device_ops **o, void **d) {
    gpu_device *dev = (gpu_device *)calloc(1, sizeof *dev);
    if (!dev) return host->error(FLASHPORT_ERROR_OUT_OF_MEMORY, NAME, "open: malloc failed");
    dev->index = device;
    int pools = 0;
    device_scope selected_device(device);
    gpuError_t e = selected_device.error;
    flashport_status st =
        e == gpuSuccess ? read_props(device, &dev->props) : gpu_failed(e, "SetDevice", NULL);
    if (!st) {
        e = gpuDeviceGetAttribute(&pools, gpuDevAttrMemoryPoolsSupported, device);
        if (e != gpuSuccess) st = gpu_failed(e, "DeviceGetAttribute", NULL);
    }
    if (!st && borrow) {
        dev->stream = borrowed;
        dev->borrowed = true;
    } else if (!st) {
        e = gpuStreamCreateWithFlags(&dev->stream, gpuStreamNonBlocking);
        if (e != gpuSuccess) st = gpu_failed(e, "StreamCreateWithFlags", NULL);
    }
    if (st) {
        free(dev);
        return st;
    }
    dev->stream_ordered = pools != 0;
    *o = &ops;
    *d = dev;
    return FLASHPORT_OK;
}

static flashport_status open_device(int device, const fp_device_ops **o, void **d) {
    return open_on(device, false, NULL, o, d);
}

/* The stream's own device, asked of the runtime: the thread's current device says nothing about
 * a stream a framework created elsewhere, and a launch on a stream of another device fails. */
static flashport_status open_queue(int *device, void *queue, const fp_device_ops **o, void **d) {
    gpuStream_t stream = (gpuStream_t)queue;
    int stream_device = -1;
    if (!stream && *device >= 0)
        stream_device = *device; /* that device's legacy default stream */
    else if (!stream)
        GPU_CHECK(gpuGetDevice(&stream_device), "GetDevice");
    else
        GPU_CHECK(fp_gpu_stream_device(stream, &stream_device), FP_GPU_STREAM_DEVICE_CALL);
    if (*device >= 0 && *device != stream_device)
        return host->error(FLASHPORT_ERROR_MISMATCH, NAME,
                           "the stream belongs to device %d, the spec names device %d",
                           stream_device, *device);
    const flashport_status st = open_on(stream_device, true, stream, o, d);
    if (!st) *device = stream_device;
    return st;
}

/* ---- module entry ---- */

#define FP_COUNT_ONE(name) +1
static fp_variant variants[0 FP_GPU_KERNELS(FP_COUNT_ONE)];
#undef FP_COUNT_ONE
static fp_backend backend;

extern "C" FLASHPORT_API const fp_backend *flashport_backend_entry(const fp_host *h) {
    host = h;
    const int n = fp_gpu_kernel_count();
    for (int i = 0; i < n; i++) variants[i] = fp_gpu_kernel_at(i)->info;

    ops.close = dev_close;
    ops.buffer_alloc = buffer_alloc;
    ops.buffer_free = buffer_free;
    ops.buffer_upload = buffer_upload;
    ops.buffer_download = buffer_download;
    ops.plan = plan;
    ops.run = run;
    ops.synchronize = synchronize;
    ops.timer_start = timer_start;
    ops.timer_stop = timer_stop;
    ops.measure_peaks = measure_peaks;

    backend.abi = FP_BACKEND_ABI;
    backend.name = NAME;
    backend.kind = FLASHPORT_DEVICE_GPU;
    backend.host_memory = 0;
    backend.variants = variants;
    backend.n_variants = n;
    backend.probe = probe;
    backend.device_info = device_info;
    backend.open = open_device;
    backend.open_queue = open_queue;
    return &backend;
}
