// The mhagen subcommands. Each registers its options on a CLI11 subcommand
// and sets the callback that runs it; the callback stores its exit code.
#ifndef MHAGEN_TOOLS_COMMANDS_H
#define MHAGEN_TOOLS_COMMANDS_H

#include "mhagen/spec/ScheduleParams.h"

#include <CLI/CLI.hpp>

#include <set>
#include <string>

namespace mhagen::cli {

/// Exit codes: 0 success, 1 a failure while doing the work (generation,
/// running, checking), 2 bad usage or an invalid spec.
enum ExitCode { kExitOk = 0, kExitFailure = 1, kExitUsage = 2 };

/// The bounds of the run-time size flags (--B, --T, --Tkv): the spec
/// language's own limit on static sizes, so an error names the real range.
constexpr int64_t kMaxRunSize = int64_t(1) << 24;
inline CLI::Range sizeRange() { return CLI::Range(int64_t(1), kMaxRunSize); }
/// --threads: 1 .. MHAGEN_MAX_THREADS (runtime.h).
inline CLI::Range threadRange() { return CLI::Range(1, 256); }

/// --format text | json, the report format of every command that prints
/// one (default: the variable's value).
inline CLI::Option *addFormatOption(CLI::App *cmd, std::string &format) {
  return cmd->add_option("--format", format, "text | json")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
}

/// "stmt,asm" -> {"stmt", "asm"}; throws CLI::ValidationError.
std::set<std::string> parseEmitList(const std::string &list);
/// "q_tile=64,key_tile=32" -> params; throws CLI::ValidationError.
ScheduleParams parseScheduleList(const std::string &list);

void addExplainCommand(CLI::App &app, int &exitCode);
void addGenerateCommand(CLI::App &app, int &exitCode);
void addRunCommand(CLI::App &app, int &exitCode);
void addListTargetsCommand(CLI::App &app, int &exitCode);
void addInspectCommand(CLI::App &app, int &exitCode);
void addSealCommand(CLI::App &app, int &exitCode);
void addTuneCommand(CLI::App &app, int &exitCode);
void addHeadsCommand(CLI::App &app, int &exitCode);

} // namespace mhagen::cli

#endif
