/*
 * Tile-configuration override by environment variable, shared by the kernels that compile
 * several tile configurations per padded head dim (for tuning sweeps: each variable names one
 * config index, and a kernel given an index its head dim lacks declines the problem with the
 * reason, rather than quietly running another config).
 */
#ifndef FP_CUDA_CONFIG_ENV_H
#define FP_CUDA_CONFIG_ENV_H

#include <stdio.h>
#include <stdlib.h>

#define FP_CONFIG_ENV_UNSET (-2)

/* The index the variable `name` names among `count` configs of padded head dim padded_d:
 * FP_CONFIG_ENV_UNSET when it is unset or empty (the caller's default applies), the index when
 * it is a decimal number below count, else -1 with the reason in why. */
static inline int fp_config_from_env(const char *name, int padded_d, int count, char *why,
                                     size_t why_len) {
    const char *env = getenv(name);
    if (!env || !*env) return FP_CONFIG_ENV_UNSET;
    char *end = NULL;
    const long index = strtol(env, &end, 10);
    if (*end != '\0' || !(env[0] >= '0' && env[0] <= '9') || index >= count) {
        snprintf(why, why_len, "%s=%s names no tile config of padded head dim %d (0..%d)", name,
                 env, padded_d, count - 1);
        return -1;
    }
    return (int)index;
}

#endif /* FP_CUDA_CONFIG_ENV_H */
