# Compiles through ccache when it is installed, so a fresh clone on a machine
# that built meshtrain before (CI runs on the developer's machine, in another
# folder) recompiles only what changed. What makes objects of two clones hit:
# CCACHE_BASEDIR rewrites absolute paths under the source tree to relative
# ones, CCACHE_NOHASHDIR leaves the working directory out of the hash, and the
# sloppiness lets precompiled headers be cached (their timestamps and
# __DATE__-free contents are the same in every clone). No compile definition
# of the project holds an absolute path (tests read theirs from
# tests/unit/test_paths.cpp), or every test object would miss.
# -DMESHTRAIN_CCACHE=OFF compiles without it; a launcher set by the caller
# (-DCMAKE_CXX_COMPILER_LAUNCHER=...) is kept as it is.
option(MESHTRAIN_CCACHE "Compile through ccache when it is found" ON)
find_program(MESHTRAIN_CCACHE_PROGRAM ccache)
if(MESHTRAIN_CCACHE AND MESHTRAIN_CCACHE_PROGRAM AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(meshtrain_ccache_launcher ${CMAKE_COMMAND} -E env
    CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}
    CCACHE_NOHASHDIR=true
    CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
    ${MESHTRAIN_CCACHE_PROGRAM})
  foreach(lang C CXX CUDA)
    set(CMAKE_${lang}_COMPILER_LAUNCHER ${meshtrain_ccache_launcher})
  endforeach()
  message(STATUS "meshtrain: compiling through ${MESHTRAIN_CCACHE_PROGRAM}")
endif()
