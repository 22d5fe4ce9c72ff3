// test-links: mt_kernels
// The guarded test device (kernels/guarded_device.h): its tensors hold data,
// its kernels give the CPU's bits, and host code that touches its memory
// outside a kernel or a runtime copy dies with SIGSEGV, which is what lets
// the CPU suite prove a path never reads a device buffer directly.
#include <gtest/gtest.h>

#include <csignal>
#include <numeric>
#include <vector>

#include "meshtrain/core/device_runtime.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/kernels/guarded_device.h"
#include "meshtrain/kernels/kernel_table.h"

using namespace meshtrain;

namespace {
Tensor on_device(const std::vector<float>& v) {
  Tensor d = Tensor::zeros({static_cast<int64_t>(v.size())}, DType::F32, MemCategory::Other,
                           Device::guarded());
  Tensor h = Tensor::zeros({static_cast<int64_t>(v.size())}, DType::F32);
  std::copy(v.begin(), v.end(), h.data<float>());
  d.copy_from(h);
  return d;
}
std::vector<float> to_host(const Tensor& d) {
  Tensor h = Tensor::zeros({d.numel()}, DType::F32);
  h.copy_from(d);
  return {h.data<float>(), h.data<float>() + d.numel()};
}
}  // namespace

TEST(guarded_device, tensors_round_trip_and_kernels_give_the_cpu_bits) {
  const int64_t N = 5, C = 7, OC = 3;
  std::vector<float> x(N * C), w(OC * C), b(OC);
  std::iota(x.begin(), x.end(), 0.5f);
  std::iota(w.begin(), w.end(), -3.0f);
  std::iota(b.begin(), b.end(), 1.0f);
  const Tensor dx = on_device(x), dw = on_device(w), db = on_device(b);
  EXPECT_EQ(to_host(dx), x);
  Tensor dout = Tensor::zeros({N * OC}, DType::F32, MemCategory::Activations, Device::guarded());
  const KernelTable& k = kernels_for(Device::guarded());
  EXPECT_EQ(k.device, Device::guarded());
  k.matmul_forward(default_stream(Device::guarded()), dout.data<float>(), dx.data<float>(),
                   dw.data<float>(), db.data<float>(), N, C, OC, false);
  std::vector<float> want(N * OC);
  cpu::matmul_forward(want.data(), x.data(), w.data(), b.data(), N, C, OC, false);
  EXPECT_EQ(to_host(dout), want);
}

TEST(guarded_device, host_code_touching_device_memory_dies) {
  const Tensor d = on_device({1.0f, 2.0f});
  EXPECT_EXIT({ volatile float v = d.data<float>()[0]; (void)v; std::exit(0); },
              ::testing::KilledBySignal(SIGSEGV), "")
      << "a host read of guarded memory outside a kernel went unnoticed";
  EXPECT_EXIT({ d.data<float>()[1] = 3.0f; std::exit(0); }, ::testing::KilledBySignal(SIGSEGV), "");
  {
    GuardedAccess open;  // what a kernel holds while it runs
    EXPECT_EQ(d.data<float>()[1], 2.0f);
  }
}

TEST(guarded_device, a_steady_state_loop_maps_nothing_new) {
  DeviceRuntime& r = runtime_for(Device::guarded());
  auto step = [] {
    std::vector<Tensor> acts;
    for (int64_t n : {100, 70000, 600000})
      acts.push_back(Tensor::zeros({n}, DType::F32, MemCategory::Activations, Device::guarded()));
  };
  step();
  const int64_t raw = r.memory_stats(Device::guarded()).raw_allocations;
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(r.memory_stats(Device::guarded()).raw_allocations, raw);
}
