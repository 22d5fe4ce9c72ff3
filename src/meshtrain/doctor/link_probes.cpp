#include "meshtrain/doctor/link_probes.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <tuple>

#include "meshtrain/core/error.h"

namespace meshtrain::doctor {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Both ends run this over their pair's own communicator (`pair`: 2 ranks,
// the lower world rank first), whose timeout is the doctor's --timeout-s: a link that
// does not answer fails that communicator only, and every operation has
// ended, by success or by the timeout, before its buffers go.
LinkResult exchange(comm::Communicator& pair, int a, int b, const DoctorOptions& o) {
  LinkResult r;
  r.a = a;
  r.b = b;
  const int peer = 1 - pair.rank();
  const bool lead = pair.rank() == 0, cut = link_cut(a, b);
  try {
    std::vector<double> trips;
    double token = 0;
    for (int i = 0; i < o.pings + 2; ++i) {  // two untimed first
      const auto t0 = Clock::now();
      if (lead) {
        if (!cut) pair.send(&token, 1, DType::F64, peer).wait();
        pair.recv(&token, 1, DType::F64, peer).wait();
      } else {
        pair.recv(&token, 1, DType::F64, peer).wait();
        if (!cut) pair.send(&token, 1, DType::F64, peer).wait();
      }
      if (i >= 2) trips.push_back(seconds_since(t0));
    }
    r.latency_us = *std::min_element(trips.begin(), trips.end()) / 2 * 1e6;
    const size_t n = static_cast<size_t>(o.link_bytes);
    std::vector<char> out(n, 1), in(n, 0);
    double best = 1e30;
    for (int i = 0; i < 5; ++i) {
      const auto t0 = Clock::now();
      comm::Work s = pair.send(out.data(), n, DType::U8, peer);
      comm::Work v = pair.recv(in.data(), n, DType::U8, peer);
      s.wait();
      v.wait();
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
    // Each pair of the round gets a communicator of its own (split is
    // collective: every rank takes part, those without a pair with no colour).
    int color = -1, a = -1, b = -1;
    for (size_t p = 0; p < round.size(); ++p)
      if (round[p].first == c.rank() || round[p].second == c.rank()) {
        color = static_cast<int>(p);
        std::tie(a, b) = round[p];
      }
    comm::Communicator pair = c.split(color, c.rank() == a ? 0 : 1, o.timeout_s);
    if (color < 0) continue;
    LinkResult r = exchange(pair, a, b, o);
    if (c.rank() == a) mine.push_back(r);
  }
  return mine;
}

}  // namespace meshtrain::doctor
