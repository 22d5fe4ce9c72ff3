#include "commands.h"

namespace meshtrain::cli {

void register_bench_comm(CLI::App& bench) {
  bench.add_subcommand("comm", "(not built yet)");
}

}  // namespace meshtrain::cli
