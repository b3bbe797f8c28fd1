/* The README's example: causal attention on host arrays through whichever backend
 * FLASHPORT_BACKEND (or auto) selects. Prints the backend and one output value. */
#include <flashport.h>
#include <math.h>
#include <stdio.h>

int main(void) {
    enum { B = 1, H = 8, N = 512, D = 64 };
    static float q[B * H * N * D], k[B * H * N * D], v[B * H * N * D], o[B * H * N * D];
    for (int i = 0; i < B * H * N * D; i++) {
        q[i] = sinf(0.37f * (float)i);
        k[i] = cosf(0.11f * (float)i);
        v[i] = sinf(0.05f * (float)i + 1.0f);
    }
    flashport_context *ctx;
    if (flashport_context_create(NULL, &ctx) != FLASHPORT_OK) { /* FLASHPORT_BACKEND, then auto */
        fprintf(stderr, "%s\n", flashport_last_error());
        return 1;
    }
    flashport_problem p;
    flashport_problem_init(&p, FLASHPORT_F32, B, H, H, N, N, D, FLASHPORT_LAYOUT_BHND);
    p.causal = 1;
    flashport_status st = flashport_attention_host(ctx, &p, q, k, v, o, NULL);
    if (st != FLASHPORT_OK)
        fprintf(stderr, "%s: %s\n", flashport_status_string(st), flashport_last_error());
    else /* causal: the first query sees only the first key, so O[0] = V[0] */
        printf("%s: O[0][0] = %.6f (V[0][0] = %.6f)\n", flashport_context_backend(ctx), o[0], v[0]);
    flashport_context_destroy(ctx);
    return st == FLASHPORT_OK ? 0 : 1;
}
