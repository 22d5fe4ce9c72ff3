// The CUDA device runtime (core/device_runtime.h): memory from a caching
// allocator per GPU over cudaMalloc, copies with cudaMemcpyAsync, streams and
// events as CUDA's. Installed for DeviceType::CUDA by
// `register_cuda_runtime()`, which the kernel table calls when the program
// starts (kernels/kernel_table.cpp), so linking the backend is enough.
// Plain header: no CUDA types, included by host-compiled code.
#pragma once

namespace meshtrain {

// Installs the runtime (idempotent); returns true.
bool register_cuda_runtime();

}  // namespace meshtrain
