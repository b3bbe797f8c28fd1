/*
 * Every backend the core knows, in auto-selection order, as an X-macro list (as libCEED's
 * ceed-backend-list.h does it). Each line is one of
 *   FP_MODULE_BACKEND(name)          a loadable module, libflashport-<name>.so, found at run
 *                                    time and entered through its FP_BACKEND_ENTRY_SYMBOL;
 *   FP_BUILTIN_BACKEND(name, entry)  linked into the core and entered through the function
 *                                    `entry` (an fp_backend_entry_fn).
 * name is what a backend spec says ("cuda:1") and what the backend's table calls itself. The
 * includer defines both macros, includes this file, and undefines them; the build reads the
 * names from here too (backends/CMakeLists.txt).
 */
FP_MODULE_BACKEND(cuda)
FP_MODULE_BACKEND(hip)
FP_MODULE_BACKEND(opencl)
FP_BUILTIN_BACKEND(cpu_simd, fp_cpu_simd_entry)
FP_BUILTIN_BACKEND(reference, fp_reference_entry)
