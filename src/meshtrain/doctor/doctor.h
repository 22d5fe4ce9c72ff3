// meshtrain doctor: the pre-flight check of a job's ranks before a long run.
// Every rank measures itself (GEMM rate, free memory and disk, clock offset
// from rank 0) and every pair of ranks exchanges messages (latency and
// bandwidth of each link, in rounds where each rank is in one pair, so links
// are measured alone); then the collectives against the communicator's
// alpha-beta model. Rank 0 gets the whole report and names what is slow or
// broken: a rank or link below `threshold` of the median, a link that did
// not answer within the timeout, a collective slower than the alpha-beta
// model with the links' own latency and bandwidth predicts.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshtrain/comm/communicator.h"

namespace meshtrain::doctor {

struct DoctorOptions {
  int64_t link_bytes = 4 << 20;  // per direction, per link
  int pings = 20;                // round trips per link for the latency
  double timeout_s = 10;         // a link that does not answer in this long is broken
  double threshold = 0.5;        // below this fraction of the median: slow
  double collective_slack = 4;   // measured above slack x what the links predict: slow
  std::string disk_dir = ".";    // where free disk is measured (the checkpoint directory)
  double min_disk_gb = 1;        // less free disk than this is a problem
};

struct RankFacts {
  int rank = 0, pid = 0, threads = 0;
  int cores = 0;  // CPUs this rank may run on (its affinity mask)
  std::string host, cpu, isa;
  double gemm_gflops = 0;
  double mem_available_gb = 0, disk_free_gb = 0;
  double clock_offset_ms = 0;  // this rank's clock minus rank 0's, estimated
};

struct LinkResult {
  int a = 0, b = 0;
  bool ok = true;
  double latency_us = 0;  // one way: half the fastest round trip (noise only adds)
  double gbps = 0;        // link_bytes each way, both directions at once, per direction; best of 5
  std::string error;
};

struct CollectiveResult {
  std::string op, algorithm;
  int64_t bytes = 0;
  double measured_us = 0;
  // The alpha-beta model's time for the algorithm the communicator picks:
  // with alpha and beta from the links measured here (median latency, median
  // bandwidth), and with the communicator's model (its calibration file, or
  // defaults when none was written).
  double expected_us = 0, model_us = 0;
  double busbw_gbps = 0;
};

struct DoctorReport {
  std::string transport;
  int world = 0;
  std::vector<RankFacts> ranks;
  std::vector<LinkResult> links;
  std::vector<CollectiveResult> collectives;
  std::vector<std::string> problems;  // each names the rank or link and the numbers
  // What explains numbers without failing the check (a host whose ranks'
  // threads outnumber its cores: latencies then include waiting for a core).
  std::vector<std::string> notes;
  double seconds = 0;
  bool healthy() const { return problems.empty(); }
  nlohmann::json to_json() const;
  std::string text() const;
};

// Collective over `comm`; the report is complete on rank 0 (the others hold
// their own facts only).
DoctorReport run_doctor(comm::Communicator& comm, const DoctorOptions& o);

// The verdicts from the measurements (filled into report.problems).
void judge(DoctorReport& report, const DoctorOptions& o);

}  // namespace meshtrain::doctor
