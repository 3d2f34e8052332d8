// Manifests that try to take validation off its guard: sizes whose
// products wrap, deep nesting, lax types and ranges,
// unknown fields. Each one must be refused when it is read, and a call can
// never run on one.
#include "FakeKernels.h"

#include "mhagen/runtime.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <string>

using namespace mhagen;
using namespace mhagen::test;
using json = nlohmann::ordered_json;

namespace {

const std::vector<std::string> kAvx2 = {"sse41", "avx", "avx2", "fma", "f16c"};

json goodManifest() {
  return json::parse(
      fakeManifest("hostile", "hostile_avx2", "avx2", kAvx2).toJson());
}

std::string refusal(const std::string &text) {
  KernelManifest out;
  std::string err;
  if (KernelManifest::fromJson(text, out, &err))
    return "";
  return err.empty() ? "(no message)" : err;
}

} // namespace

TEST(HostileManifest, TheUnmodifiedManifestIsAccepted) {
  EXPECT_EQ(refusal(goodManifest().dump()), "");
}

TEST(HostileManifest, SizesWhoseProductsWrapAreRefused) {
  json j = goodManifest();
  j["spec"]["h"] = int64_t(1) << 62;
  j["spec"]["n_kv"] = 2;
  j["spec"]["d_k"] = 4;
  std::string why = refusal(j.dump());
  EXPECT_NE(why.find("spec.h = 4611686018427387904 is outside [1, 1048576]"),
            std::string::npos)
      << why;
  // Each size in range, their product not.
  j = goodManifest();
  j["spec"]["h"] = 1 << 20;
  j["spec"]["n_kv"] = 1 << 20;
  j["spec"]["d_k"] = 1 << 20;
  why = refusal(j.dump());
  EXPECT_NE(why.find("h * d_k"), std::string::npos) << why;
}

TEST(HostileManifest, DeepNestingIsRefusedWithoutRecursion) {
  for (const char *where : {"schedule", "tuning"}) {
    std::string deep = goodManifest().dump();
    std::string nest(100000, '[');
    nest += std::string(100000, ']');
    std::string key = std::string("\"") + where + "\":{}";
    size_t at = deep.find(key);
    ASSERT_NE(at, std::string::npos);
    deep.replace(at, key.size(), std::string("\"") + where + "\":" + nest);
    std::string why = refusal(deep);
    EXPECT_NE(why.find("nested deeper than"), std::string::npos) << why;
  }
}

TEST(HostileManifest, TypesAndRangesAreStrict) {
  struct Case {
    const char *pointer;
    json value;
    const char *expected;
  };
  const Case cases[] = {
      {"/abi_version", json(uint64_t(4294967297ull)), "abi_version"},
      {"/spec/d_k", json(1.5), "spec.d_k must be an integer"},
      {"/spec/T_kv", json(1e308), "spec.T_kv must be an integer"},
      {"/spec/T", json(-4), "spec.T = -4 is outside"},
      {"/spec/n_kv", json(0u), "spec.n_kv = 0 is outside [1, 1048576]"},
      {"/spec/h", json(0), "spec.h = 0 is outside [1, 1048576]"},
      {"/spec/B", json(-1), "spec.B = -1 is outside"},
      {"/spec/mask/window", json(-3), "spec.mask.window = -3 is outside"},
      {"/spec/scale", json(-0.5), "spec.scale must be a finite number > 0"},
      {"/spec/h", json("4"), "spec.h must be an integer"},
      {"/spec/bias", json(1), "spec.bias must be true or false"},
      {"/cpu_features", json::array({1, 2}), "cpu_features must be an array"},
      {"/schedule", json::array(), "schedule must be an object"},
      {"/surprise", json(1), "unknown field surprise"},
      {"/spec/extra", json(1), "unknown field spec.extra"},
  };
  for (const Case &c : cases) {
    json j = goodManifest();
    j[json::json_pointer(c.pointer)] = c.value;
    std::string why = refusal(j.dump());
    EXPECT_NE(why.find(c.expected), std::string::npos)
        << c.pointer << " = " << c.value.dump() << ": " << why;
  }
}

TEST(HostileManifest, ALayerTakesAnotherKvDtypeOnlyInItsOwnCache) {
  json j = goodManifest();
  j["spec"]["op"] = "layer";
  j["spec"]["kv_dtype"] = "bf16";
  std::string why = refusal(j.dump());
  EXPECT_NE(why.find("there is no layer cache"), std::string::npos) << why;
  j["spec"]["layer_cache"] = true;
  j["spec"]["T_kv"] = 0;
  for (const char *kv : {"bf16", "f16", "i8"}) {
    j["spec"]["kv_dtype"] = kv;
    EXPECT_EQ(refusal(j.dump()), "") << kv;
  }
}

TEST(HostileManifest, ACallCanNeverRunOnARefusedManifest) {
  json j = goodManifest();
  j["spec"]["h"] = int64_t(1) << 62;
  j["spec"]["n_kv"] = 2;
  j["spec"]["d_k"] = 4;
  KernelManifest m = fakeManifest("hostile2", "hostile2_avx2", "avx2", kAvx2);
  static FakeKernel k(m);
  static std::string text;
  text = j.dump();
  k.desc.manifest_json = text.c_str();
  k.desc.symbol = "hostile_avx2";
  EXPECT_EQ(mhagen_register_kernel(&k.desc), MHAGEN_ERR_LOAD_FAILED);
  EXPECT_EQ(k.calls.load(), 0);
}

TEST(Threads, OneDocumentedBoundForEveryBackend) {
  int before = mhagen_get_num_threads();
  EXPECT_EQ(mhagen_set_num_threads(20000), MHAGEN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(mhagen_last_error()).find("between 1 and 256"),
            std::string::npos)
      << mhagen_last_error();
  EXPECT_EQ(mhagen_get_num_threads(), before);
  EXPECT_EQ(mhagen_set_num_threads(MHAGEN_MAX_THREADS), MHAGEN_OK);
  EXPECT_EQ(mhagen_set_num_threads(MHAGEN_MAX_THREADS + 1),
            MHAGEN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(mhagen_set_num_threads(before), MHAGEN_OK);
}
