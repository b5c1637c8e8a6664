// Shared by the kforge::om tests: vectors of doubles and their comparison.
#pragma once

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace kforge::om::testing {

using Vec = std::vector<double>;
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

inline void ExpectNear(const Vec& got, const Vec& want, double tol, const char* what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol) << what << " [" << i << "]";
  }
}

}  // namespace kforge::om::testing
