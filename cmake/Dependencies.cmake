# Every third-party library comes from Debian packages (scripts/install-deps.sh).
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 CONFIG REQUIRED)

# OpenBLAS: prefer the OpenMP build so BLAS calls made inside our own OpenMP
# regions run single-threaded instead of oversubscribing the cores.
find_library(OPENBLAS_LIB NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
if(NOT OPENBLAS_LIB)
  find_library(OPENBLAS_LIB NAMES openblas REQUIRED)
endif()
find_path(CBLAS_INCLUDE_DIR NAMES cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp
        /usr/include/openblas /usr/include REQUIRED)
add_library(meshtrain_blas INTERFACE)
target_link_libraries(meshtrain_blas INTERFACE ${OPENBLAS_LIB})
target_include_directories(meshtrain_blas INTERFACE ${CBLAS_INCLUDE_DIR})
message(STATUS "OpenBLAS: ${OPENBLAS_LIB} (cblas.h in ${CBLAS_INCLUDE_DIR})")

# oneDNN (Debian libdnnl-dev): the bf16 GEMM on AVX512_BF16 CPUs. Optional: without
# it bf16 GEMMs widen to f32 and use sgemm (kernels/cpu/gemm_bf16.h).
find_library(DNNL_LIB NAMES dnnl)
find_path(DNNL_INCLUDE_DIR NAMES oneapi/dnnl/dnnl.hpp)
add_library(meshtrain_dnnl INTERFACE)
if(DNNL_LIB AND DNNL_INCLUDE_DIR)
  target_link_libraries(meshtrain_dnnl INTERFACE ${DNNL_LIB})
  target_include_directories(meshtrain_dnnl INTERFACE ${DNNL_INCLUDE_DIR})
  target_compile_definitions(meshtrain_dnnl INTERFACE MESHTRAIN_HAVE_DNNL=1)
  message(STATUS "oneDNN: ${DNNL_LIB} (bf16 GEMM)")
else()
  message(STATUS "oneDNN: not found (bf16 GEMM falls back to f32 sgemm; install libdnnl-dev)")
endif()

set(MESHTRAIN_HAVE_MPI OFF)
if(MESHTRAIN_WITH_MPI)
  find_package(MPI COMPONENTS C)
  if(MPI_C_FOUND)
    set(MESHTRAIN_HAVE_MPI ON)
  endif()
endif()
message(STATUS "MPI transport: ${MESHTRAIN_HAVE_MPI}")

# PCRE2 (Debian libpcre2-dev): the tokenizers' pre-tokenization regexes
# (Unicode classes, lookahead, JIT), data/regex_splitter.h.
find_path(PCRE2_INCLUDE_DIR NAMES pcre2.h REQUIRED)
find_library(PCRE2_LIB NAMES pcre2-8 REQUIRED)
add_library(meshtrain_pcre2 INTERFACE)
target_link_libraries(meshtrain_pcre2 INTERFACE ${PCRE2_LIB})
target_include_directories(meshtrain_pcre2 INTERFACE ${PCRE2_INCLUDE_DIR})
message(STATUS "PCRE2: ${PCRE2_LIB}")

# Image data (data/image_decode, idx_file, image_prepare): libjpeg-turbo
# (Debian libjpeg62-turbo-dev, the libjpeg API), libpng (libpng-dev) and zlib
# (zlib1g-dev: gzip-compressed IDX files, and libpng's own dependency).
find_package(JPEG REQUIRED)
find_package(PNG REQUIRED)
find_package(ZLIB REQUIRED)
add_library(meshtrain_images INTERFACE)
target_link_libraries(meshtrain_images INTERFACE JPEG::JPEG PNG::PNG ZLIB::ZLIB)
message(STATUS "Images: libjpeg ${JPEG_LIBRARIES}, libpng ${PNG_LIBRARIES}")
