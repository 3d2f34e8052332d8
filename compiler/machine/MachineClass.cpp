#include "mhagen/machine/MachineClass.h"

#include "mhagen/machine/MachineModel.h"
#include "mhagen/runtime.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <sstream>

namespace mhagen {

MachineClass MachineClass::host() {
  // The identity, caches and cores do not depend on the target kind.
  const MachineModel m = hostMachine(TargetKind::Avx2);
  MachineClass c;
  c.vendor = m.vendor.empty() ? "unknown" : m.vendor;
  c.family = m.family;
  c.model = m.model;
  c.l2Bytes = m.l2Bytes;
  c.l3Bytes = m.l3Bytes;
  c.cores = m.cores;
  std::istringstream features(mhagen_cpu_features());
  for (std::string f; features >> f;)
    c.isa.push_back(f);
  std::sort(c.isa.begin(), c.isa.end());
  return c;
}

std::string MachineClass::key() const {
  std::string isaList;
  for (const std::string &f : isa)
    isaList += (isaList.empty() ? "" : ",") + f;
  return vendor + " " + std::to_string(family) + "/" + std::to_string(model) +
         " l2=" + std::to_string(l2Bytes / 1024) +
         "K l3=" + std::to_string(l3Bytes / 1024) +
         "K cores=" + std::to_string(cores) + " isa=" + isaList;
}

std::string MachineClass::brief() const {
  // The widest vector ISA names the class well enough for a report line.
  std::string widest = "no AVX";
  for (const char *f : {"avx2", "avx512f", "avx512_bf16", "amx_bf16"})
    if (std::find(isa.begin(), isa.end(), f) != isa.end())
      widest = f;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s %d/%d, %s, L2 %lld KiB, %d cores",
                vendor.c_str(), family, model, widest.c_str(),
                static_cast<long long>(l2Bytes / 1024), cores);
  return buf;
}

bool MachineClass::fromKey(const std::string &text, MachineClass &out,
                           std::string *error) {
  auto fail = [&](const std::string &why) {
    if (error)
      *error = "machine class '" + text + "': " + why +
               " (expected 'VENDOR FAMILY/MODEL l2=NK l3=NK cores=N "
               "isa=F1,F2,...', as `mhagen tune --report` prints it)";
    return false;
  };
  std::istringstream in(text);
  MachineClass c;
  std::string fm;
  if (!(in >> c.vendor >> fm))
    return fail("missing vendor or family/model");
  if (std::sscanf(fm.c_str(), "%d/%d", &c.family, &c.model) != 2 ||
      c.family < 0 || c.model < 0)
    return fail("bad family/model '" + fm + "'");
  bool l2 = false, l3 = false, cores = false, isa = false;
  for (std::string kv; in >> kv;) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos)
      return fail("'" + kv + "' is not name=value");
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    // A whole number followed by exactly `suffix`.
    auto number = [&](const char *suffix, long long max, long long &n) {
      char *end = nullptr;
      n = std::strtoll(v.c_str(), &end, 10);
      return !v.empty() && std::isdigit(static_cast<unsigned char>(v[0])) &&
             std::string(end) == suffix && n <= max;
    };
    long long n = 0;
    if (k == "l2" || k == "l3") {
      if (!number("K", 1LL << 40, n))
        return fail(k + " must be a size in KiB such as 2048K");
      (k == "l2" ? c.l2Bytes : c.l3Bytes) = n * 1024;
      (k == "l2" ? l2 : l3) = true;
    } else if (k == "cores") {
      if (!number("", 1 << 20, n))
        return fail("cores must be a count");
      c.cores = static_cast<int>(n);
      cores = true;
    } else if (k == "isa") {
      std::istringstream fs(v);
      for (std::string f; std::getline(fs, f, ',');)
        if (!f.empty())
          c.isa.push_back(f);
      std::sort(c.isa.begin(), c.isa.end());
      isa = true;
    } else {
      return fail("unknown field '" + k + "'");
    }
  }
  if (!l2 || !l3 || !cores || !isa)
    return fail("l2, l3, cores and isa are all needed");
  out = c;
  return true;
}

double machineClassDistance(const MachineClass &a, const MachineClass &b) {
  if (a.key() == b.key())
    return 0;
  auto logRatio = [](int64_t x, int64_t y) {
    return x > 0 && y > 0 ? std::fabs(std::log2(static_cast<double>(x) / y))
                          : 1.0;
  };
  std::vector<std::string> differ;
  std::set_symmetric_difference(a.isa.begin(), a.isa.end(), b.isa.begin(),
                                b.isa.end(), std::back_inserter(differ));
  double d = 100.0 * static_cast<double>(differ.size());
  d += 20.0 * logRatio(a.l2Bytes, b.l2Bytes);
  d += 10.0 * logRatio(a.cores, b.cores);
  if (a.vendor != b.vendor)
    d += 15.0;
  else if (a.family != b.family || a.model != b.model)
    d += 5.0;
  d += 2.0 * logRatio(a.l3Bytes, b.l3Bytes);
  return d;
}

} // namespace mhagen
