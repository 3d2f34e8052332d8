// libFuzzer target: the spec language parser and validation. Any input
// either parses into valid specs or raises SpecError with diagnostics; a
// parsed spec's canonical text parses back to the same spec (a property,
// checked here, not only "no crash").
#include "mhagen/spec/SpecParser.h"

#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096)
    return 0;
  std::string text(reinterpret_cast<const char *>(data), size);
  std::vector<mhagen::AttentionSpec> specs;
  try {
    specs = mhagen::parseSpecs(text, "fuzz.mha");
  } catch (const mhagen::SpecError &e) {
    if (e.diagnostics().empty())
      std::abort(); // an error must say what is wrong
    return 0;
  }
  for (const mhagen::AttentionSpec &s : specs) {
    const std::string canon = s.canonical();
    std::vector<mhagen::AttentionSpec> again;
    try {
      again = mhagen::parseSpecs(canon, "canonical.mha");
    } catch (const mhagen::SpecError &) {
      std::abort(); // canonical text of a valid spec must parse
    }
    if (again.size() != 1 || again[0].canonical() != canon ||
        again[0].hash() != s.hash())
      std::abort();
  }
  return 0;
}
