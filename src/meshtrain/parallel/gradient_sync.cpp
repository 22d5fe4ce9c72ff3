#include "meshtrain/parallel/gradient_sync.h"

#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/nn/model.h"

namespace meshtrain::parallel {

void GradientSync::init_weights(Model& model, uint64_t seed) { model.init_weights(seed); }

void check_replicas_equal(comm::Communicator& comm, const Tensor& params, const char* who) {
  std::vector<float> hi(params.data<float>(), params.data<float>() + params.numel()), lo = hi;
  comm.allreduce(hi.data(), hi.size(), DType::F32, comm::ReduceOp::Max).wait();
  comm.allreduce(lo.data(), lo.size(), DType::F32, comm::ReduceOp::Min).wait();
  MT_CHECK(hi == lo, "{}: the replicas differ (rank {})", who, comm.rank());
}

void LocalGradients::zero_grad() {
  MT_CHECK(model_, "attach() a model first");
  model_->zero_grad();
}

float* LocalGradients::gradients() {
  MT_CHECK(model_, "attach() a model first");
  return model_->grad_buffer().data<float>();
}

ElemSpan LocalGradients::update_range() const {
  MT_CHECK(model_, "attach() a model first");
  return {0, model_->layout().numel};
}

}  // namespace meshtrain::parallel
