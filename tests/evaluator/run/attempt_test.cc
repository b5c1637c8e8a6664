// The evaluation document's verdict messages.
#include "run/attempt.h"

#include <gtest/gtest.h>

namespace kforge::eval {
namespace {

// A store to a read-only input is an illegal address like any other: the
// message says the inputs are read-only, and only then.
TEST(ExplainFaultTest, AnIllegalAddressUnderReadOnlyInputsNamesThem) {
  const std::string runtime =
      "kf_run: CUDA error cudaErrorIllegalAddress: an illegal memory "
      "access was encountered";
  EXPECT_NE(ExplainFault(runtime, true).find("inputs are mapped read-only"), std::string::npos);
  EXPECT_NE(ExplainFault("CUDA error: an illegal memory access", true).find("read-only"),
            std::string::npos);
  EXPECT_EQ(ExplainFault(runtime, false), runtime);
  const std::string launch = "kf_run: CUDA error cudaErrorInvalidConfiguration";
  EXPECT_EQ(ExplainFault(launch, true), launch);
}

}  // namespace
}  // namespace kforge::eval
