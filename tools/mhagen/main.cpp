// mhagen: generates specialized multi-head attention kernels ahead of time.
//   mhagen [generate] --d 4096 --h 32 --kv 8 --target avx512 -o DIR
//   mhagen explain | run | list-targets | inspect | tune ...
#include "Commands.h"

#include "mhagen/spec/SpecFields.h"
#include "mhagen/spec/SpecParser.h"
#include "mhagen/support/Process.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#ifndef MHAGEN_VERSION
#define MHAGEN_VERSION "0.0.0"
#endif

int main(int argc, char **argv) {
  using namespace mhagen::cli;
  // A mhagen killed by SIGTERM/SIGINT (a tuner's trial, a build tool's
  // timeout) removes its temporary directories first.
  mhagen::removeTempDirsOnSignals();
  CLI::App app{"mhagen " MHAGEN_VERSION
               ": ahead-of-time generator of specialized multi-head "
               "attention kernels",
               "mhagen"};
  app.set_version_flag("--version", std::string("mhagen ") + MHAGEN_VERSION);
  app.require_subcommand(1);
  int exitCode = kExitOk;
  addGenerateCommand(app, exitCode);
  addExplainCommand(app, exitCode);
  addRunCommand(app, exitCode);
  addListTargetsCommand(app, exitCode);
  addInspectCommand(app, exitCode);
  addSealCommand(app, exitCode);
  addTuneCommand(app, exitCode);
  addHeadsCommand(app, exitCode);

  // `generate` is the default subcommand: `mhagen --d 4096 ...` means
  // `mhagen generate --d 4096 ...`.
  std::vector<std::string> args(argv + 1, argv + argc);
  // Bare `mhagen` generates nothing: it says how to ask for a kernel.
  if (args.empty()) {
    std::cout << app.help()
              << "\nmhagen: give a spec (spec files, or "
                 "flags such as --d 4096 --h 32) or a subcommand\n";
    return kExitUsage;
  }
  // `mhagen help [SUBCOMMAND | fields]`.
  if (args[0] == "help") {
    if (args.size() == 1) {
      std::cout << app.help()
                << "\n`mhagen help fields` lists the spec language's fields "
                   "(docs/spec-language.md)\n";
      return kExitOk;
    }
    if (args[1] == "fields") {
      const bool cmake = args.size() > 2 && args[2] == "--cmake";
      std::cout << (cmake ? mhagen::specFieldsCMake()
                          : mhagen::specFieldsMarkdown());
      return kExitOk;
    }
    for (const CLI::App *sub : app.get_subcommands({}))
      if (sub->get_name() == args[1]) {
        std::cout << sub->help();
        return kExitOk;
      }
    std::cerr << "mhagen: help: no subcommand '" << args[1] << "'\n";
    return kExitUsage;
  }
  bool hasSubcommand = false;
  if (!args.empty()) {
    for (const CLI::App *sub : app.get_subcommands({}))
      if (sub->get_name() == args[0])
        hasSubcommand = true;
    if (args[0] == "--help" || args[0] == "-h" || args[0] == "--version")
      hasSubcommand = true;
  }
  if (!hasSubcommand)
    args.insert(args.begin(), "generate");
  std::reverse(args.begin(), args.end()); // CLI11 takes them reversed
  try {
    app.parse(args);
  } catch (const CLI::ParseError &e) {
    // CLI11 says "--d: At Most 1 required but received 2" for a repeated
    // flag; say it in the user's terms.
    static const std::regex repeated(
        R"(^(\S+): At Most 1 required but received (\d+)$)");
    std::smatch m;
    const std::string what = e.what();
    if (std::regex_match(what, m, repeated)) {
      std::cerr << "error: " << m[1] << " is given " << m[2]
                << " times; give it once\n";
      return kExitUsage;
    }
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  return exitCode;
}
