#include "spec/spec.h"

#include <cctype>
#include <charconv>
#include <cmath>

#include "common/hash.h"
#include "common/parse.h"
#include "common/random.h"
#include "records/record.h"
#include "spec/spec_keys.h"

namespace joaderfs {
namespace {

// The keys ParseJobSpec takes (spec/spec_keys.h), for the hint after an
// unknown one.
const std::vector<std::string_view>& SpecKeyNames() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> v;
    for (const SpecKeyInfo& k : kSpecKeys) v.push_back(k.name);
    return v;
  }();
  return names;
}

std::vector<std::string_view> Split(std::string_view s, std::string_view separators) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find_first_of(separators, i), s.size());
    if (j > i) parts.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return parts;
}

// "A-B" or "A" (= "A-A") with A <= B <= limit - 1.
bool ParseRange(std::string_view s, uint64_t limit, std::pair<uint64_t, uint64_t>* out) {
  const size_t dash = s.find('-');
  auto first = ParseUint(s.substr(0, dash));
  auto last = dash == std::string_view::npos ? first : ParseUint(s.substr(dash + 1));
  if (!first || !last || *first > *last || *last >= limit) return false;
  *out = {*first, *last};
  return true;
}

Status ParseSubset(std::string_view value, const Catalog& catalog, SubsetSpec* out) {
  SubsetSpec s;
  s.text = std::string(value);
  const size_t colon = value.find(':');
  const std::string_view kind = value.substr(0, colon);
  const std::string_view arg = colon == std::string_view::npos ? "" : value.substr(colon + 1);
  if (value == "all") {
    s.kind = SubsetSpec::Kind::kAll;
  } else if (kind == "classes" || kind == "range") {
    const bool classes = kind == "classes";
    s.kind = classes ? SubsetSpec::Kind::kClasses : SubsetSpec::Kind::kRange;
    const uint64_t limit = classes ? catalog.num_classes() : catalog.size();
    const auto parts = Split(arg, ",");
    if (parts.empty() || (!classes && parts.size() != 1)) {
      return Status::InvalidArgument("subset=" + s.text + ": expected " + std::string(kind) +
                                     ":A-B");
    }
    for (std::string_view p : parts) {
      std::pair<uint64_t, uint64_t> r;
      if (!ParseRange(p, limit, &r)) {
        return Status::InvalidArgument("subset=" + s.text + ": '" + std::string(p) +
                                       "' is not a range A-B within 0-" +
                                       std::to_string(limit - 1));
      }
      s.ranges.push_back(r);
    }
  } else if (kind == "random") {
    s.kind = SubsetSpec::Kind::kRandom;
    const auto parts = Split(arg, ":");
    const auto fraction = parts.size() == 2 ? ParseDouble(parts[0]) : std::nullopt;
    const auto seed = parts.size() == 2 ? ParseUint(parts[1]) : std::nullopt;
    if (!fraction || !seed || *fraction <= 0 || *fraction > 1) {
      return Status::InvalidArgument("subset=" + s.text +
                                     ": expected random:F:SEED with 0 < F <= 1");
    }
    if (std::llround(*fraction * static_cast<double>(catalog.size())) == 0) {
      return Status::InvalidArgument("subset=" + s.text + " selects no sample");
    }
    s.fraction = *fraction;
    s.seed = *seed;
  } else {
    return Status::InvalidArgument("subset=" + s.text +
                                   ": expected all, classes:A-B, range:A-B or random:F:SEED");
  }
  if (s.kind == SubsetSpec::Kind::kClasses && ResolveSubset(s, catalog).isEmpty()) {
    return Status::InvalidArgument("subset=" + s.text + " selects no sample");
  }
  *out = std::move(s);
  return Status::Ok();
}

// "A-B" with lo <= A <= B <= hi (lo_open: lo itself excluded).
bool ParseDoubleRange(std::string_view s, double lo, double hi, std::pair<double, double>* out) {
  const size_t dash = s.find('-');
  if (dash == std::string_view::npos) return false;
  const auto first = ParseDouble(s.substr(0, dash));
  const auto last = ParseDouble(s.substr(dash + 1));
  if (!first || !last || !(*first > lo) || *first > *last || *last > hi) return false;
  *out = {*first, *last};
  return true;
}

