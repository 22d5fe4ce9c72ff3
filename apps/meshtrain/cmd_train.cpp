#include "commands.h"

namespace meshtrain::cli {

void register_train(CLI::App& app) {
  app.add_subcommand("train", "(not built yet)");
}

}  // namespace meshtrain::cli
