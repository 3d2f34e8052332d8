// The class of machine a measurement was taken on: what decides which
// schedule is fastest (docs/design.md §7, "Tuning records"). Tuning records
// carry it, and `generate --db` picks the record measured on the class it
// generates for, else the nearest class that has one, and says which.
#ifndef MHAGEN_MACHINE_MACHINECLASS_H
#define MHAGEN_MACHINE_MACHINECLASS_H

#include <cstdint>
#include <string>
#include <vector>

namespace mhagen {

struct MachineClass {
  std::string vendor; ///< cpuid vendor ("GenuineIntel", "AuthenticAMD")
  int family = 0, model = 0;
  /// ISA features as the runtime names them (mhagen_cpu_features: a
  /// machine presented as another class by $MHAGEN_CPU_CLASS is that
  /// class here too), sorted.
  std::vector<std::string> isa;
  int64_t l2Bytes = 0, l3Bytes = 0; ///< L2 per core, shared L3
  int cores = 0;                    ///< cores this process may use

  /// This machine's class.
  static MachineClass host();
  /// Parses key(); false (and *error) when `text` is not one.
  static bool fromKey(const std::string &text, MachineClass &out,
                      std::string *error);

  /// One line that names the class, e.g.
  /// "GenuineIntel 6/143 l2=2048K l3=266240K cores=2 isa=avx,avx2,...".
  /// Records with equal keys were measured on the same class.
  std::string key() const;
  /// A short human name: "GenuineIntel 6/143, avx512_bf16, L2 2 MiB, 2
  /// cores".
  std::string brief() const;
  bool known() const { return !vendor.empty(); }
  bool operator==(const MachineClass &o) const { return key() == o.key(); }
};

/// How far apart two classes are for choosing a tuning record: 0 for the
/// same class; the ISA weighs most (features one has and the other lacks),
/// then the L2 size (what the tile sizes are fitted to), the core count,
/// the vendor and model, and the L3.
double machineClassDistance(const MachineClass &a, const MachineClass &b);

} // namespace mhagen

#endif
