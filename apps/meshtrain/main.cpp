// meshtrain: one binary, one subcommand per job (see `meshtrain --help`).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "commands.h"
#include "meshtrain/comm/flight_dump.h"
#include "meshtrain/comm/job_end.h"
#include "meshtrain/core/cpu_isa.h"
#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/cpu_libraries.h"
#include "meshtrain/train/cpu_report.h"

namespace {

// MESHTRAIN_ISA below the CPU's level caps OpenBLAS and oneDNN too. They read
// their caps from the environment when they load, which happened before main,
// so the binary sets the variables and re-executes itself once (children the
// launcher starts inherit them). Variables the user set are left as they are.
// The same path gives OpenBLAS the dispatch level's kernels on a CPU it does
// not know (it would run its generic SSE3 ones; cpu_libraries.h).
void cap_libraries_to_isa(char** argv) {
  if (std::getenv("MESHTRAIN_ISA_LIBS_CAPPED")) return;
  const meshtrain::Isa level = meshtrain::active_isa();  // validates MESHTRAIN_ISA
  const bool capped = meshtrain::isa_capped();
  if (!capped && !meshtrain::cpu::openblas_fell_back_to_generic(level)) return;
  bool changed = false;
  auto set = [&](const char* name, const char* value) {
    if (value && !std::getenv(name)) {
      setenv(name, value, 1);
      changed = true;
    }
  };
  set("OPENBLAS_CORETYPE", meshtrain::cpu::openblas_coretype_for(level));
  if (capped) set("ONEDNN_MAX_CPU_ISA", meshtrain::cpu::onednn_max_isa_for(level));
  setenv("MESHTRAIN_ISA_LIBS_CAPPED", "1", 1);
  if (changed) {
    std::fflush(nullptr);
    execv("/proc/self/exe", argv);
    // Could not re-execute (no /proc): run on, with the libraries uncapped.
    std::fprintf(stderr, "warning: could not re-execute to set OpenBLAS/oneDNN's CPU level\n");
  }
}

std::string version_text() {
  std::string s = "meshtrain " MESHTRAIN_VERSION "\n  build: " MESHTRAIN_BUILD_KIND "\n";
  for (const auto& [family, what] : meshtrain::cpu_report_rows())
    s += "  " + family + ": " + what + "\n";
#if defined(__x86_64__)
  s += "  (MESHTRAIN_ISA=scalar|avx2|avx512|avx512bf16 caps the dispatch level)";
#else
  s += "  (scalar is the only dispatch level built for this architecture)";
#endif
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    cap_libraries_to_isa(argv);
  } catch (const meshtrain::UsageError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  // SIGUSR1 prints the flight records (meshtrain trace-dump), never kills.
  meshtrain::comm::install_flight_dump_signal();
  CLI::App app{"meshtrain: train neural networks across many processes"};
  app.set_version_flag("--version", version_text, "Print the version, the CPU and the kernels chosen for it");
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  meshtrain::cli::register_train(app);
  meshtrain::cli::register_sample(app);
  meshtrain::cli::register_eval(app);
  meshtrain::cli::register_tokenize(app);
  meshtrain::cli::register_data(app);
  meshtrain::cli::register_bench(app);
  meshtrain::cli::register_launch(app);
  meshtrain::cli::register_doctor(app);
  meshtrain::cli::register_trace_dump(app);
  meshtrain::cli::register_report(app);
  meshtrain::cli::register_ckpt(app);
  meshtrain::cli::register_plan(app);
  meshtrain::cli::register_schedule(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Wrong flag or value: say what, show the usage, exit 2.
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fprintf(stderr, "run '%s --help' for usage\n", argv[0]);
    return 2;
  } catch (const meshtrain::UsageError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const meshtrain::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    meshtrain::comm::end_job_after_error(1);
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    meshtrain::comm::end_job_after_error(1);
    return 1;
  }
  return 0;
}
