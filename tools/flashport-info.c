/* flashport-info: what this build of flashport can run here — version, backends and why any is
 * unavailable, devices, kernel variants — as text or JSON. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "flashport.h"

static const char *precision_name(flashport_precision p) {
    switch (p) {
    case FLASHPORT_PRECISION_NATIVE: return "native";
    case FLASHPORT_PRECISION_TF32: return "tf32";
    case FLASHPORT_PRECISION_F16: return "f16";
    case FLASHPORT_PRECISION_FP8: return "fp8";
    }
    return "unknown";
}

static const char *kind_name(flashport_device_kind k) {
    switch (k) {
    case FLASHPORT_DEVICE_CPU: return "cpu";
    case FLASHPORT_DEVICE_GPU: return "gpu";
    case FLASHPORT_DEVICE_ACCELERATOR: return "accelerator";
    }
    return "unknown";
}

static void print_text(const flashport_backend_info *b) {
    printf("%-10s %s", b->name, b->available ? "available" : "unavailable");
    if (b->available) printf(", %d device%s", b->device_count, b->device_count == 1 ? "" : "s");
    printf("  [%s]\n", b->location[0] ? b->location : "not loaded");
    if (!b->available) printf("           reason: %s\n", b->reason);
    for (int d = 0; d < b->device_count; d++) {
        flashport_device_info di;
        if (flashport_device_get_info(b->name, d, &di) != FLASHPORT_OK) {
            printf("    device %d: %s\n", d, flashport_last_error());
            continue;
        }
        printf("    device %d: %s (%s, %s), %.1f GiB, %d compute units\n", d, di.name, di.vendor,
               kind_name(di.kind), (double)di.memory_bytes / (1024.0 * 1024.0 * 1024.0),
               di.compute_units);
        if (di.details[0]) printf("      %s\n", di.details);
    }
    int n = flashport_kernel_count(b->name);
    for (int i = 0; i < n; i++) {
        flashport_kernel_info ki;
        if (flashport_kernel_get_info(b->name, i, &ki) != FLASHPORT_OK) continue;
        printf("    kernel %-26s %-6s %s\n", ki.name, precision_name(ki.precision), ki.description);
    }
}

static void print_json(cli_json *j, const flashport_backend_info *b) {
    cli_json_begin_object(j);
    cli_json_key(j, "name");
    cli_json_string(j, b->name);
    cli_json_key(j, "available");
    cli_json_bool(j, b->available);
    cli_json_key(j, "reason");
    cli_json_string(j, b->reason);
    cli_json_key(j, "module");
    cli_json_bool(j, b->is_module);
    cli_json_key(j, "location");
    cli_json_string(j, b->location);
    cli_json_key(j, "devices");
    cli_json_begin_array(j);
    for (int d = 0; d < b->device_count; d++) {
        flashport_device_info di;
        cli_json_begin_object(j);
        cli_json_key(j, "index");
        cli_json_int(j, d);
        if (flashport_device_get_info(b->name, d, &di) != FLASHPORT_OK) {
            cli_json_key(j, "error");
            cli_json_string(j, flashport_last_error());
        } else {
            cli_json_key(j, "name");
            cli_json_string(j, di.name);
            cli_json_key(j, "vendor");
            cli_json_string(j, di.vendor);
            cli_json_key(j, "kind");
            cli_json_string(j, kind_name(di.kind));
            cli_json_key(j, "memory_bytes");
            cli_json_int(j, (int64_t)di.memory_bytes);
            cli_json_key(j, "compute_units");
            cli_json_int(j, di.compute_units);
            cli_json_key(j, "details");
            cli_json_string(j, di.details);
        }
        cli_json_end_object(j);
    }
    cli_json_end_array(j);
    cli_json_key(j, "kernels");
    cli_json_begin_array(j);
    int n = flashport_kernel_count(b->name);
    for (int i = 0; i < n; i++) {
        flashport_kernel_info ki;
        if (flashport_kernel_get_info(b->name, i, &ki) != FLASHPORT_OK) continue;
        cli_json_begin_object(j);
        cli_json_key(j, "name");
        cli_json_string(j, ki.name);
        cli_json_key(j, "precision");
        cli_json_string(j, precision_name(ki.precision));
        cli_json_key(j, "description");
        cli_json_string(j, ki.description);
        cli_json_end_object(j);
    }
    cli_json_end_array(j);
    cli_json_end_object(j);
}

int main(int argc, char **argv) {
    int json = 0, available_only = 0;
    const char *only = NULL;
    const cli_option opts[] = {
        {"json", CLI_FLAG, &json, NULL, "print JSON instead of text", NULL},
        {"backend", CLI_STRING, &only, "NAME", "describe only this backend", NULL},
        {"available-backends", CLI_FLAG, &available_only, NULL,
         "print the names of the available backends, one per line (for scripts)", NULL},
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    switch (cli_parse("flashport-info", argc, argv, opts, n_opts)) {
    case CLI_HELP:
        cli_print_help(stdout, "flashport-info", "[--json] [--backend NAME] [--available-backends]",
                       "Shows the flashport version, every backend this build knows in "
                       "auto-selection order and whether it is available here (and why not), "
                       "each device with its name, vendor, memory and compute units, backend "
                       "details (CPU features and topology, GPU properties), and each backend's "
                       "kernel variants with their precision class.",
                       opts, n_opts,
                       "Exit status: 0 success; 2 bad command line; 4 the named backend is "
                       "unknown.\n");
        return CLI_EXIT_OK;
    case CLI_ERROR: return CLI_EXIT_USAGE;
    case CLI_PARSED: break;
    }
    int first = 0, last = flashport_backend_count();
    if (only) {
        if (flashport_backend_find(only, &first) != FLASHPORT_OK) {
            fprintf(stderr, "flashport-info: %s\n", flashport_last_error());
            return CLI_EXIT_LIBRARY;
        }
        last = first + 1;
    }
    flashport_backend_info infos[16];
    for (int i = first; i < last; i++) flashport_backend_get_info(i, &infos[i]);

    if (available_only) {
        for (int i = first; i < last; i++)
            if (infos[i].available) printf("%s\n", infos[i].name);
        return CLI_EXIT_OK;
    }
    if (json) {
        cli_json j;
        cli_json_init(&j, stdout);
        cli_json_begin_object(&j);
        cli_json_key(&j, "version");
        cli_json_string(&j, flashport_version_string());
        cli_json_key(&j, "backends");
        cli_json_begin_array(&j);
        for (int i = first; i < last; i++) print_json(&j, &infos[i]);
        cli_json_end_array(&j);
        cli_json_end_object(&j);
        printf("\n");
        return CLI_EXIT_OK;
    }
    printf("flashport %s\nbackends, in auto-selection order:\n", flashport_version_string());
    for (int i = first; i < last; i++) print_text(&infos[i]);
    return CLI_EXIT_OK;
}
