// The Python module meshtrain._torch_backend: the creator that
// meshtrain/torch/__init__.py hands to torch.distributed.Backend.register_backend.
#include <pybind11/chrono.h>
#include <torch/python.h>

#include "meshtrain_backend.h"

PYBIND11_MODULE(_torch_backend, m) {
  m.doc() = "meshtrain's collectives as a torch.distributed backend (import meshtrain.torch)";
  m.def("create_backend", &meshtrain::torch_backend::MeshtrainBackend::create,
        "Makes the \"meshtrain\" backend of one process group (store, rank, size, timeout)");
}
