#include "kforge/core/hash.h"

#include <gtest/gtest.h>

namespace kforge {
namespace {

TEST(HashTest, Sha256MatchesKnownVector) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(HashTest, HasherSeparatesParts) {
  std::string a = Hasher().Add("ab").Add("c").HexDigest();
  std::string b = Hasher().Add("a").Add("bc").HexDigest();
  EXPECT_NE(a, b);
  EXPECT_EQ(a, Hasher().Add("ab").Add("c").HexDigest());
}

}  // namespace
}  // namespace kforge
