// Each subcommand lives in its own cmd_*.cpp and registers itself here.
#pragma once
#include <CLI/CLI.hpp>

namespace meshtrain::cli {

void register_train(CLI::App& app);
void register_sample(CLI::App& app);
void register_data(CLI::App& app);
void register_bench(CLI::App& app);      // creates "bench", calls the two below
void register_bench_train(CLI::App& bench);
void register_bench_comm(CLI::App& bench);
void register_bench_gemm(CLI::App& bench);
void register_launch(CLI::App& app);
void register_report(CLI::App& app);
void register_ckpt(CLI::App& app);

}  // namespace meshtrain::cli
