#include "meshtrain/comm/flight_dump.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "meshtrain/core/debug_log.h"

namespace meshtrain::comm {
namespace {

struct Registry {
  std::mutex mu;
  std::map<int, std::function<std::string()>> dumps;
  int next = 0;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: the dump thread may outlive main
  return *r;
}

int g_pipe[2] = {-1, -1};

void on_usr1(int) {
  const char b = 1;
  const ssize_t ignored = ::write(g_pipe[1], &b, 1);
  (void)ignored;
}

void dump_thread() {
  char b;
  while (::read(g_pipe[0], &b, 1) == 1) {
    const std::string text = flight_dumps();
    if (text.empty()) continue;  // no communicator in this process (yet)
    std::fprintf(stderr, "%s", text.c_str());
    std::fflush(stderr);
    MT_LOG(Warn, Comm, "flight records on demand (SIGUSR1):\n{}", text);
  }
}

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (const char* e = std::getenv("MESHTRAIN_FLIGHT_SIGNAL"); e && std::strcmp(e, "0") == 0) return;
    if (::pipe(g_pipe) != 0) return;
    ::fcntl(g_pipe[0], F_SETFD, FD_CLOEXEC);
    ::fcntl(g_pipe[1], F_SETFD, FD_CLOEXEC);
    ::fcntl(g_pipe[1], F_SETFL, O_NONBLOCK);  // a burst of signals never blocks the handler
    std::thread(dump_thread).detach();
    struct sigaction sa {};
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &sa, nullptr);
  });
}

}  // namespace

void install_flight_dump_signal() { install_once(); }

int register_flight_dump(std::function<std::string()> dump) {
  install_once();
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.dumps[r.next] = std::move(dump);
  return r.next++;
}

void unregister_flight_dump(int id) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.dumps.erase(id);
}

std::string flight_dumps() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::string out;
  for (const auto& [id, dump] : r.dumps) out += dump();
  return out;
}

}  // namespace meshtrain::comm
