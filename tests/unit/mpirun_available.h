// Tests that run a job under a real mpirun need a build with the MPI
// transport and an mpirun on PATH; without either they skip, saying which.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace mpirun_test {

// Why an mpirun job cannot run here; empty when it can.
inline std::string mpirun_missing() {
#ifndef MESHTRAIN_HAVE_MPI
  return "built without the MPI transport (-DMESHTRAIN_WITH_MPI=OFF, or no MPI found at configure time)";
#else
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) return "mpirun not installed";
  return "";
#endif
}

}  // namespace mpirun_test

#define MT_SKIP_WITHOUT_MPIRUN()                                                        \
  do {                                                                                  \
    if (const std::string why = ::mpirun_test::mpirun_missing(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)
