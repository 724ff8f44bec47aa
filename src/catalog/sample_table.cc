#include "catalog/sample_table.h"

#include <algorithm>
#include <cstdint>

#include "common/hash.h"

namespace joaderfs {

uint32_t SampleTable::FolderIndex(std::string_view folder) {
  // Samples come folder by folder: most ask for the last one again.
  if (!runs_.empty() && FolderAt(runs_.back().folder) == folder) return runs_.back().folder;
  auto [it, added] =
      folder_index_.try_emplace(std::string(folder), static_cast<uint32_t>(folder_at_.size()));
  if (added) {
    folder_at_.push_back(static_cast<uint32_t>(folders_.size()));
    folders_.append(folder);
  }
  return it->second;
}

bool SampleTable::Add(std::string_view folder, std::string_view name, int32_t label) {
  if (folders_.size() + folder.size() > UINT32_MAX) return false;
  return AddIn(FolderIndex(folder), name, label, Identity(), kUnknown);
}

bool SampleTable::AddIn(uint32_t folder, std::string_view name, int32_t label,
                        const Identity& identity, uint8_t state) {
  if (names_.size() + name.size() > UINT32_MAX || identities_.size() >= UINT32_MAX - 1) {
    return false;
  }
  const auto id = static_cast<SampleId>(identities_.size());
  if (runs_.empty() || runs_.back().folder != folder || runs_.back().label != label) {
    runs_.push_back({id, folder, label});
  }
  name_at_.push_back(static_cast<uint32_t>(names_.size()));
  names_.append(name);
  identities_.push_back(identity);
  state_.push_back(state);
  return true;
}

bool SampleTable::Settle(SampleId id, const Identity& identity) const {
  std::atomic_ref state(state_[id]);
  uint8_t unknown = kUnknown;
  if (!state.compare_exchange_strong(unknown, kSetting, std::memory_order_acquire)) return false;
  identities_[id] = identity;
  state.store(kKnown, std::memory_order_release);
  return true;
}

bool SampleTable::FromParts(Parts p, SampleTable* out) {
  const auto ordered = [](const std::vector<uint32_t>& at, size_t limit) {
    if (!at.empty() && at[0] != 0) return false;
    for (size_t i = 0; i < at.size(); ++i) {
      if (at[i] > limit || (i > 0 && at[i] < at[i - 1])) return false;
    }
    return true;
  };
  if (p.names.size() > UINT32_MAX || p.folders.size() > UINT32_MAX ||
      p.name_at.size() >= UINT32_MAX - 1 || !ordered(p.name_at, p.names.size()) ||
      !ordered(p.folder_at, p.folders.size()) || p.runs.empty() != p.name_at.empty()) {
    return false;
  }
  for (size_t r = 0; r < p.runs.size(); ++r) {
    if (p.runs[r].folder >= p.folder_at.size() || p.runs[r].first >= p.name_at.size() ||
        (r == 0 ? p.runs[r].first != 0 : p.runs[r].first <= p.runs[r - 1].first)) {
      return false;
    }
  }
  SampleTable t;
  t.names_ = std::move(p.names);
  t.name_at_ = std::move(p.name_at);
  t.folders_ = std::move(p.folders);
  t.folder_at_ = std::move(p.folder_at);
  t.runs_ = std::move(p.runs);
  t.identities_.resize(t.name_at_.size());
  t.state_.resize(t.name_at_.size(), kUnknown);
  *out = std::move(t);
  return true;
}

bool SampleTable::AppendFrom(const SampleTable& other, SampleId from, size_t count, int32_t label) {
  for (SampleId id = from; id < from + count; ++id) {
    if (!Add(other.folder(id), other.name(id), label)) return false;
  }
  return true;
}

const SampleTable::Run& SampleTable::RunOf(SampleId id) const {
  const auto it = std::upper_bound(runs_.begin(), runs_.end(), id,
                                   [](SampleId i, const Run& r) { return i < r.first; });
  return *(it - 1);
}

std::vector<size_t> SampleTable::FolderBatches(size_t at_most) const {
  std::vector<size_t> out;
  for (size_t r = 0; r < runs_.size(); ++r) {
    if (r > 0 && runs_[r].folder == runs_[r - 1].folder && runs_[r].first - out.back() < at_most) {
      continue;
    }
    const size_t end = r + 1 < runs_.size() ? runs_[r + 1].first : size();
    for (size_t from = runs_[r].first; from < end; from += at_most) out.push_back(from);
  }
  return out;
}

std::string SampleTable::relpath(SampleId id) const {
  std::string out(folder(id));
  out.append(name(id));
  return out;
}

uint64_t SampleTable::fingerprint(SampleId id) const {
  const std::string_view f = folder(id), n = name(id);
  const Identity e = identity_known(id) ? identities_[id] : Identity();
  const char nul = 0;
  const uint64_t parts[] = {static_cast<uint64_t>(int64_t{label(id)}), e.size,
                            static_cast<uint64_t>(e.mtime_ns / 1'000'000'000),
                            static_cast<uint64_t>(e.mtime_ns % 1'000'000'000), e.inode};
  uint64_t h = Fnv1a(Fnv1a(Fnv1a(kFnv1aBasis, f.data(), f.size()), n.data(), n.size()), &nul, 1);
  return Fnv1a(h, parts, sizeof parts);
}

bool SampleTable::Equals(SampleId id, std::string_view relpath) const {
  const std::string_view f = folder(id), n = name(id);
  return relpath.size() == f.size() + n.size() && relpath.starts_with(f) && relpath.ends_with(n);
}

void SampleTable::Finish() {
  folder_index_ = {};
  names_.shrink_to_fit();
  name_at_.shrink_to_fit();
  identities_.shrink_to_fit();
  state_.shrink_to_fit();
  runs_.shrink_to_fit();
  folders_.shrink_to_fit();
  folder_at_.shrink_to_fit();
  by_relpath_.Reset(size());
  for (size_t r = 0; r < runs_.size(); ++r) {
    const SampleId end = r + 1 < runs_.size() ? runs_[r + 1].first : static_cast<SampleId>(size());
    const std::string_view f = FolderAt(runs_[r].folder);
    const uint64_t folder_hash = Fnv1a(kFnv1aBasis, f.data(), f.size());
    for (SampleId id = runs_[r].first; id < end; ++id) {
      const std::string_view n = name(id);
      // A relpath listed twice (a manifest may): the first id keeps it.
      by_relpath_.Insert(Fnv1a(folder_hash, n.data(), n.size()), id,
                         [&](SampleId held) { return name(held) == n && folder(held) == f; });
    }
  }
}

std::optional<SampleId> SampleTable::Find(std::string_view relpath) const {
  const size_t slash = relpath.rfind('/');
  const size_t split = slash == std::string_view::npos ? 0 : slash + 1;
  const std::string_view f = relpath.substr(0, split), n = relpath.substr(split);
  const uint64_t hash = Fnv1a(Fnv1a(kFnv1aBasis, f.data(), f.size()), n.data(), n.size());
  return by_relpath_.Find(hash, [&](SampleId id) { return Equals(id, relpath); });
}

size_t SampleTable::bytes() const {
  return names_.capacity() + name_at_.capacity() * sizeof(uint32_t) +
         identities_.capacity() * sizeof(Identity) + state_.capacity() +
         runs_.capacity() * sizeof(Run) + folders_.capacity() +
         folder_at_.capacity() * sizeof(uint32_t) + by_relpath_.bytes();
}

}  // namespace joaderfs
