// A model placed on a device (its parameters, gradients, activations,
// workspace, 16-bit copy and staged token ids in that device's memory) trains
// exactly as on the CPU, and never touches that memory from the host: on the
// guarded test device (kernels/guarded_device.h) a host access dies and a
// kernel handed host memory fails, so passing here means every op went
// through the kernel table or the device runtime. GPT and Llama, f32 and bf16.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "meshtrain/core/tensor.h"
#include "meshtrain/nn/model_registry.h"

using namespace meshtrain;

namespace {
struct StepResult {
  std::vector<float> losses, grads;
};

std::vector<float> to_host(const Tensor& t) {
  Tensor h = Tensor::zeros({t.numel()}, DType::F32);
  h.copy_from(t);
  return {h.data<float>(), h.data<float>() + t.numel()};
}

// Two micro-batches of forward and backward from the seed's weights, on `device`.
StepResult train_on(const std::string& preset, Precision precision, Device device) {
  auto spec = model_preset(preset);
  const int64_t n = spec->num_params();
  auto cpu_model = spec->build({});
  cpu_model->init_weights(11);  // initialized on the host, copied to the device
  ModelBuffers buffers;
  buffers.params = Tensor::zeros({n}, DType::F32, MemCategory::Parameters, device);
  buffers.grads = Tensor::zeros({n}, DType::F32, MemCategory::Gradients, device);
  buffers.params.copy_from(cpu_model->param_buffer());
  auto model = spec->build(buffers);
  model->set_precision(precision);
  const int B = 2, T = 16, V = spec->vocab_size();
  std::mt19937 rng(3);
  StepResult r;
  model->zero_grad();
  for (int micro = 0; micro < 2; ++micro) {
    std::vector<int32_t> in(B * T), tg(B * T);
    for (int i = 0; i < B * T; ++i) in[i] = static_cast<int32_t>(rng() % V), tg[i] = static_cast<int32_t>(rng() % V);
    tg[5] = -1;  // an ignored position
    r.losses.push_back(model->forward({in.data(), tg.data(), B, T}));
    model->backward(1.0f);
  }
  r.grads = to_host(model->grad_buffer());
  return r;
}
}  // namespace

class device_placement : public ::testing::TestWithParam<std::tuple<const char*, Precision>> {};

TEST_P(device_placement, a_model_on_the_guarded_device_trains_as_on_the_cpu) {
  const auto [preset, precision] = GetParam();
  const StepResult cpu = train_on(preset, precision, Device::cpu());
  const StepResult dev = train_on(preset, precision, Device::guarded());
  EXPECT_EQ(dev.losses, cpu.losses);  // the same kernels on the same values: the same bits
  ASSERT_EQ(dev.grads.size(), cpu.grads.size());
  for (size_t i = 0; i < cpu.grads.size(); ++i)
    ASSERT_EQ(dev.grads[i], cpu.grads[i]) << preset << " gradient " << i;
}

INSTANTIATE_TEST_SUITE_P(families, device_placement,
                         ::testing::Combine(::testing::Values("tiny", "llama-tiny"),
                                            ::testing::Values(Precision::FP32, Precision::BF16)));
