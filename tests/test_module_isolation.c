/*
 * Backend modules resolve every symbol by themselves. The core is opened here as Python opens
 * an extension module's dependencies: with dlopen and RTLD_LOCAL, so that nothing it exports is
 * visible to the modules it loads in turn. Every module named on the command line must then
 * load: either available, or unavailable for a reason of its own (no driver, no device), never
 * because its loader could not resolve a symbol.
 *
 * usage: test_module_isolation CORE_LIBRARY BACKEND...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "flashport.h"

typedef flashport_status (*find_fn)(const char *, int *);
typedef flashport_status (*info_fn)(int, flashport_backend_info *);

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s CORE_LIBRARY BACKEND...\n", argv[0]);
        return 2;
    }
    void *core = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!core) {
        fprintf(stderr, "FAIL: cannot open the core: %s\n", dlerror());
        return 1;
    }
    find_fn find = (find_fn)dlsym(core, "flashport_backend_find");
    info_fn info = (info_fn)dlsym(core, "flashport_backend_get_info");
    if (!find || !info) {
        fprintf(stderr, "FAIL: the core lacks the backend registry calls\n");
        return 1;
    }
    int failures = 0;
    for (int i = 2; i < argc; i++) {
        int idx = -1;
        flashport_backend_info bi;
        if (find(argv[i], &idx) != FLASHPORT_OK || info(idx, &bi) != FLASHPORT_OK) {
            fprintf(stderr, "FAIL: %s: not in the registry\n", argv[i]);
            failures++;
            continue;
        }
        const int unresolved = !bi.available && (strstr(bi.reason, "undefined symbol") ||
                                                  strstr(bi.reason, "cannot open"));
        printf("%s: %s%s%s\n", argv[i], bi.available ? "available" : "unavailable: ",
               bi.available ? "" : bi.reason, unresolved ? "  <- FAIL" : "");
        failures += unresolved;
    }
    return failures ? 1 : 0;
}
