/*
 * The device's own ceilings: f32 FMA rate from a kernel of independent fma chains, and copy
 * bandwidth from clEnqueueCopyBuffer, both timed with OpenCL profiling.
 */
#include <stdio.h>
#include <string.h>

#include "host.h"
#include "kernel_sources.h"
#include "peaks.h"
#include "program_cache.h"

static flashport_status event_ms(fp_cl_dev *dev, cl_event event, double *ms) {
    const fp_cl_api *cl = dev->cl;
    cl_ulong start = 0, end = 0;
    cl_int err = cl->clWaitForEvents(1, &event);
    if (err == CL_SUCCESS)
        err = cl->clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_START, sizeof start, &start,
                                          NULL);
    if (err == CL_SUCCESS)
        err = cl->clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL);
    cl->clReleaseEvent(event);
    if (err != CL_SUCCESS) return fp_cl_fail(err, "clGetEventProfilingInfo");
    *ms = end > start ? (double)(end - start) * 1e-6 : 0.0;
    return FLASHPORT_OK;
}

static flashport_status fma_rate(fp_cl_dev *dev, double *tflops, size_t *items_out, int *iters_out) {
    const fp_cl_api *cl = dev->cl;
    cl_kernel kernel = NULL;
    flashport_status st = fp_cl_get_kernel(dev, fp_opencl_source_peaks, "-cl-std=CL1.2",
                                           "fma_chains", &kernel);
    if (st != FLASHPORT_OK) return st;
    size_t local = dev->desc->max_work_group < 256 ? dev->desc->max_work_group : 256;
    /* Enough work-items to fill every compute unit several times over. */
    size_t items = (size_t)dev->desc->compute_units * 2048;
    items = (items + local - 1) / local * local;
    cl_int err = CL_SUCCESS;
    cl_mem out = cl->clCreateBuffer(dev->context, CL_MEM_WRITE_ONLY, items * sizeof(float), NULL,
                                    &err);
    if (!out || err != CL_SUCCESS) return fp_cl_fail(err, "clCreateBuffer");
    cl_float a = 0.999999f, b = 1e-6f;
    cl_int iters = 64;
    double best = 0.0;
    /* Doubles the chain length until one run takes 20 ms, so that launch costs do not count. */
    for (;;) {
        err = cl->clSetKernelArg(kernel, 0, sizeof out, &out);
        if (err == CL_SUCCESS) err = cl->clSetKernelArg(kernel, 1, sizeof iters, &iters);
        if (err == CL_SUCCESS) err = cl->clSetKernelArg(kernel, 2, sizeof a, &a);
        if (err == CL_SUCCESS) err = cl->clSetKernelArg(kernel, 3, sizeof b, &b);
        if (err != CL_SUCCESS) {
            st = fp_cl_fail(err, "clSetKernelArg");
            break;
        }
        cl_event event = NULL;
        err = cl->clEnqueueNDRangeKernel(dev->queue, kernel, 1, NULL, &items, &local, 0, NULL,
                                         &event);
        if (err != CL_SUCCESS) {
            st = fp_cl_fail(err, "clEnqueueNDRangeKernel");
            break;
        }
        double ms = 0.0;
        st = event_ms(dev, event, &ms);
        if (st != FLASHPORT_OK) break;
        if (ms > 0.0) best = 2.0 * 32.0 * (double)iters * (double)items / (ms * 1e-3) / 1e12;
        if (ms >= 20.0 || iters >= (1 << 22)) break;
        iters *= 2;
    }
    cl->clReleaseMemObject(out);
    *tflops = best;
    *items_out = items;
    *iters_out = iters;
    return st;
}

static flashport_status copy_rate(fp_cl_dev *dev, double *gbps, size_t *bytes_out) {
    const fp_cl_api *cl = dev->cl;
    size_t bytes = (size_t)256 << 20;
    if (bytes > dev->desc->max_alloc) bytes = (size_t)dev->desc->max_alloc;
    if (bytes > dev->desc->global_mem / 4) bytes = (size_t)(dev->desc->global_mem / 4);
    cl_int err = CL_SUCCESS, err2 = CL_SUCCESS;
    cl_mem src = cl->clCreateBuffer(dev->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    cl_mem dst = cl->clCreateBuffer(dev->context, CL_MEM_READ_WRITE, bytes, NULL, &err2);
    flashport_status st = FLASHPORT_OK;
    if (err != CL_SUCCESS || err2 != CL_SUCCESS)
        st = fp_cl_fail(err != CL_SUCCESS ? err : err2, "clCreateBuffer");
    double best_ms = 0.0;
    /* The first copy also makes both buffers resident; the best of the next five counts. */
    for (int rep = 0; rep < 6 && st == FLASHPORT_OK; rep++) {
        cl_event event = NULL;
        err = cl->clEnqueueCopyBuffer(dev->queue, src, dst, 0, 0, bytes, 0, NULL, &event);
        if (err != CL_SUCCESS) {
            st = fp_cl_fail(err, "clEnqueueCopyBuffer");
            break;
        }
        double ms = 0.0;
        st = event_ms(dev, event, &ms);
        if (rep > 0 && ms > 0.0 && (best_ms == 0.0 || ms < best_ms)) best_ms = ms;
    }
    if (src) cl->clReleaseMemObject(src);
    if (dst) cl->clReleaseMemObject(dst);
    *gbps = best_ms > 0.0 ? 2.0 * (double)bytes / (best_ms * 1e-3) / 1e9 : 0.0;
    *bytes_out = bytes;
    return st;
}

flashport_status fp_cl_measure_peaks(fp_cl_dev *dev, flashport_peaks *out) {
    memset(out, 0, sizeof *out);
    double tflops = 0.0, gbps = 0.0;
    size_t items = 0, bytes = 0;
    int iters = 0;
    flashport_status st = fma_rate(dev, &tflops, &items, &iters);
    if (st == FLASHPORT_OK) st = copy_rate(dev, &gbps, &bytes);
    if (st != FLASHPORT_OK) return st;
    out->f32_fma_tflops = tflops;
    out->f32_fma_tflops_per_core =
        dev->desc->compute_units ? tflops / (double)dev->desc->compute_units : 0.0;
    out->copy_gbps = gbps;
    snprintf(out->method, sizeof out->method,
             "fma: %zu work-items x 32 chains x %d fma, profiled; per core = per compute unit; "
             "copy: clEnqueueCopyBuffer %zu MiB, best of 5",
             items, iters, bytes >> 20);
    return FLASHPORT_OK;
}
