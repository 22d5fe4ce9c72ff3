// Uses meshtrain as a library: two local processes sum a vector with the
// communicator's allreduce, then the "tiny" GPT preset is built and
// its weights initialized.
// Prints "consumer: ok ..." and exits 0 when the sum is right.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/nn/model_registry.h"

namespace mc = meshtrain::comm;

static int run_rank(int rank, const std::string& job) {
  mc::Communicator comm = mc::Communicator::create_local(rank, 2, job);
  std::vector<float> v(1000, static_cast<float>(rank + 1));
  comm.allreduce(v.data(), v.size(), meshtrain::DType::F32).wait();
  for (float x : v)
    if (x != 3.0f) return 1;
  return 0;
}

int main() {
  const std::string job = "consumer" + std::to_string(getpid());
  pid_t child = fork();
  if (child == 0) _exit(run_rank(1, job));
  int mine = run_rank(0, job), status = 0;
  waitpid(child, &status, 0);
  if (mine != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::printf("consumer: allreduce gave a wrong sum\n");
    return 1;
  }
  auto spec = meshtrain::model_preset("tiny");
  std::unique_ptr<meshtrain::Model> model = spec->build();
  model->init_weights(1);
  std::printf("consumer: ok, allreduce over 2 processes; built %s\n", spec->describe().c_str());
  return 0;
}