Status ParseCrop(std::string_view value, AugmentSpec* out) {
  AugmentSpec a = *out;
  const AugmentSpec defaults;
  a.scale_min = defaults.scale_min;
  a.scale_max = defaults.scale_max;
  a.ratio_min = defaults.ratio_min;
  a.ratio_max = defaults.ratio_max;
  if (value == "center") {
    a.crop = AugmentSpec::Crop::kCenter;
  } else if (value == "random") {
    a.crop = AugmentSpec::Crop::kRandom;
  } else if (value.starts_with("random:")) {
    a.crop = AugmentSpec::Crop::kRandom;
    const auto parts = Split(value.substr(7), ":");
    std::pair<double, double> scale, ratio;
    if (parts.size() != 2 || !ParseDoubleRange(parts[0], 0, 1, &scale) ||
        !ParseDoubleRange(parts[1], 0, 1e3, &ratio)) {
      return Status::InvalidArgument(
          "crop=" + std::string(value) +
          ": expected center, random or random:SMIN-SMAX:RMIN-RMAX with 0 < SMIN <= SMAX <= 1 "
          "and 0 < RMIN <= RMAX <= 1000");
    }
    std::tie(a.scale_min, a.scale_max) = scale;
    std::tie(a.ratio_min, a.ratio_max) = ratio;
  } else {
    return Status::InvalidArgument("crop=" + std::string(value) +
                                   ": expected center, random or random:SMIN-SMAX:RMIN-RMAX");
  }
  *out = a;
  return Status::Ok();
}

// The shortest text that parses back to `v`.
std::string ShortestDouble(double v) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

std::string CropText(const AugmentSpec& a) {
  if (a.crop == AugmentSpec::Crop::kCenter) return "center";
  const AugmentSpec defaults;
  if (a.scale_min == defaults.scale_min && a.scale_max == defaults.scale_max &&
      a.ratio_min == defaults.ratio_min && a.ratio_max == defaults.ratio_max) {
    return "random";
  }
  return "random:" + ShortestDouble(a.scale_min) + "-" + ShortestDouble(a.scale_max) + ":" +
         ShortestDouble(a.ratio_min) + "-" + ShortestDouble(a.ratio_max);
}

}  // namespace

uint64_t JobSeed(uint64_t mount_seed, std::string_view name) {
  return MixSeed(mount_seed, Fnv1a(kFnv1aBasis, name.data(), name.size()));
}

std::optional<uint64_t> JobSpec::record_bytes() const {
  // A TFRecord's varints vary in length with its values.
  if (format != RecordFormat::kPlain || size == 0) return std::nullopt;
  return RecordHeader::RecordBytes(uint64_t{3} * size * size);
}

std::string JobSpec::ToString() const {
  // Unlimited epochs has no value to write: the key is left out, so that
  // what the file shows can be written back.
  return "subset=" + subset.text + "\nsize=" + std::to_string(size) +
         (epochs ? "\nepochs=" + std::to_string(epochs) : "") +
         "\nwindow=" + std::to_string(window) + "\ncrop=" + CropText(augment) +
         "\nflip=" + ShortestDouble(augment.flip) + "\nseed=" + std::to_string(augment.seed) +
         (ranks ? "\nranks=" + std::to_string(ranks) + "\ndrop_last=" + (drop_last ? "1" : "0")
                : "") +
         (format == RecordFormat::kTfRecord ? "\nformat=tfrecord" : "") +
         (group.empty() ? "" : "\ngroup=" + group) + "\n";
}

Status ParseJobSpec(std::string_view text, const Catalog& catalog, const JobSpec& base,
                    JobSpec* out) {
  JobSpec spec = base;
  const auto tokens = Split(text, " \t\r\n");
  if (tokens.empty()) return Status::InvalidArgument("empty spec");
  for (std::string_view token : tokens) {
    const size_t eq = token.find('=');
    if (eq == std::string_view::npos) {
      return Status::InvalidArgument("'" + std::string(token) + "' is not key=value");
    }
    const std::string key(token.substr(0, eq));
    const std::string_view value = token.substr(eq + 1);
    auto number = ParseUint(value);
    if (key == "subset") {
      Status s = ParseSubset(value, catalog, &spec.subset);
      if (!s.ok()) return s;
    } else if (key == "size") {
      if (!number || *number > kMaxSize) {
        return Status::InvalidArgument("size=" + std::string(value) + ": expected 0-" +
                                       std::to_string(kMaxSize));
      }
      spec.size = static_cast<uint32_t>(*number);
    } else if (key == "epochs") {
      // Epochs 0 to epochs-1 are numbered in records' 32-bit field.
      if (!number || *number == 0 || *number > kMaxRecordEpoch + 1) {
        return Status::InvalidArgument("epochs=" + std::string(value) + ": expected 1-" +
                                       std::to_string(kMaxRecordEpoch + 1) +
                                       " (records number epochs in 32 bits)");
      }
      spec.epochs = *number;
    } else if (key == "window") {
      if (!number || *number == 0 || *number > kMaxWindow) {
        return Status::InvalidArgument("window=" + std::string(value) + ": expected 1-" +
                                       std::to_string(kMaxWindow));
      }
      spec.window = static_cast<uint32_t>(*number);
    } else if (key == "ranks") {
      if (!number || *number == 0 || *number > kMaxRanks) {
        return Status::InvalidArgument("ranks=" + std::string(value) + ": expected 1-" +
                                       std::to_string(kMaxRanks));
      }
      spec.ranks = static_cast<uint32_t>(*number);
    } else if (key == "drop_last") {
      if (value != "0" && value != "1") {
        return Status::InvalidArgument("drop_last=" + std::string(value) + ": expected 0 or 1");
      }
      spec.drop_last = value == "1";
    } else if (key == "format") {
      if (value != "plain" && value != "tfrecord") {
        return Status::InvalidArgument("format=" + std::string(value) +
                                       ": expected plain or tfrecord");
      }
      spec.format = value == "plain" ? RecordFormat::kPlain : RecordFormat::kTfRecord;
    } else if (key == "crop") {
      Status s = ParseCrop(value, &spec.augment);
      if (!s.ok()) return s;
    } else if (key == "flip") {
      const auto p = ParseDouble(value);
      if (!p || *p < 0 || *p > 1) {
        return Status::InvalidArgument("flip=" + std::string(value) +
                                       ": expected a probability 0-1");
      }
      spec.augment.flip = *p;
    } else if (key == "group") {
      // A name the spec file can show and every daemon spells alike.
      if (value.empty() || value.size() > 64 ||
          value.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                  "_.-") != std::string_view::npos) {
        return Status::InvalidArgument("group=" + std::string(value) +
                                       ": expected 1-64 of A-Z a-z 0-9 _ . -");
      }
      spec.group = std::string(value);
    } else if (key == "seed") {
      if (!number) {
        return Status::InvalidArgument("seed=" + std::string(value) +
                                       ": expected a non-negative integer");
      }
      spec.augment.seed = *number;
    } else {
      return Status::InvalidArgument("unknown key '" + key + "'" + DidYouMean(key, SpecKeyNames()));
    }
  }
  *out = std::move(spec);
  return Status::Ok();
}

