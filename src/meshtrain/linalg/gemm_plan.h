// Picks the algorithm, grid and panel for a distributed multiply from the
// shapes, the number of ranks and a memory limit: each candidate's time is
// its local GEMM at the measured rate plus the communication the α-β model
// charges for its words and messages, less what its overlap hides (the
// transfers run under the multiplies, so only the excess and the first
// step's are exposed). `explain()` prints every candidate and why the
// chosen one won.
#pragma once
#include <string>
#include <vector>

#include "meshtrain/linalg/dist_gemm.h"

namespace meshtrain::linalg {

struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  int ranks = 1;
  DType dtype = DType::F64;
  int64_t nb = 256;                 // block / panel width for SUMMA and 2.5D
  double memory_limit_bytes = 0;    // per rank; 0: no limit
  double gflops_per_rank = 50;      // the local GEMM rate (measured by the caller)
  double alpha_us = 5;              // per message
  double beta_us_per_byte = 2e-4;   // per byte a rank moves
};

struct GemmCandidate {
  GemmAlgo algo = GemmAlgo::Summa;
  int p = 1, q = 1, c = 1;
  int64_t panel = 0;
  double words_bytes = 0, messages = 0;  // per rank, traffic.h's convention
  double local_s = 0, comm_s = 0, exposed_s = 0, total_s = 0, memory_bytes = 0;
  bool fits = true;
  std::string grid() const;
  MatrixLayout c_layout(int64_t m, int64_t n) const;  // where the candidate keeps C
};

struct GemmPlan {
  GemmCandidate best;
  std::vector<GemmCandidate> candidates;  // every one considered, cheapest first
  std::string explain(const GemmProblem& p) const;
};

GemmPlan plan_gemm(const GemmProblem& problem);

// The words (bytes) per rank the algorithm's formula gives, in traffic.h's
// convention, for the lower-bound column of the benchmark: 2D (m k / p +
// k n / q), 2.5D that over c, 1D the travelling operand, split-k C.
double formula_bytes(const GemmCandidate& c, const GemmProblem& p);

}  // namespace meshtrain::linalg
