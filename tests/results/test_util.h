// Helpers shared by the results tests.
#pragma once

#include "kforge/testing/test_util.h"

namespace kforge::results::testing {

using kforge::testing::TempDir;

}  // namespace kforge::results::testing
