#include "fuzz/fuzz_catalog.h"

#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

namespace joaderfs {

const Catalog& FuzzCatalog() {
  static const Catalog* const catalog = [] {
    namespace fs = std::filesystem;
    // Parsers log rejected input: keep the fuzzers' output to their own.
    spdlog::set_level(spdlog::level::off);
    std::string dir = (fs::temp_directory_path() / "joaderfs-fuzz.XXXXXX").string();
    if (!mkdtemp(dir.data())) std::abort();
    for (int c = 0; c < 4; ++c) {
      fs::create_directories(dir + "/c" + std::to_string(c));
      for (int i = 0; i < 5; ++i) {
        std::ofstream(dir + "/c" + std::to_string(c) + "/img" + std::to_string(i) + ".jpg") << "x";
      }
    }
    std::unique_ptr<Catalog> opened;
    const Status s = Catalog::Open(dir, &opened);
    fs::remove_all(dir);
    if (!s.ok() || opened->size() != 20) {
      std::fprintf(stderr, "cannot build the fuzz catalog: %s\n", s.message().c_str());
      std::abort();
    }
    return opened.release();
  }();
  return *catalog;
}

}  // namespace joaderfs
