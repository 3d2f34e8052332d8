// The host's machine model: the ISA of the target it resolves to, and what
// the CPU (cpuid on x86-64, MIDR_EL1 on AArch64) and sysfs say about it
// (identity, caches, usable cores).
#include "mhagen/machine/MachineModel.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <sched.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace mhagen {

namespace {

std::string readLine(const std::string &path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// "32K", "1024K", "32M" (sysfs cache sizes) -> bytes; 0 if unreadable.
int64_t parseSize(const std::string &s) {
  if (s.empty())
    return 0;
  char *end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (v <= 0)
    return 0;
  switch (end && *end ? *end : 'B') {
  case 'K':
    return v * 1024;
  case 'M':
    return v * 1024 * 1024;
  case 'G':
    return v * 1024 * 1024 * 1024;
  default:
    return v;
  }
}

// Data/unified caches of cpu0 from sysfs, by level.
void readCaches(MachineModel &m) {
  const std::string base = "/sys/devices/system/cpu/cpu0/cache/index";
  for (int i = 0; i < 8; ++i) {
    const std::string dir = base + std::to_string(i) + "/";
    const std::string level = readLine(dir + "level");
    if (level.empty())
      break;
    const std::string type = readLine(dir + "type");
    if (type == "Instruction")
      continue;
    const int64_t size = parseSize(readLine(dir + "size"));
    if (level == "1")
      m.l1dBytes = size ? size : m.l1dBytes;
    else if (level == "2")
      m.l2Bytes = size ? size : m.l2Bytes;
    else if (level == "3")
      m.l3Bytes = size ? size : m.l3Bytes;
  }
}

#if defined(__x86_64__) || defined(__i386__)
void readIdentity(MachineModel &m) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d))
    return;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  m.vendor = vendor;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    const unsigned baseFamily = (a >> 8) & 0xf, baseModel = (a >> 4) & 0xf;
    const unsigned extFamily = (a >> 20) & 0xff, extModel = (a >> 16) & 0xf;
    m.family = static_cast<int>(baseFamily == 0xf ? baseFamily + extFamily
                                                  : baseFamily);
    m.model = static_cast<int>(baseFamily == 0x6 || baseFamily == 0xf
                                   ? (extModel << 4) | baseModel
                                   : baseModel);
  }
  // Brand string: leaves 0x80000002..4.
  unsigned maxExt = __get_cpuid_max(0x80000000, nullptr);
  if (maxExt >= 0x80000004) {
    char brand[49] = {};
    for (unsigned leaf = 0; leaf < 3; ++leaf) {
      __get_cpuid(0x80000002 + leaf, &a, &b, &c, &d);
      std::memcpy(brand + 16 * leaf, &a, 4);
      std::memcpy(brand + 16 * leaf + 4, &b, 4);
      std::memcpy(brand + 16 * leaf + 8, &c, 4);
      std::memcpy(brand + 16 * leaf + 12, &d, 4);
    }
    std::string name = brand;
    const size_t first = name.find_first_not_of(' ');
    const size_t last = name.find_last_not_of(' ');
    m.cpuName =
        first == std::string::npos ? "" : name.substr(first, last - first + 1);
  }
}
#else
// MIDR_EL1 as Linux exposes it: implementer in bits 31:24, part in 15:4.
// A core with published figures (armCores) lends them as the defaults
// sysfs then refines.
void readIdentity(MachineModel &m) {
  const std::string midr =
      readLine("/sys/devices/system/cpu/cpu0/regs/identification/midr_el1");
  if (midr.empty())
    return;
  const unsigned long long v = std::strtoull(midr.c_str(), nullptr, 16);
  const int implementer = static_cast<int>((v >> 24) & 0xff);
  const int part = static_cast<int>((v >> 4) & 0xfff);
  for (const MachineModel &core : armCores())
    if (core.family == implementer && core.model == part) {
      // Its identity, caches and LLVM CPU model; the class's vectors and
      // features stay the preset's.
      m.vendor = core.vendor;
      m.cpuName = core.cpuName;
      m.family = core.family;
      m.model = core.model;
      m.l1dBytes = core.l1dBytes;
      m.l2Bytes = core.l2Bytes;
      m.l3Bytes = core.l3Bytes;
      m.llvmCpu = core.llvmCpu;
      return;
    }
  // An unknown core keeps the preset's (Neoverse N1's) figures.
  m.vendor = implementer == 0x41 ? "ARM" : "MIDR " + midr;
  m.cpuName = "unknown AArch64 core";
  m.family = implementer;
  m.model = part;
}
#endif

int usableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    return CPU_COUNT(&set);
  return 0;
}

} // namespace

MachineModel hostMachine(TargetKind kind) {
  MachineModel m = presetMachine(kind);
  readIdentity(m);
#if defined(__x86_64__) || defined(__i386__)
  m.source = "host (cpuid + sysfs)";
#else
  m.source = "host (MIDR_EL1 + sysfs)";
#endif
  readCaches(m);
  // The preset's rate is its modelled CPU's; the host has its own.
  if (kind == TargetKind::Avx512Bf16 || kind == TargetKind::Avx512Amx)
    m.bf16DotPerFma = bf16DotPerFmaOf(m.vendor, m.family);
  m.cores = usableCores();
  return m;
}

} // namespace mhagen
