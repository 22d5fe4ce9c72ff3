#include "meshtrain/config/suggest.h"

#include <algorithm>
#include <fmt/format.h>

namespace meshtrain {

int edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

static std::string_view last_component(std::string_view s) {
  const size_t dot = s.rfind('.');
  return dot == std::string_view::npos ? s : s.substr(dot + 1);
}

std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates) {
  int best = INT32_MAX;
  const std::string* best_candidate = nullptr;
  for (const std::string& c : candidates) {
    // A right name in the wrong section costs one more than a typo in place.
    const int score = std::min(edit_distance(word, c),
                               edit_distance(last_component(word), last_component(c)) + 1);
    if (score < best) {
      best = score;
      best_candidate = &c;
    }
  }
  const int allowed = std::max<int>(2, static_cast<int>(last_component(word).size()) / 3);
  if (!best_candidate || best > allowed) return std::nullopt;
  return *best_candidate;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const auto m = closest_match(word, candidates);
  return m ? fmt::format(" (did you mean '{}'?)", *m) : std::string();
}

}  // namespace meshtrain
