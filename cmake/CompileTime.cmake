# What keeps a clean build short: precompiled headers and unity builds.
#
# Precompiled third-party headers. nlohmann/json reaches almost every source
# through nn/model.h, CLI11 every command of the CLI, GoogleTest every test;
# alone in a file they take ~1.8 s, ~5.7 s and ~1.2 s to compile. Each kind
# of target (library layer, test, CLI) compiles its header set once and the
# others of its kind reuse it: a clean build on 2 cores took 6m50s with them,
# 8m24s without (776 vs 966 CPU-s; the rest is mostly code generation for
# their templates, which a precompiled header cannot save). Only system
# headers go in, so editing the project never invalidates them.
# -DMESHTRAIN_PCH=OFF builds without them (e.g. to check a file's includes).
option(MESHTRAIN_PCH "Precompile the heavy third-party headers (json, fmt, CLI11, GoogleTest)" ON)

set(MESHTRAIN_PCH_COMMON <nlohmann/json.hpp> <fmt/format.h> <string> <vector> <memory>
  <algorithm> <functional> <map> <filesystem> <optional> <chrono>)
set(MESHTRAIN_PCH_library ${MESHTRAIN_PCH_COMMON})
set(MESHTRAIN_PCH_test ${MESHTRAIN_PCH_COMMON} <gtest/gtest.h>)
set(MESHTRAIN_PCH_cli ${MESHTRAIN_PCH_COMMON} <CLI/CLI.hpp>)

# meshtrain_pch_owner(<kind> <libraries...>): the target that compiles a
# kind's header set, an empty object library with just the given libraries,
# so reusing its header pulls in no other target (the ThreadSanitizer build
# compiles only the comm layer). Call it before the kind's first target.
function(meshtrain_pch_owner kind)
  if(NOT MESHTRAIN_PCH)
    return()
  endif()
  set(anchor ${PROJECT_BINARY_DIR}/pch_anchor.cpp)
  if(NOT EXISTS ${anchor})
    file(WRITE ${anchor} "// Compiles nothing: the target exists for its precompiled header.\n")
  endif()
  add_library(mt_pch_${kind} OBJECT ${anchor})
  # A header is used only with the -fPIC/-fPIE setting it was made with: the
  # layers are position-independent, tests and the CLI are executables.
  if(kind STREQUAL "library")
    set_target_properties(mt_pch_${kind} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  endif()
  target_link_libraries(mt_pch_${kind} PRIVATE ${ARGN})
  target_precompile_headers(mt_pch_${kind} PRIVATE ${MESHTRAIN_PCH_${kind}})
endfunction()

# meshtrain_precompile(<target> <library|test|cli>): the target reuses its
# kind's precompiled header (flags and definitions must match the owner's;
# -Winvalid-pch turns a rejected header into a warning, not a silent slow
# build).
function(meshtrain_precompile target kind)
  if(NOT MESHTRAIN_PCH)
    return()
  endif()
  target_precompile_headers(${target} REUSE_FROM mt_pch_${kind})
  target_compile_options(${target} PRIVATE -Winvalid-pch)
endfunction()

# Unity builds for code no benchmark figure measures (the CLI's commands,
# configuration, telemetry, model import/export, the planner, the launcher):
# their files share those headers' template instantiations, which cost more
# than parsing them. The layers whose speed is a figure (kernels, comm, nn,
# optim, parallel, data's tokenizer, ckpt, train) stay one object per file.
option(MESHTRAIN_UNITY "Compile the off-hot-path targets as unity builds" ON)
function(meshtrain_unity target)
  if(MESHTRAIN_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()
