// The timing messages between the coordinator and the harness: what a drive
// reply may carry, and what a malformed one is refused for.
#include "protocol/messages.h"

#include <gtest/gtest.h>

namespace kforge::eval::proto {
namespace {

DriveReply TwoCalls() {
  DriveReply d;
  d.wall_us = {31.5, 30.9};
  d.claimed_us = {29.0, 28.7};
  d.sm_clock_mhz = {1980, 1965};
  d.temperature_c = {41, 43};
  return d;
}

TEST(DriveReplyTest, CarriesTimesAndTheClocksAroundTheCalls) {
  auto back = DriveReply::Parse(TwoCalls().ToJson(), "drive", 2);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->wall_us, (std::vector<double>{31.5, 30.9}));
  EXPECT_EQ(back->claimed_us, (std::vector<double>{29.0, 28.7}));
  EXPECT_EQ(back->sm_clock_mhz, (std::vector<double>{1980, 1965}));
  EXPECT_EQ(back->temperature_c, (std::vector<double>{41, 43}));
}

TEST(DriveReplyTest, AReplyWithoutNvmlReadingsIsValid) {
  DriveReply d = TwoCalls();
  d.sm_clock_mhz.clear();
  d.temperature_c.clear();
  auto back = DriveReply::Parse(d.ToJson(), "drive", 2);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back->sm_clock_mhz.empty());
}

TEST(DriveReplyTest, MoreThanTwoClockReadingsAreRefused) {
  nlohmann::json j = TwoCalls().ToJson();
  j["sm_clock_mhz"] = {1980, 1970, 1960};
  auto back = DriveReply::Parse(j, "drive", 2);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("sm_clock_mhz"), std::string::npos)
      << back.status().message();
}

TEST(DriveReplyTest, TimesForTooFewCallsAreRefused) {
  auto back = DriveReply::Parse(TwoCalls().ToJson(), "drive", 3);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("2 times for 3 calls"), std::string::npos)
      << back.status().message();
}

TEST(DriveReplyTest, AClockReadingThatIsNotANumberIsRefused) {
  nlohmann::json j = TwoCalls().ToJson();
  j["temperature_c"] = {"hot"};
  EXPECT_FALSE(DriveReply::Parse(j, "drive", 2).ok());
}

}  // namespace
}  // namespace kforge::eval::proto
