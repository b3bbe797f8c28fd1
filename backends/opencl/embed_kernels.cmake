# Writes OUTPUT, a C file holding each file of SOURCES (a ;-list) as a string constant named
# fp_opencl_source_<file name without extension>, one C string literal per source line.
set(out "/* Generated from the OpenCL kernel sources at build time. Do not edit. */\n")
foreach(src IN LISTS SOURCES)
  get_filename_component(name ${src} NAME_WE)
  file(READ ${src} text)
  string(REPLACE "\\" "\\\\" text "${text}")
  string(REPLACE "\"" "\\\"" text "${text}")
  string(REPLACE "\n" "\\n\"\n    \"" text "${text}")
  string(APPEND out "const char fp_opencl_source_${name}[] =\n    \"${text}\";\n")
endforeach()
file(WRITE ${OUTPUT}.tmp "${out}")
file(RENAME ${OUTPUT}.tmp ${OUTPUT})
