// A library of real CUDA kernels on a machine without (or with a hidden)
// CUDA device (Halide's CUDA kernels, and the cuda backend's tensor-core
// kernels where nvcc was found): loading works, every lookup and call is
// refused with
// MHAGEN_ERR_NO_DEVICE and a message naming what is missing -- never a
// crash. Run with MHAGEN_HIDE_DEVICES=cuda (ctest sets it).
//   mhagen_gpu_refusal_tests LIB.so
#include "mhagen/runtime.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

static const char *gLib = nullptr;

TEST(GpuRefusal, LookupsAndCallsAreRefused) {
  mhagen_library *lib = nullptr;
  ASSERT_EQ(mhagen_load_library(gLib, &lib), MHAGEN_OK) << mhagen_last_error();
  const int n = mhagen_library_kernel_count(lib);
  ASSERT_GE(n, 1);
  for (int i = 0; i < n; ++i) {
    const mhagen_kernel *k = mhagen_library_kernel(lib, i);
    EXPECT_EQ(mhagen_kernel_usable(k), MHAGEN_ERR_NO_DEVICE);
    // The message names the device and the architecture the kernel needs.
    EXPECT_NE(std::strstr(mhagen_last_error(), "runs on cuda (target cuda_sm"),
              nullptr)
        << mhagen_last_error();
    // A direct call with valid arguments is refused before anything runs.
    std::vector<float> q(4 * 64 * 8, 0.f), k4(2 * 64 * 8, 0.f),
        v(2 * 64 * 8, 0.f), out(4 * 64 * 8, 0.f);
    mhagen_call_args a{};
    a.abi_version = MHAGEN_ABI_VERSION;
    a.batch = 1;
    a.t_q = a.t_kv = 8;
    a.q = q.data();
    a.k = k4.data();
    a.v = v.data();
    a.out = out.data();
    EXPECT_EQ(mhagen_call(k, &a), MHAGEN_ERR_NO_DEVICE);
  }
  const mhagen_kernel *found = nullptr;
  const std::string name = mhagen_kernel_name(mhagen_library_kernel(lib, 0));
  EXPECT_EQ(mhagen_find(name.c_str(), &found), MHAGEN_ERR_NO_DEVICE);
  EXPECT_NE(std::strstr(mhagen_last_error(), "no usable variant"), nullptr);
  EXPECT_EQ(mhagen_device_available("cuda"), MHAGEN_ERR_NO_DEVICE);
}

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 2)
    return 2;
  gLib = argv[1];
  return RUN_ALL_TESTS();
}
