#include "catalog/catalog.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include <spdlog/spdlog.h>

#include "catalog/manifest.h"
#include "common/hash.h"
#include "common/printable.h"

namespace joaderfs {
namespace fs = std::filesystem;

namespace {

// The extensions torchvision's ImageFolder accepts.
bool IsImageName(const std::string& name) {
  static const char* const kExtensions[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                            ".pgm", ".tif",  ".tiff", ".webp"};
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* ext : kExtensions) {
    if (lower.ends_with(ext)) return true;
  }
  return false;
}

// Component-wise comparison, so that "a/x.jpg" sorts before "a-b/y.jpg" as
// the class "a" sorts before "a-b".
bool PathLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const size_t ie = std::min(a.find('/', i), a.size());
    const size_t je = std::min(b.find('/', j), b.size());
    const int c = a.compare(i, ie - i, b, j, je - j);
    if (c != 0) return c < 0;
    i = ie + 1;
    j = je + 1;
  }
  return a.size() - std::min(i, a.size()) < b.size() - std::min(j, b.size());
}

}  // namespace

Status Catalog::Open(const std::string& source, std::unique_ptr<Catalog>* out) {
  std::unique_ptr<Catalog> c(new Catalog());
  std::error_code ec;
  c->source_ = fs::absolute(source, ec).lexically_normal().string();
  if (c->source_.size() > 1 && c->source_.ends_with('/')) c->source_.pop_back();
  const fs::file_status st = fs::status(c->source_, ec);
  if (ec || !fs::exists(st)) return Status::NotFound("SOURCE " + source + " does not exist");
  // Reading a FIFO as a manifest would block start-up for good.
  if (!fs::is_directory(st) && !fs::is_regular_file(st)) {
    return Status::InvalidArgument("SOURCE " + source + " is neither a folder nor a manifest file");
  }
  Status s = fs::is_directory(st) ? c->ScanImageFolder() : c->ReadManifest();
  if (!s.ok()) return s;
  c->Index();
  if (c->special_files_ > 0) {
    spdlog::warn(
        "SOURCE {}: left out {} image names that are not regular files (FIFOs, devices, "
        "folders, broken symlinks)",
        Printable(c->source_), c->special_files_);
  }
  if (c->entries_.empty()) return Status::InvalidArgument("SOURCE " + source + " holds no image");
  *out = std::move(c);
  return Status::Ok();
}

Status Catalog::ScanImageFolder() {
  root_ = source_;
  std::error_code ec;
  std::vector<std::string> classes;
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    const std::string name = e.path().filename().string();
    if (name[0] != '.' && e.is_directory()) classes.push_back(name);
  }
  if (ec) return Status::IOError("cannot list " + root_ + ": " + ec.message());
  std::sort(classes.begin(), classes.end());
  num_classes_ = static_cast<uint32_t>(classes.size());
  for (size_t label = 0; label < classes.size(); ++label) {
    std::vector<std::string> files;
    const fs::path dir = fs::path(root_) / classes[label];
    for (auto it = fs::recursive_directory_iterator(
             dir, fs::directory_options::follow_directory_symlink, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      const std::string name = it->path().filename().string();
      if (name[0] == '.') {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (!IsImageName(name)) continue;
      if (it->is_regular_file()) {
        files.push_back(it->path().lexically_relative(root_).string());
      } else if (!it->is_directory()) {
        ++special_files_;
      }
    }
    if (ec) return Status::IOError("cannot list " + dir.string() + ": " + ec.message());
    std::sort(files.begin(), files.end(), PathLess);
    for (auto& f : files) entries_.push_back({std::move(f), static_cast<int64_t>(label)});
  }
  return Status::Ok();
}

Status Catalog::ReadManifest() {
  root_ = fs::path(source_).parent_path().string();
  std::ifstream in(source_, std::ios::binary);
  if (!in) return Status::IOError("cannot read manifest " + source_);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Manifest manifest;
  Status s = ParseManifest(text, &manifest);
  if (!s.ok()) return Status::InvalidArgument("manifest " + source_ + " " + s.message());
  int64_t max_label = -1;
  for (ManifestEntry& e : manifest.entries) {
    max_label = std::max(max_label, e.label);
    entries_.push_back({std::move(e.relpath), e.label});
  }
  num_classes_ = static_cast<uint32_t>(max_label + 1);
  rejected_paths_ = manifest.rejected;
  if (rejected_paths_ > 0) {
    spdlog::warn(
        "manifest {}: left out {} paths that could leave its folder (absolute, climbing "
        "out with .., or holding a NUL byte), the first on line {}",
        Printable(source_), rejected_paths_, manifest.first_rejected_line);
  }
  return Status::Ok();
}

void Catalog::Index() {
  uint64_t h = Fnv1a(kFnv1aBasis, source_.data(), source_.size());
  size_t kept = 0;
  for (Entry& e : entries_) {
    struct stat st {};
    const std::string p = root_ + "/" + e.relpath;
    if (::stat(p.c_str(), &st) != 0) {
      st = {};  // missing now: kept, its decode fails and is counted then
    } else if (!S_ISREG(st.st_mode)) {
      ++special_files_;
      continue;
    }
    const uint64_t parts[] = {static_cast<uint64_t>(e.label), static_cast<uint64_t>(st.st_size),
                              static_cast<uint64_t>(st.st_mtim.tv_sec),
                              static_cast<uint64_t>(st.st_mtim.tv_nsec),
                              static_cast<uint64_t>(st.st_ino)};
    e.fingerprint =
        Fnv1a(Fnv1a(kFnv1aBasis, e.relpath.data(), e.relpath.size() + 1), parts, sizeof parts);
    h = Fnv1a(h, &e.fingerprint, sizeof e.fingerprint);
    if (&entries_[kept] != &e) entries_[kept] = std::move(e);
    ++kept;
  }
  entries_.resize(kept);
  for (SampleId id = 0; id < entries_.size(); ++id) by_relpath_.emplace(entries_[id].relpath, id);
  identity_ = h;
}

Roaring Catalog::IdsWithLabels(int64_t first, int64_t last) const {
  Roaring ids;
  for (SampleId id = 0; id < entries_.size(); ++id) {
    if (entries_[id].label >= first && entries_[id].label <= last) ids.add(id);
  }
  return ids;
}

std::optional<SampleId> Catalog::FindRelpath(std::string_view relpath) const {
  auto it = by_relpath_.find(relpath);
  if (it == by_relpath_.end()) return {};
  return it->second;
}

}  // namespace joaderfs
