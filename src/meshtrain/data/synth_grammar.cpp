#include "meshtrain/data/synth_grammar.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "meshtrain/core/error.h"

namespace meshtrain::data {

namespace {

// Function words: vowel-initial, so their first byte never looks like a
// content word's onset consonant.
const std::vector<std::string> kFunctionWords = {
    "a", "an", "and", "as", "at", "in", "into", "is", "it", "of", "on", "onto", "or", "out",
    "up", "upon"};
const std::string kOnsets = "bdfghklmptvz";  // syllable-initial consonants
const std::string kVowels = "aeiou";
const std::string kCodas = "nrs";            // syllable-final consonants (not onsets)
constexpr int kMaxSyllables = 3;

// Probability that a content word ends after syllable k (1-based), and that a
// syllable takes a coda; the last syllable always ends the word.
constexpr double kEndAfterSyllable[kMaxSyllables + 1] = {0.0, 0.35, 0.6, 1.0};
constexpr double kCodaProb = 0.25;
// How a content word ends: space, comma, period.
constexpr double kSpaceProb = 0.82, kCommaProb = 0.06, kPeriodProb = 0.12;
// After a period: a space, or a newline (paragraph end).
constexpr double kNewlineAfterPeriod = 0.1;

// Positive weights with a seeded spread, normalised: skew 0 is uniform, larger
// skews make a few outcomes dominate (as in real word and letter frequencies).
std::vector<double> random_distribution(Rng& rng, size_t n, double skew) {
  std::vector<double> w(n);
  double sum = 0;
  for (auto& x : w) sum += (x = std::exp(skew * rng.normal()));
  for (auto& x : w) x /= sum;
  return w;
}

class Builder {
 public:
  int add(std::string name) {
    states_.push_back({std::move(name), {}});
    return static_cast<int>(states_.size()) - 1;
  }
  void edge(int from, char byte, double prob, int to) {
    if (prob > 0) states_[from].edges.push_back({static_cast<uint8_t>(byte), prob, to});
  }
  std::vector<SynthState> take() { return std::move(states_); }

