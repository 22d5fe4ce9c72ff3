// Table entries the CUDA backend does not have yet (the image models' ops,
// issue 40): each throws an Error naming its op, so a model that reaches one
// on a GPU stops with the reason instead of crashing on a null entry.
#pragma once

namespace meshtrain::cuda {

[[noreturn]] void not_on_cuda_yet(const char* op);

// NotYet<decltype(KernelTable::op)>::call<name>: an entry of that signature.
template <typename Entry>
struct NotYet;
template <typename R, typename... A>
struct NotYet<R (*)(A...)> {
  template <const char* Op>
  static R call(A...) {
    not_on_cuda_yet(Op);
  }
};

}  // namespace meshtrain::cuda
