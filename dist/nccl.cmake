# The NCCL path of flashport-dist: built where a CUDA compiler, the CUDA runtime, nccl.h and
# libnccl are found (the CUDA toolkit's, Debian's libnccl-dev, or pip's nvidia-nccl-cu* through
# NCCL_HOME). RCCL would take the same code through HIP; it is not wired up.
set(FLASHPORT_DIST_NCCL AUTO CACHE STRING "flashport-dist's NCCL calls (AUTO|ON|OFF)")
set_property(CACHE FLASHPORT_DIST_NCCL PROPERTY STRINGS AUTO ON OFF)
set(nccl_found FALSE)
set(nccl_why "no CUDA compiler found")
if(FLASHPORT_CUDA STREQUAL "OFF" AND FLASHPORT_DIST_NCCL STREQUAL "AUTO")
  # a build without CUDA asked for none
  set(nccl_why "FLASHPORT_CUDA=OFF")
elseif(NOT FLASHPORT_DIST_NCCL STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ENV NCCL_HOME ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ENV NCCL_HOME ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
    if(NOT CUDAToolkit_FOUND)
      set(nccl_why "nvcc found but not the CUDA toolkit")
    elseif(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
      set(nccl_why "nccl.h or libnccl not found (set NCCL_HOME)")
    else()
      set(nccl_found TRUE)
    endif()
  endif()
endif()
flashport_backend_option(FLASHPORT_DIST_NCCL ${nccl_found} "${nccl_why}")
if(NOT FLASHPORT_DIST_NCCL_ENABLED)
  return()
endif()

enable_language(CUDA)
# The cuda module's targets where it is configured, else the GPUs NCCL's users run (Hopper).
set(dist_cuda_arch "${FLASHPORT_CUDA_ARCHITECTURES}")
if(NOT dist_cuda_arch)
  set(dist_cuda_arch 90-real)
endif()
set_target_properties(flashport_dist PROPERTIES CUDA_ARCHITECTURES "${dist_cuda_arch}"
  CUDA_VISIBILITY_PRESET hidden)
target_sources(flashport_dist PRIVATE
  src/device_accum.cu src/nccl_ring.c src/nccl_forward.c src/nccl_backward.c)
target_include_directories(flashport_dist PRIVATE ${NCCL_INCLUDE_DIR})
target_link_libraries(flashport_dist PUBLIC ${NCCL_LIBRARY} CUDA::cudart)
target_compile_definitions(flashport_dist PRIVATE FP_DIST_HAVE_NCCL)
