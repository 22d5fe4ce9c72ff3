// The CUDA backend's kernel table (kernels/kernel_table.h): every op on the
// GPU, pointers in device memory, work queued on the stream's cudaStream_t.
// A plain header: no CUDA headers, so host-compiled code may include it.
#pragma once
#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain {

// The table for Device::cuda(0) (the current device: one GPU per process).
const KernelTable& cuda_kernel_table();

}  // namespace meshtrain
