#include "commands.h"

namespace meshtrain::cli {

void register_ckpt(CLI::App& app) {
  app.add_subcommand("ckpt", "(not built yet)");
}

}  // namespace meshtrain::cli
