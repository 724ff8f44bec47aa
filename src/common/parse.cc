#include "common/parse.h"

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

}  // namespace joaderfs
