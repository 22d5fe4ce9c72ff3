#include "commands.h"

namespace meshtrain::cli {

void register_launch(CLI::App& app) {
  app.add_subcommand("launch", "(not built yet)");
}

}  // namespace meshtrain::cli
