#include "meshtrain/comm/world.h"

#include <cstdlib>
#include <string>

#include "meshtrain/comm/types.h"

namespace meshtrain::comm {

namespace {
bool get_int(const char* name, int& out) {
  const char* s = std::getenv(name);
  if (!s || !*s) return false;
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (*end != '\0' || v < 0) throw UsageError(fmt::format("{}='{}' is not a non-negative integer", name, s));
  out = static_cast<int>(v);
  return true;
}
std::string get_str(const char* name) {
  const char* s = std::getenv(name);
  return s ? s : "";
}
// Slurm's SLURM_STEP_TASKS_PER_NODE ("2(x3),1": 2 tasks on each of 3 nodes,
// then 1): the count on node `node`, or `fallback` when unset.
int tasks_on_node(const std::string& spec, int node, int fallback) {
  if (spec.empty()) return fallback;
  int first = 0;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    long count = std::strtol(item.c_str(), &end, 10);
    long repeat = 1;
    if (*end == '(' && end[1] == 'x') {  // "N(xR)": N tasks on each of R nodes
      repeat = std::strtol(end + 2, &end, 10);
      if (*end == ')') ++end;
      else repeat = 0;  // unclosed: refused below
    }
    if (count < 1 || repeat < 1 || *end != '\0')
      throw UsageError(fmt::format("SLURM_STEP_TASKS_PER_NODE='{}' is not Slurm's form (e.g. 2(x3),1)", spec));
    if (node < first + repeat) return static_cast<int>(count);
    first += static_cast<int>(repeat);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  throw UsageError(fmt::format("SLURM_STEP_TASKS_PER_NODE='{}' has no node {}", spec, node));
}
}  // namespace

WorldInfo world_from_env() {
  WorldInfo w;
  if (get_int(kEnvRank, w.rank)) {
    w.source = "meshtrain";
    MT_CHECK(get_int(kEnvWorldSize, w.size), "{} is set but {} is not", kEnvRank, kEnvWorldSize);
    w.local_rank = w.rank;
    w.local_size = w.size;
    get_int(kEnvLocalRank, w.local_rank);
    get_int(kEnvLocalWorldSize, w.local_size);
  } else if (get_int("OMPI_COMM_WORLD_RANK", w.rank)) {
    w.source = "openmpi";
    get_int("OMPI_COMM_WORLD_SIZE", w.size);
    w.local_rank = w.rank;
    w.local_size = w.size;
    get_int("OMPI_COMM_WORLD_LOCAL_RANK", w.local_rank);
    get_int("OMPI_COMM_WORLD_LOCAL_SIZE", w.local_size);
  } else if (get_int("PMI_RANK", w.rank)) {
    w.source = "pmi";
    get_int("PMI_SIZE", w.size);
    w.local_rank = w.rank;
    w.local_size = w.size;
    get_int("MPI_LOCALRANKID", w.local_rank);
    get_int("MPI_LOCALNRANKS", w.local_size);
  } else if (std::getenv("PMIX_RANK") && get_int("SLURM_PROCID", w.rank)) {
    // `srun --mpi=pmix`: Slurm started the ranks and serves MPI_Init through
    // PMIx, so the job talks MPI between nodes (shared memory within one).
    w.source = "slurm-pmix";
    get_int("SLURM_NTASKS", w.size);
    w.local_rank = 0;
    get_int("SLURM_LOCALID", w.local_rank);
    int node = 0;
    get_int("SLURM_NODEID", node);
    w.local_size = tasks_on_node(get_str("SLURM_STEP_TASKS_PER_NODE"), node, w.local_rank + 1);
    w.job_id = get_str("SLURM_JOB_ID") + "." + get_str("SLURM_STEP_ID");
  } else if (get_int("SLURM_PROCID", w.rank)) {
    w.source = "slurm";
    get_int("SLURM_NTASKS", w.size);
    w.local_rank = w.rank;
    w.local_size = w.size;
    get_int("SLURM_LOCALID", w.local_rank);
    int tasks_per_node = 0;
    if (get_int("SLURM_NTASKS_PER_NODE", tasks_per_node)) w.local_size = tasks_per_node;
    w.job_id = get_str("SLURM_JOB_ID") + "." + get_str("SLURM_STEP_ID");
  } else {
    w.source = "none";
  }
  std::string id = get_str(kEnvJobId);
  if (!id.empty()) w.job_id = id;
  MT_CHECK(w.size >= 1 && w.rank < w.size, "rank {} is outside a world of {} ranks", w.rank, w.size);
  MT_CHECK(w.local_size >= 1 && w.local_rank < w.local_size,
           "local rank {} is outside a node of {} ranks", w.local_rank, w.local_size);
  return w;
}

}  // namespace meshtrain::comm
