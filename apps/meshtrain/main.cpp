// meshtrain: one binary, one subcommand per job (see `meshtrain --help`).
#include <cstdio>
#include <exception>

#include "commands.h"
#include "meshtrain/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"meshtrain: train neural networks across many processes"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  meshtrain::cli::register_train(app);
  meshtrain::cli::register_sample(app);
  meshtrain::cli::register_data(app);
  meshtrain::cli::register_bench(app);
  meshtrain::cli::register_launch(app);
  meshtrain::cli::register_report(app);
  meshtrain::cli::register_ckpt(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
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
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
