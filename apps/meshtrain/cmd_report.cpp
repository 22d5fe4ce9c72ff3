// `meshtrain report RUN_DIR`: the time breakdown table of a run and a picture
// of its loss curves and step-time breakdown (RUN_DIR/report.svg).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/telemetry/report.h"

namespace meshtrain::cli {

void register_report(CLI::App& app) {
  struct Opts {
    std::string run_dir;
    telemetry::ReportOptions report;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Print a run's time breakdown and draw RUN_DIR/report.svg (loss and time per step)");
  cmd->add_option("run_dir", o->run_dir, "Run directory holding metrics.jsonl")->required();
  cmd->add_option("--price-per-device-hour", o->report.price_per_device_hour,
                  "Price of one device for an hour (dollars): adds cost per million tokens/samples");
  cmd->add_option("--devices", o->report.devices,
                  "Devices the run used (default: from the records, else 1)");
  cmd->add_option("--title", o->report.title, "Title of the picture");
  cmd->callback([o]() {
    if (o->report.price_per_device_hour < 0)
      throw UsageError(fmt::format("--price-per-device-hour must be >= 0, got {}",
                                   o->report.price_per_device_hour));
    if (o->report.devices < 0)
      throw UsageError(fmt::format("--devices must be >= 0, got {}", o->report.devices));
    const telemetry::ReportResult r = telemetry::write_report(o->run_dir, o->report);
    fmt::print("{}", r.text);
    fmt::print("wrote {}\n", r.svg_path);
  });
}

}  // namespace meshtrain::cli
