// The mhagen subcommands. Each registers its options on a CLI11 subcommand
// and sets the callback that runs it; the callback stores its exit code.
#ifndef MHAGEN_TOOLS_COMMANDS_H
#define MHAGEN_TOOLS_COMMANDS_H

#include <CLI/CLI.hpp>

namespace mhagen::cli {

/// Exit codes: 0 success, 1 a failure while doing the work (generation,
/// running, checking), 2 bad usage or an invalid spec.
enum ExitCode { kExitOk = 0, kExitFailure = 1, kExitUsage = 2 };

void addExplainCommand(CLI::App &app, int &exitCode);

} // namespace mhagen::cli

#endif
