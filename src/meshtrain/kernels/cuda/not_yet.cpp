#include "meshtrain/kernels/cuda/not_yet.h"

#include "meshtrain/core/error.h"

namespace meshtrain::cuda {

void not_on_cuda_yet(const char* op) {
  fail("{}: not on the CUDA backend yet (issue 40 has it: cuDNN)", op);
}

}  // namespace meshtrain::cuda
