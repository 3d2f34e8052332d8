// How tests of generated kernels report kernels this machine cannot run
// (an ISA it lacks, or one hidden by $MHAGEN_CPU_CLASS): as skipped, with
// the reason, never as failed and never as passed.
//  - A case of a kernel that cannot run is registered as a test that calls
//    GTEST_SKIP() with the runtime's reason, so gtest lists it as skipped.
//  - A test binary none of whose kernels can run exits with kSkipExitCode,
//    which CMake declares as the test's SKIP_RETURN_CODE: ctest then counts
//    the whole group as skipped, printing the reason from the output.
#ifndef MHAGEN_TEST_SKIPSUPPORT_H
#define MHAGEN_TEST_SKIPSUPPORT_H

#include "mhagen/runtime.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace mhagen::testing_support {

constexpr int kSkipExitCode = 77;

class SkippedCase : public testing::Test {
public:
  explicit SkippedCase(std::string reason) : reason_(std::move(reason)) {}
  void TestBody() override { GTEST_SKIP() << reason_; }

private:
  std::string reason_;
};

/// "" when the kernel can run here; otherwise why not.
inline std::string unusableReason(const mhagen_kernel *k) {
  if (mhagen_kernel_usable(k) == MHAGEN_OK)
    return "";
  return mhagen_last_error();
}

/// Registers SUITE.not_runnable_here, skipped with `reason`.
inline void registerSkipped(const std::string &suite,
                            const std::string &reason) {
  testing::RegisterTest(
      suite.c_str(), "not_runnable_here", nullptr, nullptr, __FILE__, __LINE__,
      [reason]() -> testing::Test * { return new SkippedCase(reason); });
  std::printf("skipping %s: %s\n", suite.c_str(), reason.c_str());
}

/// Ends a binary that found no kernel it can run: ctest reports it skipped.
inline int exitAllSkipped(const std::string &why) {
  std::printf("SKIPPED: %s\n", why.c_str());
  std::fflush(stdout);
  return kSkipExitCode;
}

} // namespace mhagen::testing_support

#endif
