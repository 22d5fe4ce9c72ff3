#include "commands.h"

namespace meshtrain::cli {

void register_sample(CLI::App& app) {
  app.add_subcommand("sample", "(not built yet)");
}

}  // namespace meshtrain::cli
