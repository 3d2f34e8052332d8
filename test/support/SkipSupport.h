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
#include <functional>
#include <string>
#include <vector>

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

/// Loads each library in `paths` and hands every kernel this machine runs
/// to `registerCases`, which registers its test cases and returns how many
/// (< 0: it cannot, having said why on stderr); the others are registered
/// as skipped. Returns the binary's exit code when there is nothing to run
/// (1: a library that does not load, a kernel that cannot be registered
/// or no kernel at all; kSkipExitCode: none runs here), or -1 when the
/// cases are ready for RUN_ALL_TESTS().
inline int registerKernels(
    const std::vector<std::string> &paths,
    const std::function<int(const mhagen_kernel *)> &registerCases) {
  int registered = 0;
  std::string skipped;
  for (const std::string &path : paths) {
    mhagen_library *lib = nullptr;
    if (mhagen_load_library(path.c_str(), &lib) != MHAGEN_OK) {
      std::fprintf(stderr, "%s\n", mhagen_last_error());
      return 1;
    }
    for (int j = 0; j < mhagen_library_kernel_count(lib); ++j) {
      const mhagen_kernel *k = mhagen_library_kernel(lib, j);
      const std::string why = unusableReason(k);
      if (!why.empty()) {
        registerSkipped(mhagen_kernel_symbol(k), why);
        skipped = why;
        continue;
      }
      const int n = registerCases(k);
      if (n < 0)
        return 1;
      registered += n;
    }
  }
  if (registered > 0)
    return -1;
  if (!skipped.empty()) // every kernel needs what this machine lacks
    return exitAllSkipped("no kernel of these libraries runs here: " + skipped);
  std::fprintf(stderr, "no kernel in the given libraries\n");
  return 1;
}

} // namespace mhagen::testing_support

#endif
