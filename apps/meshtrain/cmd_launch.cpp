// `meshtrain launch -n N [--max-restarts R] [--min-nproc M] [--heartbeat-timeout S] -- COMMAND...`
// Starts N local ranks of COMMAND (launch/launcher.h); with --max-restarts,
// restarts the whole job when a rank fails (launch/elastic.h).
#include <string>
#include <vector>

#include "commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/launch/elastic.h"

namespace meshtrain::cli {

void add_elastic_options(CLI::App* cmd, launch::ElasticOptions& o) {
  cmd->add_option("--grace", o.launch.grace_s,
                  "Seconds between SIGTERM and SIGKILL when stopping the other ranks")
      ->capture_default_str();
  cmd->add_option("--max-restarts", o.max_restarts,
                  "Restart the whole job (new job id; the program resumes from its latest "
                  "checkpoint) up to R times when a rank fails")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--min-nproc", o.min_nproc,
                  "When the same rank slot keeps failing (2 times in a row), continue with one rank "
                  "fewer, down to M ranks")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--heartbeat-timeout", o.launch.heartbeat_timeout_s,
                  "Seconds without a heartbeat (one per training step) after which a training rank "
                  "counts as hung; 0 = off. Startup and checkpoint loading before the first step "
                  "do not count")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--startup-timeout", o.launch.startup_timeout_s,
                  "Seconds a rank may take to begin its first training step; 0 = no limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--restart-log", o.restart_log,
                  "JSON-lines file receiving every restart with its cause (default: "
                  "meshtrain-restarts.jsonl for launch, TELEMETRY_DIR/restarts.jsonl for train)");
}

void register_launch(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "launch",
      "Start N local ranks of COMMAND with MESHTRAIN_RANK/_WORLD_SIZE/_LOCAL_RANK/"
      "_LOCAL_WORLD_SIZE/_JOB_ID set; stop all when one fails, and with --max-restarts "
      "start the job again");
  auto opts = std::make_shared<launch::ElasticOptions>();
  opts->launch.heartbeat_timeout_s = 300;
  opts->restart_log = "meshtrain-restarts.jsonl";
  cmd->add_option("-n,--nproc", opts->launch.nproc, "Number of processes")
      ->required()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("!--no-prefix", opts->launch.prefix_output, "Do not prefix output lines with [rank r]");
  add_elastic_options(cmd, *opts);
  auto after_dashes = std::make_shared<std::vector<std::string>>();
  cmd->add_option("command", *after_dashes, "The program and its arguments (after --)");
  cmd->footer(
      "Example: meshtrain launch -n 4 --max-restarts 3 --min-nproc 2 -- meshtrain train --config "
      "c.json --set checkpoint.resume=auto\nRestarts are logged to stderr and to --restart-log.");
  cmd->callback([opts, after_dashes] {
    opts->launch.command = *after_dashes;
    auto& c = opts->launch.command;
    if (!c.empty() && c.front() == "--") c.erase(c.begin());
    if (!c.empty() && c.front().rfind("-", 0) == 0)
      throw UsageError(fmt::format("launch: unknown option '{}' (put the command after --)", c.front()));
    if (c.empty()) throw UsageError("launch needs a command: meshtrain launch -n N -- COMMAND...");
    if (opts->max_restarts == 0) opts->restart_log.clear();
    const launch::ElasticResult r = launch::run_elastic(*opts);
    if (r.exit_code != 0)
      throw Error(opts->max_restarts > 0 ? r.message
                                         : fmt::format("{}; the other ranks were stopped", r.message));
  });
}

}  // namespace meshtrain::cli
