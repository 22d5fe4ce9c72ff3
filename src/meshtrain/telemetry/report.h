// `meshtrain report RUN_DIR`: reads RUN_DIR/metrics.jsonl, prints the time
// breakdown table, and draws RUN_DIR/report.svg (loss curves, the
// evaluation's measures such as top-1 accuracy when the run has them, and a
// stacked time breakdown per step), a hand-written SVG with no dependencies.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meshtrain/telemetry/step_timer.h"

namespace meshtrain::telemetry {

// One step record of metrics.jsonl; absent keys stay empty (older runs lack
// the communication fields, single-rank runs the straggler fields).
struct MetricsRecord {
  int64_t step = 0;
  std::optional<double> loss, val_loss, lr, tokens_per_s, samples_per_s, mfu, model_tflops,
      peak_mem_mb, usd_per_million_tokens, usd_per_million_samples, straggler_lag_ms;
  bool has_time = false;  // step_ms present
  bool has_comm = false;  // comm_total_ms or comm_exposed_ms present
  StepBreakdown time;     // ms keys converted to seconds; missing parts are 0
  // The evaluation's measures besides the loss ("val_<name>" keys, fractions:
  // a classifier's top1, top5), in the record's order.
  std::vector<std::pair<std::string, double>> val_measures;
  int64_t tokens = 0, samples = 0;
  int devices = 0;
};

// Parses metrics.jsonl. Lines that are empty are skipped, objects without a
// "step" (other record kinds) are ignored; anything else malformed throws
// meshtrain::Error "<path>:<line>: ...". A file with no step records throws.
std::vector<MetricsRecord> read_metrics(const std::string& path);

struct ReportOptions {
  double price_per_device_hour = 0;  // > 0: add cost lines (overrides none in the file)
  int devices = 0;                   // 0: from the records ("devices"), else 1
  std::string title;                 // SVG title; default: the run directory's name
  // The launcher's restart log (RUN_DIR/restarts.jsonl), for each restart's
  // cause; "" or missing: restarts are seen from the re-run steps alone.
  std::string restart_log;
};

// The breakdown table and summary lines `meshtrain report` prints. A run that
// restarted is reported from the last record of each step, with every
// restart (cause, rank, steps run again) listed and marked on the picture
// (telemetry/run_attempts.h); the time and cost totals count every record.
std::string report_text(const std::vector<MetricsRecord>& recs, const ReportOptions& o = {});
// The report picture as an SVG document.
std::string report_svg(const std::vector<MetricsRecord>& recs, const ReportOptions& o = {});

struct ReportResult {
  std::string text;      // what to print
  std::string svg_path;  // RUN_DIR/report.svg
  int64_t records = 0;
};
// Reads RUN_DIR/metrics.jsonl, writes RUN_DIR/report.svg and merges
// RUN_DIR/trace_rank*.json into trace.json when present. Throws
// meshtrain::Error for a missing directory or metrics file.
ReportResult write_report(const std::string& run_dir, ReportOptions o = {});

}  // namespace meshtrain::telemetry
