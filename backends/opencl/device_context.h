/* An opened device: what the backend's files that queue work on it share. */
#ifndef FP_OPENCL_DEVICE_CONTEXT_H
#define FP_OPENCL_DEVICE_CONTEXT_H

#include "cl_loader.h"
#include "devices.h"
#include "fp_backend.h"

/* Programs built for one device, kept for the life of the context. */
typedef struct fp_cl_program_entry fp_cl_program_entry;

/* An opened device: context, in-order profiling queue, built programs, active timers. */
typedef struct fp_cl_dev {
    const fp_cl_api *cl;
    const fp_cl_device_desc *desc;
    cl_context context;
    cl_command_queue queue;
    int borrowed_queue; /* the caller's queue (open_queue): retained, never waited for on close */
    fp_cl_program_entry *programs;
    /* While a timer runs, the first and the latest kernel events queued since its start. */
    int timers_running;
    cl_event first_event;
    cl_event last_event;
    /* The tensor-core program failed to build once: the portable kernel runs from then on. */
    int nv_tf32x3_build_failed;
    /* The backward pass's workspace (D), grown as problems need, released on close. */
    cl_mem workspace;
    size_t workspace_bytes;
} fp_cl_dev;

/* Queues a kernel over a 3-D range and keeps its event for running timers (backend.c). */
flashport_status fp_cl_launch(fp_cl_dev *dev, cl_kernel kernel, const size_t global[3],
                              const size_t local[3]);

#endif /* FP_OPENCL_DEVICE_CONTEXT_H */
