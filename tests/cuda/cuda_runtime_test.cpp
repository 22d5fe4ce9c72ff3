// The CUDA device runtime on a real GPU (kernels/cuda/device_runtime_cuda.cpp):
// storage and tensors on cuda:0, copies both ways, streams and events, the
// caching allocator's steady state counted on the device, and the errors a
// user meets (a GPU that is not there, a device that is full). Every test
// skips with the reason where no GPU is visible.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <numeric>
#include <vector>

#include "meshtrain/core/device_runtime.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/kernels/kernel_table.h"
#include "cuda_test_util.h"

using namespace meshtrain;

namespace {
const Device kGpu = Device::cuda(0);
}  // namespace

TEST(cuda_runtime, tensors_on_the_gpu_are_zeroed_and_copy_both_ways) {
  MT_REQUIRE_GPU();
  Tensor d = Tensor::zeros({1000}, DType::F32, MemCategory::Activations, kGpu);
  EXPECT_EQ(d.device(), kGpu);
  Tensor h = Tensor::zeros({1000}, DType::F32);
  std::iota(h.data<float>(), h.data<float>() + 1000, 1.0f);
  Tensor back = Tensor::zeros({1000}, DType::F32);
  back.copy_from(d);  // fresh device memory reads as zeros
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(back.data<float>()[i], 0.0f) << i;
  d.copy_from(h);
  back.copy_from(d);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(back.data<float>()[i], static_cast<float>(i + 1)) << i;
  d.zero_();
  back.copy_from(d);
  EXPECT_EQ(back.data<float>()[999], 0.0f);
}

TEST(cuda_runtime, events_order_work_across_streams) {
  MT_REQUIRE_GPU();
  DeviceRuntime& r = runtime_for(kGpu);
  const KernelTable& k = kernels_for(kGpu);
  const Stream a = r.create_stream(kGpu), b = r.create_stream(kGpu);
  const Event done_a = r.create_event(kGpu);
  const size_t n = 1 << 22;
  Tensor x = Tensor::zeros({static_cast<int64_t>(n)}, DType::F32, MemCategory::Other, kGpu);
  Tensor y = Tensor::zeros({static_cast<int64_t>(n)}, DType::F32, MemCategory::Other, kGpu);
  std::vector<float> ones(n, 1.0f);
  r.copy(x.raw(), kGpu, ones.data(), Device::cpu(), n * 4, a);
  r.record(done_a, a);
  r.wait(b, done_a);  // b's copy must see a's data
  k.copy(b, y.data<float>(), x.data<float>(), static_cast<int64_t>(n));
  std::vector<float> out(n);
  r.copy(out.data(), Device::cpu(), y.raw(), kGpu, n * 4, b);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[n - 1], 1.0f);
  EXPECT_TRUE(r.query(done_a));
  r.destroy_event(done_a);
  r.destroy_stream(a);
  r.destroy_stream(b);
}

TEST(cuda_runtime, a_steady_state_loop_allocates_nothing_on_the_device) {
  MT_REQUIRE_GPU();
  DeviceRuntime& r = runtime_for(kGpu);
  auto one_step = [] {
    std::vector<Tensor> acts;
    for (int64_t n : {1000, 300000, 5000000, 77})
      acts.push_back(Tensor::zeros({n}, DType::F32, MemCategory::Activations, kGpu));
  };
  one_step();
  const int64_t raw = r.memory_stats(kGpu).raw_allocations;
  for (int i = 0; i < 20; ++i) one_step();
  EXPECT_EQ(r.memory_stats(kGpu).raw_allocations, raw) << "cudaMalloc in a steady-state step";
  const DeviceMemStats s = r.memory_stats(kGpu);
  EXPECT_GE(s.peak[static_cast<size_t>(MemCategory::Activations)], 4 * (1000 + 300000 + 5000000 + 77));
}

TEST(cuda_runtime, an_allocation_larger_than_the_gpu_names_the_request) {
  MT_REQUIRE_GPU();
  size_t free_b = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_b, &total), cudaSuccess);
  try {
    Tensor::zeros({static_cast<int64_t>(total / 2)}, DType::F32, MemCategory::OptimizerState, kGpu);
    ADD_FAILURE() << "no error for " << 2 * total << " bytes";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of memory on cuda:0"), std::string::npos) << m;
    EXPECT_NE(m.find("optimizer"), std::string::npos) << m;
  }
  // The device is still usable afterwards.
  Tensor ok = Tensor::zeros({1024}, DType::F32, MemCategory::Other, kGpu);
  EXPECT_EQ(ok.device(), kGpu);
}

TEST(cuda_runtime, a_gpu_that_is_not_there_is_an_error_naming_it) {
  MT_REQUIRE_GPU();
  const int n = runtime_for(kGpu).device_count();
  try {
    Tensor::zeros({16}, DType::F32, MemCategory::Other, Device::cuda(n));
    ADD_FAILURE() << "no error for cuda:" << n;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:" + std::to_string(n)), std::string::npos) << e.what();
  }
}
