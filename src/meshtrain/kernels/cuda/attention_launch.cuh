// Launch-side checks shared by the attention kernels (attention.cu,
// attention_tc.cu): shapes the grid can hold, and opting a kernel into the
// dynamic shared memory its tiles need.
#pragma once
#include <cstddef>
#include <cstdint>

#include "meshtrain/kernels/cuda/cuda_common.cuh"

namespace meshtrain::cuda {

// Opts `kernel` into `bytes` of dynamic shared memory (above 48 KiB needs
// it), or fails naming the op when the device has too little.
inline void attention_prepare_smem(const void* kernel, size_t bytes, const char* name) {
  int dev = 0, optin = 0;
  MT_CUDA_CHECK(cudaGetDevice(&dev));
  MT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  MT_OP_CHECK(bytes <= static_cast<size_t>(optin), name,
              "head size too large for the shared-memory tiles (at most 256 on sm_90)");
  if (bytes > 48 * 1024)
    MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
}

// Grids are (query or key tiles of `tile` rows, NH, B).
inline void attention_check_shapes(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t tile,
                                   const char* name) {
  MT_OP_CHECK(NH > 0 && C > 0 && C % NH == 0, name, "C channels do not split into NH heads");
  MT_OP_CHECK(NH <= 65535 && B <= 65535, name, "NH and B must be at most 65535");
  MT_OP_CHECK((T + tile - 1) / tile < (int64_t{1} << 31), name, "T too large");
}

}  // namespace meshtrain::cuda
