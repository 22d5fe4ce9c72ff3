#include "commands.h"

namespace meshtrain::cli {

void register_bench_train(CLI::App& bench) {
  bench.add_subcommand("train", "(not built yet)");
}

}  // namespace meshtrain::cli
