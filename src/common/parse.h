// Parsing of the numbers users type in options and specs. Each function
// accepts the whole string or nothing.

#ifndef JOADERFS_COMMON_PARSE_H_
#define JOADERFS_COMMON_PARSE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace joaderfs {

// A non-negative decimal integer, without sign or spaces.
std::optional<uint64_t> ParseUint(std::string_view s);

// A byte size: digits with an optional K, M, G or T suffix (powers of 1024,
// an optional trailing "B" or "iB" allowed), e.g. "512M", "8G", "1048576".
std::optional<uint64_t> ParseSize(std::string_view s);

// A decimal fraction such as "0.5" or "1".
std::optional<double> ParseDouble(std::string_view s);

// The name of `known` nearest to `name` (optimal string alignment:
// insertions, deletions, substitutions and swaps of neighbours cost 1),
// within a third of the name's length and at least 1 edit, as
// " (did you mean other?)"; empty when none is that near. For the hints of
// unknown mount options and spec keys.
std::string DidYouMean(std::string_view name, const std::vector<std::string_view>& known);

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_PARSE_H_
