#include <string>
#include <vector>

#include "commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/launch/launcher.h"

namespace meshtrain::cli {

void register_launch(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "launch",
      "Start N local ranks of COMMAND with MESHTRAIN_RANK/_WORLD_SIZE/_LOCAL_RANK/"
      "_LOCAL_WORLD_SIZE/_JOB_ID set; stop all when one fails");
  auto opts = std::make_shared<launch::LaunchOptions>();
  cmd->add_option("-n,--nproc", opts->nproc, "Number of processes")->required()->check(CLI::PositiveNumber);
  cmd->add_flag("!--no-prefix", opts->prefix_output, "Do not prefix output lines with [rank r]");
  cmd->add_option("--grace", opts->grace_s,
                  "Seconds between SIGTERM and SIGKILL when stopping the other ranks")
      ->capture_default_str();
  auto after_dashes = std::make_shared<std::vector<std::string>>();
  cmd->add_option("command", *after_dashes, "The program and its arguments (after --)");
  cmd->footer("Example: meshtrain launch -n 4 -- ./my_rank_program --flag");
  cmd->callback([opts, after_dashes] {
    opts->command = *after_dashes;
    if (!opts->command.empty() && opts->command.front() == "--") opts->command.erase(opts->command.begin());
    if (!opts->command.empty() && opts->command.front().rfind("-", 0) == 0)
      throw UsageError(fmt::format("launch: unknown option '{}' (put the command after --)",
                                   opts->command.front()));
    if (opts->command.empty()) throw UsageError("launch needs a command: meshtrain launch -n N -- COMMAND...");
    launch::LaunchResult r = launch::run_local(*opts);
    if (r.exit_code != 0) throw Error(fmt::format("{}; the other ranks were stopped", r.message));
  });
}

}  // namespace meshtrain::cli
