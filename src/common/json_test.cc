#include "common/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace joaderfs {
namespace {

TEST(JsonWriterTest, EmptyObject) {
  JsonWriter w;
  w.BeginObject().EndObject();
  EXPECT_EQ(w.Finish(), "{}\n");
}

TEST(JsonWriterTest, FieldsAreCommaSeparatedInOrder) {
  JsonWriter w;
  w.BeginObject()
      .Field("s", "text")
      .Field("u", uint64_t{18446744073709551615ULL})
      .Field("i", int64_t{-42})
      .Field("u32", uint32_t{7})
      .Field("t", true)
      .Field("f", false)
      .EndObject();
  EXPECT_EQ(w.Finish(),
            "{\"s\":\"text\",\"u\":18446744073709551615,\"i\":-42,\"u32\":7,"
            "\"t\":true,\"f\":false}\n");
}

TEST(JsonWriterTest, NestedObjects) {
  JsonWriter w;
  w.BeginObject()
      .Field("a", uint64_t{1})
      .BeginObject("jobs")
      .BeginObject("x")
      .Field("epoch", uint64_t{2})
      .EndObject()
      .BeginObject("y")
      .EndObject()
      .EndObject()
      .Field("b", uint64_t{3})
      .EndObject();
  EXPECT_EQ(w.Finish(), "{\"a\":1,\"jobs\":{\"x\":{\"epoch\":2},\"y\":{}},\"b\":3}\n");
}

TEST(JsonWriterTest, NestedObjectAsFirstMember) {
  JsonWriter w;
  w.BeginObject().BeginObject("o").Field("k", "v").EndObject().EndObject();
  EXPECT_EQ(w.Finish(), "{\"o\":{\"k\":\"v\"}}\n");
}

TEST(JsonWriterTest, EscapesStringValues) {
  JsonWriter w;
  w.BeginObject().Field("v", std::string_view("q\"b\\n\nt\tc\x01\x1f\r end")).EndObject();
  EXPECT_EQ(w.Finish(), "{\"v\":\"q\\\"b\\\\n\\nt\\tc\\u0001\\u001f\\u000d end\"}\n");
}

TEST(JsonWriterTest, EscapesKeys) {
  JsonWriter w;
  w.BeginObject().Field("a\"b\\c", uint64_t{1}).BeginObject("n\nl").EndObject().EndObject();
  EXPECT_EQ(w.Finish(), "{\"a\\\"b\\\\c\":1,\"n\\nl\":{}}\n");
}

TEST(JsonWriterTest, KeepsUtf8AndEmbeddedNul) {
  JsonWriter w;
  const std::string value("caf\xc3\xa9 \0x", 8);
  w.BeginObject().Field("v", std::string_view(value)).EndObject();
  EXPECT_EQ(w.Finish(), "{\"v\":\"caf\xc3\xa9 \\u0000x\"}\n");
}

TEST(JsonWriterTest, Doubles) {
  JsonWriter w;
  w.BeginObject()
      .Field("half", 0.5)
      .Field("one", 1.0)
      .Field("neg", -2.25)
      .Field("inf", std::numeric_limits<double>::infinity())
      .Field("nan", std::nan(""))
      .EndObject();
  EXPECT_EQ(w.Finish(), "{\"half\":0.5,\"one\":1,\"neg\":-2.25,\"inf\":null,\"nan\":null}\n");
}

TEST(JsonWriterTest, DoubleKeepsSixSignificantDigits) {
  JsonWriter w;
  w.BeginObject().Field("d", 3.14159265).EndObject();
  EXPECT_EQ(w.Finish(), "{\"d\":3.14159}\n");
}

}  // namespace
}  // namespace joaderfs
