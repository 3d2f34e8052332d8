// CPU feature detection: on x86-64 from cpuid and xgetbv, where an
// instruction set counts only when the CPU has it and the OS saves its
// registers (XCR0); on AArch64 from the kernel's HWCAP words (getauxval),
// which name only what the kernel enabled. Either way a kernel is never run
// where it would die with SIGILL.
#include "RuntimeInternal.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

namespace mhagen::rt {

namespace {

#if defined(__x86_64__) || defined(__i386__)
uint64_t readXcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}
#endif

std::set<std::string> detect() {
  std::set<std::string> f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d))
    return f;
  const bool sse41 = c & (1u << 19);
  const bool osxsave = c & (1u << 27);
  const bool avx = c & (1u << 28);
  const bool fma = c & (1u << 12);
  const bool f16c = c & (1u << 29);
  if (sse41)
    f.insert("sse41");
  uint64_t xcr0 = osxsave ? readXcr0() : 0;
  const bool osAvx = (xcr0 & 0x6) == 0x6;               // SSE and AVX state
  const bool osAvx512 = osAvx && (xcr0 & 0xe0) == 0xe0; // opmask, ZMM
  const bool osAmx = (xcr0 & 0x60000) == 0x60000;
  if (!osAvx)
    return f;
  if (avx)
    f.insert("avx");
  if (fma)
    f.insert("fma");
  if (f16c)
    f.insert("f16c");
  unsigned maxLeaf = __get_cpuid_max(0, nullptr);
  if (maxLeaf < 7)
    return f;
  __cpuid_count(7, 0, a, b, c, d);
  if (b & (1u << 5))
    f.insert("avx2");
  if (osAvx512) {
    if (b & (1u << 16))
      f.insert("avx512f");
    if (b & (1u << 17))
      f.insert("avx512dq");
    if (b & (1u << 21))
      f.insert("avx512ifma");
    if (b & (1u << 28))
      f.insert("avx512cd");
    if (b & (1u << 30))
      f.insert("avx512bw");
    if (b & (1u << 31))
      f.insert("avx512vl");
    if (c & (1u << 1))
      f.insert("avx512vbmi");
    if (c & (1u << 11))
      f.insert("avx512_vnni");
    if (d & (1u << 23))
      f.insert("avx512_fp16");
  }
  if (osAmx && (d & (1u << 22)))
    f.insert("amx_bf16");
  unsigned a1, b1, c1, d1;
  __cpuid_count(7, 1, a1, b1, c1, d1);
  if (osAvx512 && (a1 & (1u << 5)))
    f.insert("avx512_bf16");
#elif defined(__aarch64__)
  // Bits of AT_HWCAP and AT_HWCAP2 (Linux arch/arm64 uapi hwcap.h), named
  // as /proc/cpuinfo names them.
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  const struct {
    unsigned long word, bit;
    const char *name;
  } bits[] = {{hw, 1ul << 1, "asimd"},    {hw, 1ul << 9, "fphp"},
              {hw, 1ul << 10, "asimdhp"}, {hw, 1ul << 20, "asimddp"},
              {hw, 1ul << 22, "sve"},     {hw2, 1ul << 13, "i8mm"},
              {hw2, 1ul << 14, "bf16"}};
  for (const auto &b : bits)
    if (b.word & b.bit)
      f.insert(b.name);
#endif
  return f;
}

// The features that each class of machine named by $MHAGEN_CPU_CLASS keeps
// (see runtime.h): a machine presents itself as that class by dropping
// every detected feature outside the list. It never adds one.
const char *const kAvx2Class[] = {"sse41", "avx", "fma", "f16c", "avx2"};
const char *const kAvx512Class[] = {"avx512f",    "avx512cd",   "avx512bw",
                                    "avx512dq",   "avx512vl",   "avx512ifma",
                                    "avx512vbmi", "avx512_vnni"};

const char *const kNeonClass[] = {"asimd", "fphp", "asimdhp", "asimddp"};