Roaring DrawRandomSubset(uint32_t n, uint64_t k, uint64_t seed) {
  // Floyd's algorithm draws m of n uniformly in m steps; for k past half of
  // n it draws the n - k ids left out, so no draw touches more than n / 2.
  const bool draw_left_out = k > n / 2;
  const uint64_t m = draw_left_out ? n - k : k;
  Roaring drawn;
  Rng rng(seed);
  for (uint64_t j = n - m; j < n; ++j) {
    const auto pick = static_cast<uint32_t>(rng.Below(j + 1));
    if (!drawn.addChecked(pick)) drawn.add(static_cast<uint32_t>(j));
  }
  if (!draw_left_out) return drawn;
  Roaring ids;
  ids.addRange(0, n);
  return ids - drawn;
}

Roaring ShuffledPrefixSubset(const SubsetSpec& subset, const Catalog& catalog) {
  const auto n = static_cast<uint32_t>(catalog.size());
  std::vector<SampleId> all(n);
  for (SampleId i = 0; i < n; ++i) all[i] = i;
  Rng rng(subset.seed);
  rng.Shuffle(all);
  Roaring ids;
  ids.addMany(static_cast<size_t>(std::llround(subset.fraction * n)), all.data());
  ids.runOptimize();
  return ids;
}

Roaring ResolveSubset(const SubsetSpec& subset, const Catalog& catalog) {
  Roaring ids;
  const uint32_t n = static_cast<uint32_t>(catalog.size());
  switch (subset.kind) {
    case SubsetSpec::Kind::kAll: ids.addRange(0, n); break;
    case SubsetSpec::Kind::kClasses: ids = catalog.IdsWithLabels(subset.ranges); break;
    case SubsetSpec::Kind::kRange:
      for (const auto& [first, last] : subset.ranges) ids.addRange(first, last + 1);
      break;
    case SubsetSpec::Kind::kRandom:
      ids = DrawRandomSubset(n, static_cast<uint64_t>(std::llround(subset.fraction * n)),
                             subset.seed);
      break;
    case SubsetSpec::Kind::kIds: break;
  }
  ids.runOptimize();
  return ids;
}

Status ParseIdList(std::string_view text, const Catalog& catalog, Roaring* out, size_t first_line,
                   std::string_view file) {
  Roaring ids;
  size_t lineno = first_line - 1;
  for (size_t i = 0; i < text.size();) {
    const size_t end = std::min(text.find('\n', i), text.size());
    std::string_view line = text.substr(i, end - i);
    i = end + 1;
    ++lineno;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty()) continue;
    auto id = ParseUint(line);
    if (id && *id < catalog.size()) {
      ids.add(static_cast<uint32_t>(*id));
    } else if (auto found = catalog.FindRelpath(line)) {
      ids.add(*found);
    } else {
      return Status::InvalidArgument(std::string(file) + ": line " + std::to_string(lineno) +
                                     ": '" + std::string(line) +
                                     "' is neither an id nor a relpath");
    }
  }
  *out = std::move(ids);
  return Status::Ok();
}

bool IsValidJobName(std::string_view name) {
  if (name.empty() || name.size() > 64 || name == "." || name == "..") return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

}  // namespace joaderfs
