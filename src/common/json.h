// A minimal JSON writer for the small documents the filesystem serves
// (/stats, status, /dataset/info). Callers build objects in order; the
// writer handles commas and string escaping.

#ifndef JOADERFS_COMMON_JSON_H_
#define JOADERFS_COMMON_JSON_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace joaderfs {

class JsonWriter {
 public:
  JsonWriter& BeginObject(std::string_view key = {});
  JsonWriter& EndObject();
  JsonWriter& Field(std::string_view key, std::string_view value);
  JsonWriter& Field(std::string_view key, const char* value) {
    return Field(key, std::string_view(value));
  }
  JsonWriter& Field(std::string_view key, uint64_t value);
  JsonWriter& Field(std::string_view key, int64_t value);
  JsonWriter& Field(std::string_view key, uint32_t value) {
    return Field(key, static_cast<uint64_t>(value));
  }
  JsonWriter& Field(std::string_view key, double value);
  JsonWriter& Field(std::string_view key, bool value);

  // The document, with a trailing newline.
  std::string Finish() { return out_ + "\n"; }

 private:
  void Key(std::string_view key);
  void Quote(std::string_view s);

  std::string out_;
  bool first_ = true;
};

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_JSON_H_
