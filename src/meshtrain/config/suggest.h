// "Did you mean" for misspelled names: the closest candidate by edit distance.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain {

// Optimal-string-alignment distance: insertions, deletions, substitutions and
// transpositions of neighbours ("warmpu" -> "warmup" is 1) each cost 1.
int edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, if it is close enough to be a likely typo.
// Dotted names also match on their last component ("lr" -> "train.lr").
std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates);

// " (did you mean 'X'?)" or "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace meshtrain
