// Property test: every spec that passes validation
// gets a default schedule inside its backend's declared space, on every
// target and backend, and a seeded sample of them is generated, run and
// checked against the reference. A spec validation accepts must produce a
// kernel; a backend may only refuse a target it does not generate for,
// with the reason.
//   mhagen_property_tests [--specs=N] [--run=M]
#include "mhagen/driver/BackendRegistry.h"
#include "mhagen/driver/Driver.h"
#include "mhagen/harness/KernelHarness.h"
#include "mhagen/runtime.h"
#include "mhagen/spec/SpecParser.h"
#include "mhagen/support/Process.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace mhagen;

namespace {

int gSpecs = 4000; // random valid specs whose default schedules are checked
int gRuns = 8;     // of which are generated, run and checked

std::vector<int64_t> divisorsOf(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0)
      out.push_back(i);
  return out;
}

/// A random spec with h, kv and group sizes 1..64 (primes included), dk and
/// dv 1..512, every mask, dtype, op, target, backend and score modifier.
/// It may be invalid (validation decides).
AttentionSpec randomSpec(std::mt19937 &rng) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  AttentionSpec s;
  s.op = pick(0, 1) ? Op::Sdpa : Op::Layer;
  const int64_t group = pick(1, 64);
  s.n_kv = pick(1, 64 / group);
  s.h = group * s.n_kv;
  // Widths: often small or odd, sometimes the largest allowed.
  auto width = [&] {
    switch (pick(0, 3)) {
    case 0:
      return pick(1, 16);
    case 1:
      return pick(1, 512);
    case 2:
      return int64_t(8) << pick(0, 6); // 8 .. 512
    default:
      return pick(17, 160);
    }
  };
  s.d_k = width();
  s.d_v = pick(0, 2) ? s.d_k : width();
  s.d = s.op == Op::Layer ? pick(1, 1024) : s.h * s.d_k;
  // One to three clauses of random terms (a union when more than one).
  const int clauses = pick(0, 3) == 0 ? pick(2, 3) : 1;
  for (int k = 0; k < clauses; ++k) {
    MaskClause c;
    c.causal = pick(0, 1);
    if (pick(0, 2) == 0)
      c.window = pick(1, 5000);
    c.padding = pick(0, 3) == 0;
    if (pick(0, 3) == 0)
      c.sink = pick(1, 64);
    s.mask.anyOf.push_back(c);
  }
  s.mask.normalize();
  if (s.scale.has_value() == false && pick(0, 4) == 0)
    s.scaleAtRuntime = true;
  s.dtype = static_cast<DType>(pick(0, 2));
  s.bias = s.op == Op::Layer && pick(0, 1);
  static const TargetKind kinds[] = {
      TargetKind::Avx2,      TargetKind::Avx512, TargetKind::Avx512Bf16,
      TargetKind::Avx512Amx, TargetKind::Neon,   TargetKind::Cuda,
      TargetKind::OpenCL};
  s.target.kind = kinds[pick(0, 6)];
  if (s.target.kind == TargetKind::Cuda)
    s.target.cudaCapability = pick(0, 1) ? 86 : 80;
  s.backend = pick(0, 1) ? Backend::Halide : Backend::Mlir;
  // Score modifiers, each in about a third of the specs.
  if (pick(0, 2) == 0)
    s.softcap = static_cast<double>(pick(1, 100));
  s.alibi = static_cast<AlibiSlopes>(pick(0, 5) % 3);
  s.sinks = pick(0, 2) == 0;
  return s;
}

ScheduleSpace spaceOf(const AttentionSpec &s) {
  return kernelBackend(s.backend).scheduleSpace(s);
}

bool backendGenerates(const AttentionSpec &s) {
  if (!backendBuilt(s.backend))
    return false;
  // The MLIR backend generates CPU code only (it says so when asked).
  const std::string why = kernelBackend(s.backend).unsupportedReason(s);
  EXPECT_TRUE(why.empty() || (s.backend == Backend::Mlir && s.target.isGpu()))
      << why;
  return why.empty();
}

} // namespace

