// test-links: mt_kernels
// The kernel seam (kernels/kernel_table.h): every entry of the CPU table runs
// the CPU kernel of its name (same bits), the row ops the models route through
// it do what the table says, and a device without kernels in this build is a
// clear error, not a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/convert.h"
#include "meshtrain/kernels/cpu/matmul.h"
#include "meshtrain/kernels/cpu/reduce.h"
#include "meshtrain/kernels/kernel_table.h"

using namespace meshtrain;

namespace {
std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}
}  // namespace

TEST(kernel_table, every_cpu_entry_is_set_and_runs_the_cpu_kernel) {
  const KernelTable& k = kernels_for(Device::cpu());
  EXPECT_TRUE(k.device.is_cpu());
  const auto* p = reinterpret_cast<const void* const*>(&k.matmul_forward);
  const size_t n = (sizeof(KernelTable) - offsetof(KernelTable, matmul_forward)) / sizeof(void*);
  for (size_t i = 0; i < n; ++i) EXPECT_NE(p[i], nullptr) << "entry " << i;

  const int64_t N = 7, C = 13, OC = 5;
  const auto x = random_floats(N * C, 1), w = random_floats(OC * C, 2), b = random_floats(OC, 3);
  std::vector<float> via_table(N * OC), direct(N * OC);
  k.matmul_forward(Stream::cpu(), via_table.data(), x.data(), w.data(), b.data(), N, C, OC, false);
  cpu::matmul_forward(direct.data(), x.data(), w.data(), b.data(), N, C, OC, false);
  EXPECT_EQ(via_table, direct);
  EXPECT_EQ(k.sum_squares(Stream::cpu(), x.data(), N * C), cpu::sum_squares(x.data(), N * C));
  std::vector<uint16_t> h1(N * C), h2(N * C);
  k.to_half(Stream::cpu(), HalfFormat::BF16, x.data(), h1.data(), N * C);
  cpu::to_half(HalfFormat::BF16, x.data(), h2.data(), N * C);
  EXPECT_EQ(h1, h2);
}

TEST(kernel_table, embedding_rows_of_one_vocabulary_shard) {
  const KernelTable& k = kernels_for(Device::cpu());
  const int64_t V = 6, C = 3, v_begin = 2, v_rows = 3, N = 5;
  const auto table = random_floats(v_rows * C, 4);  // rows 2, 3, 4 of the vocabulary
  const std::vector<int32_t> ids = {0, 2, 4, 5, 3};
  std::vector<float> out(N * C, -1.0f);
  k.embedding_lookup(Stream::cpu(), out.data(), ids.data(), table.data(), nullptr, HalfFormat::BF16,
                     v_begin, v_rows, N, C);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t r = ids[i] - v_begin;
      const float want = (r >= 0 && r < v_rows) ? table[r * C + c] : 0.0f;
      EXPECT_EQ(out[i * C + c], want) << "token " << i << " (id " << ids[i] << ") channel " << c;
    }
  // From the 16-bit copy: the widened bf16 rows.
  std::vector<uint16_t> half(table.size());
  cpu::to_half(HalfFormat::BF16, table.data(), half.data(), static_cast<int64_t>(half.size()));
  k.embedding_lookup(Stream::cpu(), out.data(), ids.data(), nullptr, half.data(), HalfFormat::BF16,
                     v_begin, v_rows, N, C);
  EXPECT_EQ(out[1 * C], bf16_to_f32(half[0]));
  EXPECT_EQ(out[0], 0.0f);
  // The gradient: rows of this shard accumulate their tokens' gradients.
  const auto dout = random_floats(N * C, 5);
  std::vector<float> dtable(v_rows * C, 1.0f);
  k.embedding_accumulate(Stream::cpu(), dtable.data(), dout.data(), ids.data(), v_begin, v_rows, N,
                         C);
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(dtable[0 * C + c], 1.0f + dout[1 * C + c]);  // id 2: token 1
    EXPECT_EQ(dtable[1 * C + c], 1.0f + dout[4 * C + c]);  // id 3: token 4
    EXPECT_EQ(dtable[2 * C + c], 1.0f + dout[2 * C + c]);  // id 4: token 2
  }
  (void)V;
}

TEST(kernel_table, periodic_rows_add_and_sum_in_row_order) {
  const KernelTable& k = kernels_for(Device::cpu());
  const int64_t N = 7, C = 4, period = 3, first = 2;
  const auto rows = random_floats(period * C, 6), d = random_floats(N * C, 7);
  std::vector<float> out(N * C, 0.5f);
  k.add_periodic_rows(Stream::cpu(), out.data(), rows.data(), N, C, period, first);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(out[i * C + c], 0.5f + rows[((first + i) % period) * C + c]);
  std::vector<float> drows(period * C, 0.25f);
  k.sum_periodic_rows(Stream::cpu(), drows.data(), d.data(), N, C, period);
  for (int64_t t = 0; t < period; ++t)
    for (int64_t c = 0; c < C; ++c) {
      float want = 0.25f;
      for (int64_t i = t; i < N; i += period) want += d[i * C + c];  // the order the op promises
      EXPECT_EQ(drows[t * C + c], want);
    }
}

TEST(kernel_table, a_device_without_kernels_is_an_error_naming_it) {
  try {
    kernels_for(Device::cuda(1));
    ADD_FAILURE() << "no error for cuda:1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:1"), std::string::npos) << e.what();
  }
}
