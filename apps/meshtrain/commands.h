// Each subcommand lives in its own cmd_*.cpp and registers itself here.
#pragma once
#include <CLI/CLI.hpp>

namespace meshtrain::launch {
struct ElasticOptions;
}

namespace meshtrain::cli {

void register_train(CLI::App& app);
void register_sample(CLI::App& app);
void register_eval(CLI::App& app);    // cmd_eval.cpp
void register_tokenize(CLI::App& app);
void register_data(CLI::App& app);
void register_data_images(CLI::App* data_cmd);  // data prepare-images (cmd_data_images.cpp)
void register_bench(CLI::App& app);      // creates "bench", calls the two below
void register_bench_train(CLI::App& bench);
void register_bench_comm(CLI::App& bench);
void register_bench_ckpt(CLI::App& bench);
void register_bench_gemm(CLI::App& bench);
void register_bench_attention(CLI::App& bench);
void register_bench_matmul(CLI::App& bench);
void register_bench_images(CLI::App& bench);  // cmd_bench_images.cpp
void register_launch(CLI::App& app);
void register_doctor(CLI::App& app);  // cmd_doctor.cpp
void register_trace_dump(CLI::App& app);  // cmd_trace_dump.cpp
// --max-restarts, --min-nproc, --heartbeat-timeout, ... (shared by launch and train).
void add_elastic_options(CLI::App* cmd, launch::ElasticOptions& opts);
void register_report(CLI::App& app);
void register_ckpt(CLI::App& app);
void register_plan(CLI::App& app);
void register_schedule(CLI::App& app);

}  // namespace meshtrain::cli
