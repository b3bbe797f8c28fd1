/* Declarations shared by the files of the OpenCL backend. */
#ifndef FP_OPENCL_BACKEND_H
#define FP_OPENCL_BACKEND_H

#include <stddef.h>

#include "cl_loader.h"
#include "fp_backend.h"

#define FP_CL_NAME "opencl"

/* The module's entry point (FP_BACKEND_ENTRY_SYMBOL); keeps host in fp_cl_host. */
FLASHPORT_API const fp_backend *flashport_backend_entry(const fp_host *host);
extern const fp_host *fp_cl_host;

/* One OpenCL device and the properties the planner and flashport-info use. */
typedef struct fp_cl_device_desc {
    cl_platform_id platform;
    cl_device_id id;
    char platform_name[128];
    char platform_version[128];
    char name[256];
    char vendor[128];
    char driver_version[128];
    char device_version[128];
    cl_device_type type;
    cl_ulong global_mem;
    cl_ulong max_alloc;
    cl_ulong local_mem;
    int local_mem_dedicated; /* CL_LOCAL: on-chip scratch rather than emulated in global memory */
    size_t max_work_group;
    cl_uint compute_units;
    cl_uint clock_mhz;
    cl_uint preferred_vector_float;
    int is_nvidia, is_amd, is_intel;
    int has_fp16;
    int has_intel_subgroups;
    int has_khr_subgroup_shuffle;
    int cc_major, cc_minor; /* NVIDIA compute capability (cl_nv_device_attribute_query); 0 else */
} fp_cl_device_desc;

/* Enumerates every device of every platform, GPUs first, then accelerators, then the rest.
 * Returns the count, or 0 with the reason. Runs once; later calls return the same answer. */
int fp_cl_enumerate(char *reason, size_t reason_len);
const fp_cl_device_desc *fp_cl_device(int index);
/* The first device whose "platform device vendor" text contains selector (case-insensitive). */
int fp_cl_find_device(const char *selector);

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
} fp_cl_dev;

/* Turns a failed OpenCL call into a flashport status and message naming the call. */
flashport_status fp_cl_fail(cl_int err, const char *call);

/* Kernel `kernel_name` of `source` built with `options` for dev's device: from this context's
 * programs, else the on-disk cache, else built (and then cached). A build failure returns
 * FLASHPORT_ERROR_DEVICE with the compiler's log. */
flashport_status fp_cl_get_kernel(fp_cl_dev *dev, const char *source, const char *options,
                                  const char *kernel_name, cl_kernel *out);
void fp_cl_release_programs(fp_cl_dev *dev);

/* Queues a kernel over a 3-D range and keeps its event for running timers. */
flashport_status fp_cl_launch(fp_cl_dev *dev, cl_kernel kernel, const size_t global[3],
                              const size_t local[3], cl_event *event_out);

/* The variants of the backend, in the order of the variant table. */
enum { FP_CL_VARIANT_TILED = 0, FP_CL_VARIANT_NV_TF32X3 = 1, FP_CL_VARIANT_COUNT };
extern const fp_variant fp_cl_variants[];

/* Tile shape of a plan (the keys of FLASHPORT_OPENCL_TILE, in this order). */
enum {
    FP_CL_P_BR = 0,  /* query rows per work-group */
    FP_CL_P_BC = 1,  /* keys per block streamed through local memory */
    FP_CL_P_TM = 2,  /* query rows of the score tile per work-item */
    FP_CL_P_TN = 3,  /* keys of the score tile per work-item */
    FP_CL_P_KC = 4,  /* head-dim columns of Q and K staged per step */
    FP_CL_P_VC = 5,  /* rows of V staged per step */
    FP_CL_P_DV = 6,  /* output columns per work-group (d wider than this is split) */
    FP_CL_P_OM = 7,  /* output rows per work-item */
    FP_CL_P_QR = 8,  /* 1: Q resident in local memory */
    FP_CL_P_PF = 9,  /* 1: next K/Q chunk prefetched into registers */
    FP_CL_P_RG = 10, /* NVIDIA register cap per work-item, 0: none */
    FP_CL_P_UR = 11, /* 1: loops over register tiles unrolled fully */
    FP_CL_TILE_KEYS = 12
};

flashport_status fp_cl_plan(fp_cl_dev *dev, const fp_problem *p, int forced, fp_plan *out);
/* The tile shape of a plan (fp_plan.param holds it packed). */
void fp_cl_tile_of_plan(const fp_plan *plan, int64_t *tile);
/* Local memory (bytes) a tile shape needs for a head dim; used by the planner and tests. */
size_t fp_cl_tile_local_bytes(const int64_t *tile, int64_t head_dim);
/* Build options of the attention program for a plan and problem on a device. */
void fp_cl_attention_options(const fp_cl_device_desc *dev, const fp_plan *plan,
                             const fp_problem *p, char *buf, size_t len);

/* The NVIDIA tensor-core kernel (nv_tf32x3.c). Its plan's params: */
enum { FP_CL_NV_D = 0, FP_CL_NV_WARPS = 1, FP_CL_NV_M_TILES = 2, FP_CL_NV_BC = 3, FP_CL_NV_EMULATE = 4 };
/* 1 and the plan when dev and p can run it (its program is built here), else 0 and why. */
int fp_cl_nv_tf32x3_plan(fp_cl_dev *dev, const fp_problem *p, fp_plan *out, char *why,
                         size_t len);
void fp_cl_nv_tf32x3_options(const fp_cl_device_desc *dev, const fp_plan *plan,
                             const fp_problem *p, char *buf, size_t len);

flashport_status fp_cl_measure_peaks(fp_cl_dev *dev, flashport_peaks *out);

extern const char fp_opencl_source_attention_tiled[];
extern const char fp_opencl_source_attention_nv_tf32x3[];
extern const char fp_opencl_source_peaks[];

#endif /* FP_OPENCL_BACKEND_H */
