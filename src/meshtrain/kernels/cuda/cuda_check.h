// Error checks for CUDA runtime, cuBLAS and cuBLASLt calls: a failure throws
// meshtrain::Error naming the call, its file:line and the library's message.
// The throwing code lives in cuda_check.cpp (compiled by the host compiler),
// so .cu files need not parse fmt.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace meshtrain::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* call, const char* file,
                                     int line);
// A precondition of an op failed (bad shape, missing buffer).
[[noreturn]] void throw_op_error(const char* op, const char* what, const char* file, int line);

}  // namespace meshtrain::cuda

#define MT_CUDA_CHECK(call)                                                           \
  do {                                                                                \
    const cudaError_t mt_cuda_err_ = (call);                                          \
    if (mt_cuda_err_ != cudaSuccess)                                                  \
      ::meshtrain::cuda::throw_cuda_error(mt_cuda_err_, #call, __FILE__, __LINE__);   \
  } while (0)

#define MT_CUBLAS_CHECK(call)                                                         \
  do {                                                                                \
    const cublasStatus_t mt_cublas_st_ = (call);                                      \
    if (mt_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                       \
      ::meshtrain::cuda::throw_cublas_error(mt_cublas_st_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: a bad configuration shows up here.
#define MT_CUDA_CHECK_LAUNCH(name) \
  ::meshtrain::cuda::check_launch(name, __FILE__, __LINE__)

// MT_OP_CHECK(cond, op, what): an Error "<op>: <what>" when cond is false.
#define MT_OP_CHECK(cond, op, what)                                        \
  do {                                                                     \
    if (!(cond)) ::meshtrain::cuda::throw_op_error(op, what, __FILE__, __LINE__); \
  } while (0)

namespace meshtrain::cuda {
inline void check_launch(const char* name, const char* file, int line) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw_cuda_error(err, name, file, line);
}
}  // namespace meshtrain::cuda
