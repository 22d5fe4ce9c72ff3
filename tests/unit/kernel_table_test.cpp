// test-links: mt_kernels
// The kernel seam (kernels/kernel_table.h): the CPU table is today's kernels
// themselves (no wrapper in between), and a device without kernels in this
// build is a clear error, not a crash.
#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/kernel_table.h"

using namespace meshtrain;

TEST(kernel_table, cpu_table_is_the_cpu_kernels) {
  const KernelTable& k = kernels_for(Device::cpu());
  EXPECT_TRUE(k.device.is_cpu());
  EXPECT_EQ(k.matmul_forward, &cpu::matmul_forward);
  EXPECT_EQ(k.attention_backward, &cpu::attention_backward);
  EXPECT_EQ(k.rmsnorm_backward, &cpu::rmsnorm_backward);
  EXPECT_EQ(k.adamw_step, &cpu::adamw_step);
  EXPECT_EQ(k.to_half, &cpu::to_half);
  // Every entry is set (a missing one would be a null call at run time).
  const auto* p = reinterpret_cast<const void* const*>(&k.matmul_forward);
  const size_t n = (sizeof(KernelTable) - offsetof(KernelTable, matmul_forward)) / sizeof(void*);
  for (size_t i = 0; i < n; ++i) EXPECT_NE(p[i], nullptr) << "entry " << i;
}

TEST(kernel_table, a_device_without_kernels_is_an_error_naming_it) {
  try {
    kernels_for(Device::cuda(1));
    ADD_FAILURE() << "no error for cuda:1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:1"), std::string::npos) << e.what();
  }
}
