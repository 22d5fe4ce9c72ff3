#include "commands.h"

namespace meshtrain::cli {

void register_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks that print figures next to a peer's");
  bench->require_subcommand(1);
  register_bench_train(*bench);
  register_bench_comm(*bench);
  register_bench_ckpt(*bench);
  register_bench_gemm(*bench);
  register_bench_attention(*bench);
  register_bench_matmul(*bench);
  register_bench_images(*bench);
}

}  // namespace meshtrain::cli
