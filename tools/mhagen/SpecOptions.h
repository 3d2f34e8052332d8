// The spec flags shared by every mhagen subcommand (--d --h --kv ...), and
// spec files given as positional arguments. Flags become a RawSpec, so they
// go through the same defaults, conversions and errors as spec files.
#ifndef MHAGEN_TOOLS_SPECOPTIONS_H
#define MHAGEN_TOOLS_SPECOPTIONS_H

#include "mhagen/spec/AttentionSpec.h"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace mhagen::cli {

class SpecOptions {
public:
  /// Registers the spec flags and the positional spec files on `app`.
  void addTo(CLI::App &app, bool allowFiles = true);
  /// The specs the command line describes: every spec of every file, or
  /// the one spec the flags describe, where an absent --d is 4096, an
  /// absent --h is 32 and every other field takes the spec language's
  /// default (as --help says). Flags given together with files override
  /// those fields in every file spec. A file without a spec is an error.
  /// Throws SpecError.
  std::vector<AttentionSpec> build() const;
  /// True when any spec flag or spec file was given.
  bool anyGiven() const;

  const std::vector<std::string> &files() const { return files_; }

private:
  struct Flag {
    std::string field; ///< canonical spec field
    std::string value; ///< a value flag's text
    bool isSwitch = false;
    bool on = false; ///< a switch's state
    CLI::Option *opt = nullptr;
  };
  /// One per spec field with a flag (mhagen/spec/SpecFields.h); the
  /// options point into it, so it is filled once and never resized.
  std::vector<Flag> flags_;
  std::vector<std::string> files_;
};

} // namespace mhagen::cli

#endif