TEST(DefaultSchedule, IsInsideTheDeclaredSpaceForEveryValidSpec) {
  std::mt19937 rng(20261201);
  int valid = 0, checked = 0, tries = 0;
  while (valid < gSpecs && ++tries < 50 * gSpecs) {
    AttentionSpec s = randomSpec(rng);
    if (!validateSpec(s).empty())
      continue;
    ++valid;
    if (!backendGenerates(s))
      continue;
    ScheduleSpace space;
    try {
      space = spaceOf(s);
    } catch (const std::exception &e) {
      ADD_FAILURE() << s.canonical()
                    << "a valid spec has no schedule space: " << e.what();
      continue;
    }
    ++checked;
    std::string why = space.violation ? space.violation(space.defaults) : "";
    EXPECT_EQ(why, "") << "default schedule outside its space for\n"
                       << s.canonical() << "backend " << toString(s.backend)
                       << ", target " << s.target.str();
    if (::testing::Test::HasFailure() && checked > 20)
      break; // enough examples
  }
  EXPECT_EQ(valid, gSpecs);
  std::printf("%d valid specs, %d default schedules checked\n", valid, checked);
}

TEST(DefaultSchedule, SampledSpecsGenerateRunAndMatchTheReference) {
  // On avx2 (every machine mhagen supports runs it), both backends.
  std::mt19937 rng(7);
  TempDir dir("mhagen-property");
  int ran = 0;
  for (int tries = 0; ran < gRuns && tries < 100000; ++tries) {
    AttentionSpec s = randomSpec(rng);
    s.target.kind = TargetKind::Avx2;
    s.backend = ran % 2 && backendBuilt(Backend::Mlir) ? Backend::Mlir
                                                       : Backend::Halide;
    // Keep the reference and the compile quick.
    if (s.d_k > 160 || s.d_v > 160 || s.h > 24 || s.d > 512)
      continue;
    if (!validateSpec(s).empty() || !backendGenerates(s))
      continue;
    s.name = "prop" + std::to_string(ran);
    SCOPED_TRACE(s.canonical());
    GenerateOptions g;
    g.outDir = dir.file(s.name);
    std::vector<GeneratedKernel> ks;
    try {
      ks = generateKernels({s}, g);
      linkSharedLibrary(ks, dir.file("lib" + s.name + ".so"));
    } catch (const std::exception &e) {
      ADD_FAILURE() << "a valid spec did not generate: " << e.what();
      ++ran;
      continue;
    }
    mhagen_library *lib = nullptr;
    ASSERT_EQ(
        mhagen_load_library(dir.file("lib" + s.name + ".so").c_str(), &lib),
        MHAGEN_OK)
        << mhagen_last_error();
    const mhagen_kernel *k = mhagen_library_kernel(lib, 0);
    ASSERT_NE(k, nullptr);
    for (ProblemSize z : {ProblemSize{1, 1, 1}, ProblemSize{2, 13, 13},
                          ProblemSize{1, 37, 37}}) {
      if (s.op == Op::Sdpa && z.Tq > 1)
        z.Tkv = z.Tq + 5; // a KV-cache offset
      Problem p(s, z, {});
      mhagen_call_args a = p.args();
      ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
      Comparison c = p.check({});
      EXPECT_TRUE(c.ok()) << "B " << z.B << " Tq " << z.Tq << " Tkv " << z.Tkv
                          << ": max |err| " << c.maxAbsErr;
    }
    ++ran;
  }
  EXPECT_EQ(ran, gRuns);
}

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--specs=", 8) == 0)
      gSpecs = std::atoi(argv[i] + 8);
    else if (std::strncmp(argv[i], "--run=", 6) == 0)
      gRuns = std::atoi(argv[i] + 6);
  }
  return RUN_ALL_TESTS();
}
