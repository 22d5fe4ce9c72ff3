// A synthetic "language" whose entropy rate is known exactly, so a training
// run can be judged against the best achievable loss rather than a guess.
//
// The source is a probabilistic deterministic finite automaton (a unifilar
// Markov source): every state emits one byte with fixed probabilities, and the
// (state, byte) pair determines the next state. The state sequence is therefore
// recoverable from the bytes, and the entropy rate of the byte stream is
//     H = sum_s pi(s) * H(next byte | s)
// with pi the stationary distribution of the state chain (power iteration).
//
// The standard grammar (build()) writes word-like text: capitalised sentences
// ending in ". " (sometimes a newline), commas, a few vowel-initial function
// words ("of", "and", "into", ... spelled through a trie) and consonant-initial
// content words made of 1-3 syllables (onset consonant, a vowel whose
// distribution depends on the onset, an optional n/r/s coda). Onsets, codas and
// vowels are disjoint letter sets, which is what keeps the source unifilar.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "meshtrain/core/rng.h"

namespace meshtrain::data {

struct SynthEdge {
  uint8_t byte = 0;
  double prob = 0.0;
  int32_t next = 0;  // state entered after emitting `byte`
};

struct SynthState {
  std::string name;  // for debugging and error messages
  std::vector<SynthEdge> edges;
};

class SynthGrammar {
 public:
  // The standard word-like grammar; probabilities are drawn from grammar_seed,
  // so one grammar seed always means one language and one entropy rate.
  static SynthGrammar build(uint64_t grammar_seed = 1);

  // Any automaton: throws meshtrain::Error unless every state's probabilities
  // are positive and sum to 1, its bytes are distinct (unifilar) and every
  // `next` is a valid state.
  SynthGrammar(std::vector<SynthState> states, int start_state);

  int num_states() const { return static_cast<int>(states_.size()); }
  const SynthState& state(int s) const { return states_.at(s); }
  int start_state() const { return start_; }

  // The state entered when `state` emits `byte`, or -1 when it cannot.
  int next_state(int state, uint8_t byte) const { return next_[state][byte]; }
  // Probability that `state` emits `byte` (0 when it cannot).
  double prob(int state, uint8_t byte) const { return prob_[state][byte]; }

  // Stationary distribution of the state chain (lazy power iteration, so it
  // converges even for a periodic chain).
  std::vector<double> stationary_distribution() const;
  // Entropy of the next byte given each state, in nats.
  std::vector<double> state_entropies_nats() const;
  // The exact entropy rate of the byte stream, nats per byte (= per token).
  double entropy_rate_nats() const;

 private:
  std::vector<SynthState> states_;
  std::vector<std::array<int32_t, 256>> next_;
  std::vector<std::array<double, 256>> prob_;
  int start_ = 0;
};

// Draws bytes from a grammar (its own copy), starting at its start state.
class SynthSampler {
 public:
  SynthSampler(const SynthGrammar& grammar, uint64_t seed);
  uint8_t next();
  void generate(std::span<uint16_t> out);
  std::string generate_text(int64_t n);
  int state() const { return state_; }
  const SynthGrammar& grammar() const { return grammar_; }

 private:
  SynthGrammar grammar_;
  std::vector<std::vector<double>> cumulative_;  // per state, per edge
  Rng rng_;
  int state_;
};

}  // namespace meshtrain::data
