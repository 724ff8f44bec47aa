#include "common/parse.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

namespace joaderfs {

std::optional<uint64_t> ParseUint(std::string_view s) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return {};
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return {};
  return v;
}

std::optional<uint64_t> ParseSize(std::string_view s) {
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  auto number = ParseUint(s.substr(0, digits));
  if (!number) return {};
  std::string suffix(s.substr(digits));
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (!suffix.empty() && suffix != "B") {
    const std::string units = "KMGT";
    const size_t unit = units.find(suffix[0]);
    const std::string rest = suffix.substr(1);
    if (unit == std::string::npos || !(rest.empty() || rest == "B" || rest == "IB")) return {};
    shift = 10 * static_cast<int>(unit + 1);
  }
  if (*number > (std::numeric_limits<uint64_t>::max() >> shift)) return {};
  return *number << shift;
}

std::optional<double> ParseDouble(std::string_view s) {
  if (s.empty()) return {};
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return {};
  return v;
}

namespace {

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string DidYouMean(std::string_view name, const std::vector<std::string_view>& known) {
  std::string_view best;
  size_t best_distance = std::max<size_t>(1, name.size() / 3) + 1;
  for (std::string_view candidate : known) {
    const size_t distance = EditDistance(name, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best.empty() ? std::string() : " (did you mean " + std::string(best) + "?)";
}

}  // namespace joaderfs
