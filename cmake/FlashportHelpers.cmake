# Helpers shared by the build files.

set(FLASHPORT_WARNINGS -Wall -Wextra)
set_property(GLOBAL PROPERTY FLASHPORT_SUMMARY "")

# flashport_summary(<line>): a line for the configure summary.
function(flashport_summary line)
  set_property(GLOBAL APPEND PROPERTY FLASHPORT_SUMMARY "${line}")
endfunction()

function(flashport_print_summary)
  get_property(lines GLOBAL PROPERTY FLASHPORT_SUMMARY)
  message(STATUS "flashport ${PROJECT_VERSION} configuration:")
  foreach(l IN LISTS lines)
    message(STATUS "  ${l}")
  endforeach()
endfunction()

# flashport_backend_option(<option> <found> <why-not>): applies AUTO|ON|OFF to a backend whose
# toolchain was (not) found; sets <option>_ENABLED in the caller.
function(flashport_backend_option opt found why)
  if(${opt} STREQUAL "OFF")
    set(${opt}_ENABLED OFF PARENT_SCOPE)
    flashport_summary("${opt}: off")
  elseif(found)
    set(${opt}_ENABLED ON PARENT_SCOPE)
    flashport_summary("${opt}: on")
  elseif(${opt} STREQUAL "ON")
    message(FATAL_ERROR "${opt}=ON but ${why}")
  else()
    set(${opt}_ENABLED OFF PARENT_SCOPE)
    flashport_summary("${opt}: skipped (${why})")
  endif()
endfunction()

# flashport_add_module(<target> <sources...>): a backend built as a loadable module
# (libflashport-<name>.so) installed beside the core library.
function(flashport_add_module target)
  add_library(${target} MODULE ${ARGN})
  target_include_directories(${target} PRIVATE
    ${PROJECT_SOURCE_DIR}/api/include ${PROJECT_SOURCE_DIR}/api/internal)
  set_target_properties(${target} PROPERTIES PREFIX "lib")
  install(TARGETS ${target} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  set_property(GLOBAL APPEND PROPERTY FLASHPORT_MODULES ${target})
endfunction()
