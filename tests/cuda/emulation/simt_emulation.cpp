/* The fiber scheduler behind simt_emulation.h (see there for the model). */
#include "simt_emulation.h"

#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include <memory>
#include <new>
#include <vector>

uint3 fp_emu_block_idx;
dim3 fp_emu_block_dim, fp_emu_grid_dim;

enum thread_state { RUNNABLE, AT_WARP_SYNC, AT_BLOCK_BARRIER, FINISHED };

struct emu_thread {
    ucontext_t ctx;
    uint3 idx;
    thread_state state;
    /* Owned, so that the stacks go with `threads` at exit (LeakSanitizer checks after the
     * static destructors have run). */
    std::unique_ptr<char[]> stack;
};

static const int MAX_THREADS = 1024;
static const size_t STACK_BYTES = 128 << 10;
static std::vector<emu_thread> threads(MAX_THREADS);
static ucontext_t scheduler;
static int current;
static const std::function<void()> *kernel_body;
static float shuffle_slots[MAX_THREADS];
static fp_emu_order order = FP_EMU_FORWARD;
static unsigned shuffle_seed = 12345u;
static int errors;

void fp_emu_set_order(fp_emu_order o) { order = o; }
int fp_emu_errors(void) { return errors; }
uint3 &fp_emu_thread_idx(void) { return threads[current].idx; }

static void suspend(thread_state s) {
    threads[current].state = s;
    swapcontext(&threads[current].ctx, &scheduler);
}

void fp_emu_syncthreads(void) { suspend(AT_BLOCK_BARRIER); }

float fp_emu_shfl_xor(float v, int lane_mask, int width) {
    const int t = current, lane = t % 32;
    if (lane_mask >= width || 32 % width) {
        fprintf(stderr, "emulation: shuffle mask %d outside width %d\n", lane_mask, width);
        errors++;
    }
    shuffle_slots[t] = v;
    suspend(AT_WARP_SYNC); /* every lane has posted its value */
    const float r = shuffle_slots[t - lane + (lane ^ lane_mask)];
    suspend(AT_WARP_SYNC); /* every lane has read before the slots are reused */
    return r;
}

static void thread_entry(void) {
    (*kernel_body)();
    suspend(FINISHED);
}

static void warp_order(std::vector<int> &w) {
    const int n = (int)w.size();
    for (int i = 0; i < n; i++) w[i] = order == FP_EMU_REVERSE ? n - 1 - i : i;
    if (order != FP_EMU_SHUFFLED) return;
    for (int i = n - 1; i > 0; i--) {
        shuffle_seed = shuffle_seed * 1103515245u + 12345u;
        const int j = (int)((shuffle_seed >> 8) % (unsigned)(i + 1));
        const int tmp = w[i];
        w[i] = w[j];
        w[j] = tmp;
    }
}

/* Runs the lanes of warp w until each waits at a block barrier or has finished, releasing
 * the warp's shuffle points as all its live lanes reach them. */
static int run_warp(int w) {
    for (;;) {
        for (int i = w * 32; i < w * 32 + 32; i++) {
            if (threads[i].state != RUNNABLE) continue;
            current = i;
            swapcontext(&scheduler, &threads[i].ctx);
        }
        int at_sync = 0, live = 0;
        for (int i = w * 32; i < w * 32 + 32; i++) {
            live += threads[i].state != FINISHED;
            at_sync += threads[i].state == AT_WARP_SYNC;
        }
        if (at_sync == 0) return 0;
        if (at_sync != 32) {
            fprintf(stderr, "emulation: %d of %d live lanes of warp %d reached a shuffle\n",
                    at_sync, live, w);
            return 1;
        }
        for (int i = w * 32; i < w * 32 + 32; i++) threads[i].state = RUNNABLE;
    }
}

static int run_block(int n) {
    for (int i = 0; i < n; i++) {
        emu_thread &t = threads[i];
        if (!t.stack) t.stack.reset(new (std::nothrow) char[STACK_BYTES]);
        if (!t.stack) return 1;
        t.idx.x = (unsigned)i % fp_emu_block_dim.x;
        t.idx.y = (unsigned)i / fp_emu_block_dim.x % fp_emu_block_dim.y;
        t.idx.z = (unsigned)i / (fp_emu_block_dim.x * fp_emu_block_dim.y);
        t.state = RUNNABLE;
        getcontext(&t.ctx);
        t.ctx.uc_stack.ss_sp = t.stack.get();
        t.ctx.uc_stack.ss_size = STACK_BYTES;
        t.ctx.uc_link = NULL;
        makecontext(&t.ctx, thread_entry, 0);
    }
    std::vector<int> warps(n / 32);
    for (;;) {
        warp_order(warps);
        for (int w : warps)
            if (run_warp(w)) return 1;
        int finished = 0;
        for (int i = 0; i < n; i++) finished += threads[i].state == FINISHED;
        if (finished == n) return 0;
        if (finished) {
            fprintf(stderr, "emulation: %d threads finished while %d wait at a barrier\n", finished,
                    n - finished);
            return 1;
        }
        for (int i = 0; i < n; i++) threads[i].state = RUNNABLE;
    }
}

void fp_emu_launch(dim3 grid, dim3 block, const std::function<void()> &body) {
    const int n = (int)(block.x * block.y * block.z);
    if (n <= 0 || n > MAX_THREADS || n % 32) {
        fprintf(stderr, "emulation: block of %d threads (want a multiple of 32, <= %d)\n", n,
                MAX_THREADS);
        errors++;
        return;
    }
    kernel_body = &body;
    fp_emu_grid_dim = grid;
    fp_emu_block_dim = block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                fp_emu_block_idx.x = x;
                fp_emu_block_idx.y = y;
                fp_emu_block_idx.z = z;
                if (run_block(n)) {
                    errors++;
                    return;
                }
            }
}
