#include "meshtrain/kernels/cuda/cuda_check.h"

#include "meshtrain/core/error.h"

namespace meshtrain::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  fail("CUDA error in {} at {}:{}: {} ({})", call, file, line, cudaGetErrorString(err),
       cudaGetErrorName(err));
}

void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line) {
  fail("cuBLAS error in {} at {}:{}: {} ({})", call, file, line, cublasGetStatusString(st),
       static_cast<int>(st));
}

void throw_op_error(const char* op, const char* what, const char* file, int line) {
  fail("{}: {} ({}:{})", op, what, file, line);
}

}  // namespace meshtrain::cuda
