#include "meshtrain/core/threads.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

extern "C" void openblas_set_num_threads(int);

namespace meshtrain {

int default_thread_count() {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 1) cores = 1;
  long local = 1;
  if (const char* s = std::getenv("MESHTRAIN_LOCAL_WORLD_SIZE")) local = std::max(1L, std::atol(s));
  return static_cast<int>(std::max(1L, cores / local));
}

void set_thread_count(int n) {
  n = std::max(1, n);
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int thread_count() { return omp_get_max_threads(); }

}  // namespace meshtrain
