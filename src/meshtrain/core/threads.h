// Thread count of this process's compute pool (OpenMP and OpenBLAS share it).
#pragma once

namespace meshtrain {

// Default: cores / local processes (MESHTRAIN_LOCAL_WORLD_SIZE), at least 1.
int default_thread_count();
// Sets OpenMP's and OpenBLAS's thread counts together.
void set_thread_count(int n);
int thread_count();

}  // namespace meshtrain
