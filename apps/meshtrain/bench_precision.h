// `meshtrain bench train --precision bf16|fp16` (single process): the same
// model trained in fp32 and in the mixed precision side by side, steps
// interleaved, medians, tokens/s (samples/s for a dense model) of both and
// their ratio, and the GEMM path (a typical convolution's) the 16-bit side ran.
#pragma once
#include <string>

namespace meshtrain::cli {

struct PrecisionBenchArgs {
  std::string preset = "char-6L";
  int batch = 8, seq = 0, threads = 0, steps = 10, warmup = 2;
  bool json = false;
  std::string recompute = "none";
  std::string precision = "bf16";  // bf16 | fp16 (compared with fp32)
};

void run_bench_precision(const PrecisionBenchArgs& a);

}  // namespace meshtrain::cli
