// A whole model on cuda:0 (parameters, gradients, activations, the 16-bit
// copy and the token ids in GPU memory) against the same model on the CPU:
// two micro-batches of forward and backward, GPT and Llama, f32 and bf16.
// The kernels differ (cuBLASLt and ours vs OpenBLAS/oneDNN and the CPU's), so
// results agree within the precision's rounding, not bit for bit. Skips with
// the reason where no GPU is visible.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "meshtrain/core/tensor.h"
#include "meshtrain/nn/model_registry.h"
#include "cuda_test_util.h"

using namespace meshtrain;

namespace {
struct StepResult {
  std::vector<float> losses, grads;
};

StepResult train_on(const std::string& preset, Precision precision, Device device) {
  auto spec = model_preset(preset);
  const int64_t n = spec->num_params();
  auto host_model = spec->build({});
  host_model->init_weights(11);
  ModelBuffers buffers;
  buffers.params = Tensor::zeros({n}, DType::F32, MemCategory::Parameters, device);
  buffers.grads = Tensor::zeros({n}, DType::F32, MemCategory::Gradients, device);
  buffers.params.copy_from(host_model->param_buffer());
  auto model = spec->build(buffers);
  model->set_precision(precision);
  const int B = 2, T = 16, V = spec->vocab_size();
  std::mt19937 rng(3);
  StepResult r;
  model->zero_grad();
  for (int micro = 0; micro < 2; ++micro) {
    std::vector<int32_t> in(B * T), tg(B * T);
    for (int i = 0; i < B * T; ++i)
      in[i] = static_cast<int32_t>(rng() % V), tg[i] = static_cast<int32_t>(rng() % V);
    tg[5] = -1;  // an ignored position
    r.losses.push_back(model->forward({in.data(), tg.data(), B, T}));
    model->backward(1.0f);
  }
  Tensor h = Tensor::zeros({n}, DType::F32);
  h.copy_from(model->grad_buffer());
  r.grads.assign(h.data<float>(), h.data<float>() + n);
  return r;
}
}  // namespace

class cuda_model : public ::testing::TestWithParam<std::tuple<const char*, Precision>> {};

TEST_P(cuda_model, a_model_on_the_gpu_trains_as_on_the_cpu) {
  MT_REQUIRE_GPU();
  const auto [preset, precision] = GetParam();
  const StepResult cpu = train_on(preset, precision, Device::cpu());
  const StepResult gpu = train_on(preset, precision, Device::cuda(0));
  // f32: every sum is f32 in another order, a few ulps per op through a
  // tiny model: 1e-5 relative on the loss. bf16: both round the same f32
  // masters to bf16, but a different f32 accumulation order can flip an
  // activation's bf16 rounding (2^-8): 1e-2 relative.
  const bool f32 = precision == Precision::FP32;
  const double loss_tol = f32 ? 1e-5 : 1e-2, grad_tol = f32 ? 1e-4 : 5e-2;
  for (size_t i = 0; i < cpu.losses.size(); ++i)
    EXPECT_NEAR(gpu.losses[i], cpu.losses[i], loss_tol * std::fabs(cpu.losses[i])) << "micro " << i;
  float largest = 0.f;
  for (float g : cpu.grads) largest = std::max(largest, std::fabs(g));
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  for (size_t i = 0; i < cpu.grads.size(); ++i)
    ASSERT_NEAR(gpu.grads[i], cpu.grads[i], grad_tol * largest) << preset << " gradient " << i;
}

INSTANTIATE_TEST_SUITE_P(families, cuda_model,
                         ::testing::Combine(::testing::Values("tiny", "llama-tiny"),
                                            ::testing::Values(Precision::FP32, Precision::BF16)));