std::set<std::string> classFeatures(const std::string &cls, bool &known) {
  std::set<std::string> keep;
  known = true;
  if (cls == "neon")
    keep.insert(std::begin(kNeonClass), std::end(kNeonClass));
  const bool avx512 =
      cls == "avx512" || cls == "avx512_bf16" || cls == "avx512_amx";
  if (cls == "avx2" || avx512)
    keep.insert(std::begin(kAvx2Class), std::end(kAvx2Class));
  if (avx512)
    keep.insert(std::begin(kAvx512Class), std::end(kAvx512Class));
  if (cls == "avx512_bf16" || cls == "avx512_amx")
    keep.insert("avx512_bf16");
  if (cls == "avx512_amx")
    keep.insert("amx_bf16");
  if (keep.empty() && cls != "none")
    known = false;
  return keep;
}

std::set<std::string> detectWithClass(std::string &classNote) {
  std::set<std::string> f = detect();
  const char *env = std::getenv("MHAGEN_CPU_CLASS");
  if (!env || !*env)
    return f;
  bool known = false;
  std::set<std::string> keep = classFeatures(env, known);
  if (!known) {
    classNote = std::string("MHAGEN_CPU_CLASS=") + env +
                " is not a machine class (none, avx2, avx512, avx512_bf16, "
                "avx512_amx, neon); "
                "ignored";
    return f;
  }
  std::set<std::string> out;
  for (const auto &x : f)
    if (keep.count(x))
      out.insert(x);
  classNote = std::string("presenting as class ") + env + " (MHAGEN_CPU_CLASS)";
  return out;
}

struct FeatureState {
  std::mutex mu;
  bool overridden = false;
  std::string classNote;
  std::set<std::string> detected = detectWithClass(classNote);
  std::set<std::string> overrideSet;
  std::string text;
};

FeatureState &state() {
  static FeatureState s;
  return s;
}

} // namespace

std::set<std::string> cpuFeatures() {
  FeatureState &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.overridden ? s.overrideSet : s.detected;
}

std::string missingCpuFeatures(const std::vector<std::string> &required) {
  std::set<std::string> have = cpuFeatures();
  std::string missing;
  for (const auto &r : required)
    if (!have.count(r))
      missing += (missing.empty() ? "" : " ") + r;
  return missing;
}

// Linux hands out the AMX tile data state (8 KiB of registers per thread)
// only to a process that asks for it; the first tile instruction of one
// that did not dies with SIGILL. The permission is the process's, for every
// thread, so it is asked for once.
std::string requestAmxTiles() {
#if defined(__x86_64__) && defined(__linux__)
  static const std::string refusal = [] {
    const long archReqXcompPerm = 0x1023, xfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, archReqXcompPerm, xfeatureXtiledata) == 0)
      return std::string();
    return std::string("the OS refused the AMX tile state (arch_prctl "
                       "ARCH_REQ_XCOMP_PERM: ") +
           std::strerror(errno) + ")";
  }();
  return refusal;
#else
  return "AMX tiles exist only on x86-64 Linux";
#endif
}

} // namespace mhagen::rt

using namespace mhagen::rt;

extern "C" int mhagen_cpu_has(const char *feature) {
  if (!feature)
    return 0;
  return cpuFeatures().count(feature) ? 1 : 0;
}

extern "C" const char *mhagen_cpu_features(void) {
  FeatureState &s = state();
  std::set<std::string> have = cpuFeatures();
  std::lock_guard<std::mutex> lock(s.mu);
  std::ostringstream os;
  for (const auto &f : have)
    os << (os.tellp() > 0 ? " " : "") << f;
  s.text = os.str();
  return s.text.c_str();
}

extern "C" const char *mhagen_cpu_class_note(void) {
  return state().classNote.c_str();
}

extern "C" void mhagen_override_cpu_features(const char *features) {
  FeatureState &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  bumpFeatureEpoch();
  if (!features) {
    s.overridden = false;
    s.overrideSet.clear();
    return;
  }
  s.overridden = true;
  s.overrideSet.clear();
  std::string cur;
  for (const char *p = features;; ++p) {
    if (*p == ' ' || *p == ',' || *p == '\0') {
      if (!cur.empty())
        s.overrideSet.insert(cur);
      cur.clear();
      if (*p == '\0')
        break;
    } else {
      cur += *p;
    }
  }
}
