// One spec generated into a shared library for the commands that run a
// kernel in this process (run, heads).
#ifndef MHAGEN_TOOLS_KERNELLIBRARY_H
#define MHAGEN_TOOLS_KERNELLIBRARY_H

#include "mhagen/driver/Driver.h"
#include "mhagen/support/Process.h"

#include <memory>
#include <string>

namespace mhagen::cli {

struct SpecLibrary {
  std::unique_ptr<TempDir> tmp; ///< the directory, unless one was kept
  std::string path;             ///< lib<symbol>.so
  double generateSeconds = 0;
};

/// Generates `spec` with `g` (its outDir is set here) into `keepDir`, or a
/// temporary directory removed with the result, and links
/// lib<variantSymbol(spec)>.so there.
SpecLibrary generateSpecLibrary(const AttentionSpec &spec, GenerateOptions g,
                                const std::string &keepDir);

} // namespace mhagen::cli

#endif
