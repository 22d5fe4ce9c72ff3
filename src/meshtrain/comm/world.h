// Who am I in the job: rank, size and node-local placement, read from the
// environment meshtrain's launcher sets (MESHTRAIN_*), or from mpirun
// (OMPI_COMM_WORLD_*, PMI_*) or Slurm (SLURM_PROCID, ...). A process started
// by hand is rank 0 of 1.
#pragma once
#include <string>

namespace meshtrain::comm {

struct WorldInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string job_id;   // MESHTRAIN_JOB_ID (shared-memory names derive from it)
  // "meshtrain", "openmpi", "pmi", "slurm-pmix" (srun --mpi=pmix), "slurm"
  // (srun without MPI: one node) or "none"
  std::string source;
  bool under_mpi() const { return source == "openmpi" || source == "pmi" || source == "slurm-pmix"; }
};

WorldInfo world_from_env();

// Names of the environment contract, set by `meshtrain launch`.
inline constexpr const char* kEnvRank = "MESHTRAIN_RANK";
inline constexpr const char* kEnvWorldSize = "MESHTRAIN_WORLD_SIZE";
inline constexpr const char* kEnvLocalRank = "MESHTRAIN_LOCAL_RANK";
inline constexpr const char* kEnvLocalWorldSize = "MESHTRAIN_LOCAL_WORLD_SIZE";
inline constexpr const char* kEnvJobId = "MESHTRAIN_JOB_ID";

}  // namespace meshtrain::comm
