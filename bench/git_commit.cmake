# Writes OUT with the source tree's commit (suffixed "-dirty" when it has local changes), and
# leaves the file untouched when nothing changed so that nothing rebuilds needlessly.
# Run as: cmake -DSRC=<source dir> -DOUT=<header> -P git_commit.cmake
set(commit "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SRC} rev-parse --short=12 HEAD
                  OUTPUT_VARIABLE head RESULT_VARIABLE rc
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0)
    set(commit "${head}")
    execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SRC} diff --quiet HEAD
                    RESULT_VARIABLE dirty ERROR_QUIET)
    if(NOT dirty EQUAL 0)
      string(APPEND commit "-dirty")
    endif()
  endif()
endif()
set(content "#define FLASHPORT_GIT_COMMIT \"${commit}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
  if(old STREQUAL content)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${content}")
