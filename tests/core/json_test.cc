// The tolerant JSON readers: fallbacks for absent and mistyped fields, and no
// value, however large, converted with undefined behaviour.
#include "kforge/core/json.h"

#include <gtest/gtest.h>

#include "kforge/core/version.h"

namespace kforge {
namespace {

using nlohmann::json;

TEST(JsonTest, AbsentOrMistypedFieldsReadAsTheFallback) {
  json j = {{"s", "text"}, {"n", 2.5}, {"b", true}, {"o", {{"k", 1}}}};
  EXPECT_EQ(JsonString(j, "s"), "text");
  EXPECT_EQ(JsonString(j, "n", "fb"), "fb");
  EXPECT_EQ(JsonNumber(j, "n"), 2.5);
  EXPECT_EQ(JsonNumber(j, "s", -1), -1);
  EXPECT_FALSE(JsonOptNumber(j, "missing"));
  EXPECT_TRUE(JsonBool(j, "b"));
  EXPECT_TRUE(JsonBool(j, "n", true));
  EXPECT_TRUE(JsonHas(j, "o"));
  EXPECT_FALSE(JsonHas(j, "missing"));
  // Not an object: every field is absent.
  EXPECT_TRUE(JsonField(json::array({1, 2}), "s").is_null());
  EXPECT_EQ(JsonString(json("s"), "s", "fb"), "fb");
}

TEST(JsonTest, IntegersThatDoNotFitAreNotIntegers) {
  json j = json::parse(R"({"big": 9.33e120, "neg": -1e300, "u": 18446744073709551615,
                           "max": 9223372036854775807, "edge": 9223372036854775808.0,
                           "f": 12.9, "i": -7})");
  EXPECT_FALSE(JsonOptInt(j, "big"));
  EXPECT_FALSE(JsonOptInt(j, "neg"));
  EXPECT_FALSE(JsonOptInt(j, "u"));
  EXPECT_FALSE(JsonOptInt(j, "edge"));  // 2^63 exactly: one past int64_t's range
  EXPECT_EQ(*JsonOptInt(j, "max"), INT64_MAX);
  EXPECT_EQ(*JsonOptInt(j, "f"), 12);
  EXPECT_EQ(*JsonOptInt(j, "i"), -7);
  EXPECT_EQ(JsonIntIn(j, "i", 0, 10, 99), 99);
  EXPECT_EQ(JsonIntIn(j, "f", 0, 100, 99), 12);
  EXPECT_EQ(JsonIntIn(j, "big", 0, 100, 5), 5);
}

TEST(JsonTest, ParseErrorsNameTheSourceAndKind) {
  auto bad = ParseJson("{\"a\":", "runs/x/event 3", ErrorKind::kIo);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().kind(), ErrorKind::kIo);
  EXPECT_NE(bad.status().message().find("runs/x/event 3"), std::string::npos);
  EXPECT_EQ((*ParseJson("[1]", "x"))[0], 1);
}

TEST(VersionTest, NamesTheProjectVersionAndACommit) {
  EXPECT_EQ(Version(), KFORGE_TEST_PROJECT_VERSION);
  EXPECT_FALSE(GitCommit().empty());
  EXPECT_EQ(VersionString(), std::string(Version()) + " (" + std::string(GitCommit()) + ")");
}

}  // namespace
}  // namespace kforge
