#include "meshtrain/doctor/link_probes.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "meshtrain/core/error.h"

namespace meshtrain::doctor {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Both ends run this; `lead` (the lower rank) starts each round trip.
LinkResult exchange(comm::Communicator& c, int peer, bool lead, const DoctorOptions& o) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  LinkResult r;
  r.a = std::min(c.rank(), peer);
  r.b = std::max(c.rank(), peer);
  const bool cut = link_cut(r.a, r.b);
  try {
    std::vector<double> trips;
    double token = 0;
    for (int i = 0; i < o.pings + 2; ++i) {  // two untimed first
      const auto t0 = Clock::now();
      if (lead) {
        if (!cut) c.send(&token, 1, DType::F64, peer).wait(timeout);
        c.recv(&token, 1, DType::F64, peer).wait(timeout);
      } else {
        c.recv(&token, 1, DType::F64, peer).wait(timeout);
        if (!cut) c.send(&token, 1, DType::F64, peer).wait(timeout);
      }
      if (i >= 2) trips.push_back(seconds_since(t0));
    }
    r.latency_us = *std::min_element(trips.begin(), trips.end()) / 2 * 1e6;
    const size_t n = static_cast<size_t>(o.link_bytes);
    std::vector<char> out(n, 1), in(n, 0);
    double best = 1e30;
    for (int i = 0; i < 5; ++i) {
      const auto t0 = Clock::now();
      comm::Work s = c.send(out.data(), n, DType::U8, peer);
      comm::Work v = c.recv(in.data(), n, DType::U8, peer);
      s.wait(timeout);
      v.wait(timeout);
      best = std::min(best, seconds_since(t0));
    }
    r.gbps = static_cast<double>(n) / best / 1e9;
  } catch (const Error& e) {
    r.ok = false;
    r.error = e.what();
  }
  return r;
}

}  // namespace

bool link_cut(int a, int b) {
  const char* e = std::getenv("MESHTRAIN_TEST_BROKEN_LINK");
  if (!e || !*e) return false;
  const std::string s = e;
  const size_t dash = s.find('-');
  if (dash == std::string::npos) return false;
  const int x = std::atoi(s.substr(0, dash).c_str()), y = std::atoi(s.c_str() + dash + 1);
  return (x == a && y == b) || (x == b && y == a);
}

std::vector<std::vector<std::pair<int, int>>> pair_rounds(int n) {
  // Circle method over an even count (a bye for odd n): one rank fixed, the
  // others rotate; round k pairs position i with position m - 1 - i.
  const int m = n % 2 == 0 ? n : n + 1;
  std::vector<int> pos(m);
  for (int i = 0; i < m; ++i) pos[i] = i;
  std::vector<std::vector<std::pair<int, int>>> rounds;
  for (int k = 0; k + 1 < m; ++k) {
    std::vector<std::pair<int, int>> round;
    for (int i = 0; i < m / 2; ++i) {
      const int a = pos[i], b = pos[m - 1 - i];
      if (a < n && b < n) round.emplace_back(std::min(a, b), std::max(a, b));
    }
    rounds.push_back(round);
    std::rotate(pos.begin() + 1, pos.end() - 1, pos.end());
  }
  return rounds;
}

std::vector<LinkResult> probe_links(comm::Communicator& c, const DoctorOptions& o) {
  std::vector<LinkResult> mine;
  for (const auto& round : pair_rounds(c.size())) {
    for (const auto& [a, b] : round) {
      if (c.rank() != a && c.rank() != b) continue;
      LinkResult r = exchange(c, c.rank() == a ? b : a, c.rank() == a, o);
      if (c.rank() == a) mine.push_back(r);
    }
  }
  return mine;
}

}  // namespace meshtrain::doctor
