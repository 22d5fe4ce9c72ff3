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