 private:
  std::vector<SynthState> states_;
};

}  // namespace

SynthGrammar SynthGrammar::build(uint64_t grammar_seed) {
  Rng rng(grammar_seed);
  const std::vector<double> word_p = random_distribution(rng, kFunctionWords.size(), 1.0);
  const std::vector<double> onset_p = random_distribution(rng, kOnsets.size(), 1.0);
  const std::vector<double> coda_p = random_distribution(rng, kCodas.size(), 0.5);
  std::vector<std::vector<double>> vowel_p;  // per onset: the vowel that follows it
  for (size_t i = 0; i < kOnsets.size(); ++i) vowel_p.push_back(random_distribution(rng, 5, 1.5));

  Builder b;
  // Word-start contexts, each with its own chance of a function word next.
  const int sentence_start = b.add("sentence-start");
  const int after_function = b.add("after-function-word");
  const int after_content = b.add("after-content-word");
  const int after_comma = b.add("after-comma");
  const int period = b.add("period");
  const int comma = b.add("comma");
  const std::vector<std::pair<int, double>> starts = {
      {sentence_start, 0.3}, {after_function, 0.1}, {after_content, 0.4}, {after_comma, 0.5}};

  // Function words: one state per proper prefix (trie node); mass = total
  // probability of the words below it.
  std::map<std::string, int> node;
  std::map<std::string, double> mass;
  for (size_t w = 0; w < kFunctionWords.size(); ++w)
    for (size_t len = 1; len <= kFunctionWords[w].size(); ++len)
      mass[kFunctionWords[w].substr(0, len)] += word_p[w];
  for (const auto& [prefix, m] : mass) node[prefix] = b.add("func:" + prefix);
  for (const auto& [prefix, m] : mass) {
    const int from = node[prefix];
    for (size_t w = 0; w < kFunctionWords.size(); ++w)
      if (kFunctionWords[w] == prefix) b.edge(from, ' ', word_p[w] / m, after_function);
    for (char c = 'a'; c <= 'z'; ++c) {
      auto it = mass.find(prefix + c);
      if (it != mass.end()) b.edge(from, c, it->second / m, node[prefix + c]);
    }
  }

  // Content words: after-onset states V[k][onset], after-vowel A[k], after-coda D[k].
  std::vector<std::vector<int>> V(kMaxSyllables + 1);
  std::vector<int> A(kMaxSyllables + 1), D(kMaxSyllables + 1);
  for (int k = 1; k <= kMaxSyllables; ++k) {
    for (char c : kOnsets) V[k].push_back(b.add(fmt::format("syl{}:{}", k, c)));
    A[k] = b.add(fmt::format("syl{}:vowel", k));
    D[k] = b.add(fmt::format("syl{}:coda", k));
  }
  auto word_end = [&](int from, double p) {
    b.edge(from, ' ', p * kSpaceProb, after_content);
    b.edge(from, ',', p * kCommaProb, comma);
    b.edge(from, '.', p * kPeriodProb, period);
  };
  auto next_syllable = [&](int from, int k, double p) {
    for (size_t i = 0; i < kOnsets.size(); ++i) b.edge(from, kOnsets[i], p * onset_p[i], V[k + 1][i]);
  };
  for (int k = 1; k <= kMaxSyllables; ++k) {
    for (size_t i = 0; i < kOnsets.size(); ++i)
      for (size_t v = 0; v < kVowels.size(); ++v) b.edge(V[k][i], kVowels[v], vowel_p[i][v], A[k]);
    const double end = kEndAfterSyllable[k];
    for (size_t i = 0; i < kCodas.size(); ++i) b.edge(A[k], kCodas[i], kCodaProb * coda_p[i], D[k]);
    word_end(A[k], (1 - kCodaProb) * end);
    word_end(D[k], end);
    if (k < kMaxSyllables) {
      next_syllable(A[k], k, (1 - kCodaProb) * (1 - end));
      next_syllable(D[k], k, 1 - end);
    }
  }

  // Word starts: a function word's first letter or a content word's first onset,
  // capitalised at the start of a sentence.
  for (const auto& [start, p_function] : starts) {
    const bool capital = start == sentence_start;
    auto letter = [&](char c) { return capital ? static_cast<char>(std::toupper(c)) : c; };
    for (const auto& [prefix, m] : mass)
      if (prefix.size() == 1) b.edge(start, letter(prefix[0]), p_function * m, node[prefix]);
    for (size_t i = 0; i < kOnsets.size(); ++i)
      b.edge(start, letter(kOnsets[i]), (1 - p_function) * onset_p[i], V[1][i]);
  }
  b.edge(period, ' ', 1 - kNewlineAfterPeriod, sentence_start);
  b.edge(period, '\n', kNewlineAfterPeriod, sentence_start);
  b.edge(comma, ' ', 1.0, after_comma);
  return SynthGrammar(b.take(), sentence_start);
}

SynthGrammar::SynthGrammar(std::vector<SynthState> states, int start_state)
    : states_(std::move(states)), start_(start_state) {
  const int n = num_states();
  MT_CHECK(n > 0, "a grammar needs at least one state");
  MT_CHECK(start_ >= 0 && start_ < n, "start state {} out of range [0, {})", start_, n);
  next_.resize(n);
  prob_.resize(n);
  for (int s = 0; s < n; ++s) {
    next_[s].fill(-1);
    prob_[s].fill(0.0);
    double sum = 0;
    MT_CHECK(!states_[s].edges.empty(), "grammar state '{}' emits nothing", states_[s].name);
    for (const SynthEdge& e : states_[s].edges) {
      MT_CHECK(e.prob > 0, "grammar state '{}': byte {} has probability {}", states_[s].name,
               e.byte, e.prob);
      MT_CHECK(e.next >= 0 && e.next < n, "grammar state '{}': next state {} out of range",
               states_[s].name, e.next);
      MT_CHECK(next_[s][e.byte] < 0,
               "grammar state '{}' emits byte {} twice: the source would not be unifilar",
               states_[s].name, e.byte);
      next_[s][e.byte] = e.next;
      prob_[s][e.byte] = e.prob;
      sum += e.prob;
    }
    MT_CHECK(std::abs(sum - 1.0) < 1e-12, "grammar state '{}': probabilities sum to {}",
             states_[s].name, sum);
  }
}

std::vector<double> SynthGrammar::stationary_distribution() const {
  const int n = num_states();
  std::vector<double> pi(n, 1.0 / n), next(n);
  // pi <- (pi + pi P) / 2 has the same fixed point as pi P and cannot oscillate.
  for (int iter = 0; iter < 1'000'000; ++iter) {
    std::fill(next.begin(), next.end(), 0.0);
    for (int s = 0; s < n; ++s) {
      next[s] += 0.5 * pi[s];
      for (const SynthEdge& e : states_[s].edges) next[e.next] += 0.5 * pi[s] * e.prob;
    }
    double sum = 0, diff = 0;
    for (int s = 0; s < n; ++s) sum += next[s];
    for (int s = 0; s < n; ++s) {
      next[s] /= sum;
      diff += std::abs(next[s] - pi[s]);
    }
    pi.swap(next);
    if (diff < 1e-15) break;
  }
  return pi;
}

std::vector<double> SynthGrammar::state_entropies_nats() const {
  std::vector<double> h(num_states(), 0.0);
  for (int s = 0; s < num_states(); ++s)
    for (const SynthEdge& e : states_[s].edges) h[s] -= e.prob * std::log(e.prob);
  return h;
}

double SynthGrammar::entropy_rate_nats() const {
  const std::vector<double> pi = stationary_distribution();
  const std::vector<double> h = state_entropies_nats();
  double rate = 0;
  for (int s = 0; s < num_states(); ++s) rate += pi[s] * h[s];
  return rate;
}

SynthSampler::SynthSampler(const SynthGrammar& grammar, uint64_t seed)
    : grammar_(grammar), rng_(seed), state_(grammar.start_state()) {
  cumulative_.resize(grammar.num_states());
  for (int s = 0; s < grammar.num_states(); ++s) {
    double c = 0;
    for (const SynthEdge& e : grammar.state(s).edges) cumulative_[s].push_back(c += e.prob);
  }
}

uint8_t SynthSampler::next() {
  const auto& edges = grammar_.state(state_).edges;
  const auto& cum = cumulative_[state_];
  const double u = rng_.uniform_double();
  size_t i = std::upper_bound(cum.begin(), cum.end(), u) - cum.begin();
  if (i >= edges.size()) i = edges.size() - 1;  // u beyond a sum that rounded below 1
  state_ = edges[i].next;
  return edges[i].byte;
}

void SynthSampler::generate(std::span<uint16_t> out) {
  for (auto& t : out) t = next();
}

std::string SynthSampler::generate_text(int64_t n) {
  std::string s(static_cast<size_t>(n), '\0');
  for (auto& c : s) c = static_cast<char>(next());
  return s;
}

}  // namespace meshtrain::data
