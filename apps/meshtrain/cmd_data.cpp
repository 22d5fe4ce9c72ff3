#include "commands.h"

namespace meshtrain::cli {

void register_data(CLI::App& app) {
  app.add_subcommand("data", "(not built yet)");
}

}  // namespace meshtrain::cli
