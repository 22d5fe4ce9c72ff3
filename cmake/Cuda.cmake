# The CUDA backend (src/meshtrain/kernels/cuda/, tests/cuda/): on by default
# when nvcc is found and a GPU is visible, so a GPU user's first build trains
# on the GPU while machines without one keep the quick CPU build. CI builds it
# explicitly (-DMESHTRAIN_CUDA=ON, scripts/build-cuda.sh) so a broken CUDA
# build cannot land. Compiled for Hopper (sm_90) unless
# CMAKE_CUDA_ARCHITECTURES says otherwise.
set(MESHTRAIN_CUDA_DEFAULT OFF)
find_program(MESHTRAIN_NVCC nvcc PATHS /usr/local/cuda/bin)
find_program(MESHTRAIN_NVIDIA_SMI nvidia-smi)
if(MESHTRAIN_NVCC AND MESHTRAIN_NVIDIA_SMI)
  execute_process(COMMAND ${MESHTRAIN_NVIDIA_SMI} -L RESULT_VARIABLE smi_rc OUTPUT_VARIABLE smi_out
                  ERROR_QUIET)
  if(smi_rc EQUAL 0 AND smi_out MATCHES "GPU 0")
    set(MESHTRAIN_CUDA_DEFAULT ON)
  endif()
endif()
option(MESHTRAIN_CUDA "Build the CUDA backend (cuBLASLt kernels, device allocator, streams)"
       ${MESHTRAIN_CUDA_DEFAULT})

if(MESHTRAIN_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND MESHTRAIN_NVCC)
    set(CMAKE_CUDA_COMPILER ${MESHTRAIN_NVCC})
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "CUDA backend: ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, sm_${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "CUDA backend: OFF (-DMESHTRAIN_CUDA=ON builds it; default on when nvcc and a GPU are found)")
endif()
