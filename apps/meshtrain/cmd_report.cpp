#include "commands.h"

namespace meshtrain::cli {

void register_report(CLI::App& app) {
  app.add_subcommand("report", "(not built yet)");
}

}  // namespace meshtrain::cli
