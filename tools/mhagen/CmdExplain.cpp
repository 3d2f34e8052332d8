// mhagen explain: parameter, FLOP and memory counts of each spec.
#include "Commands.h"
#include "SpecOptions.h"

#include "mhagen/inspect/HeadInspection.h"
#include "mhagen/spec/CostModel.h"
#include "mhagen/spec/SpecParser.h"

#include <iostream>
#include <memory>

namespace mhagen::cli {

void addExplainCommand(CLI::App &app, int &exitCode) {
  auto *cmd = app.add_subcommand(
      "explain", "Print parameter, FLOP and memory counts of a spec");
  struct Opts {
    SpecOptions spec;
    int64_t T = 2048, Tkv = 0, B = 1;
    std::string format = "text";
    double memBw = 0;
    std::string plot;
  };
  auto o = std::make_shared<Opts>();
  o->spec.addTo(*cmd);
  cmd->add_option("--T", o->T, "query length to count FLOPs for")
      ->capture_default_str()
      ->check(sizeRange());
  cmd->add_option("--Tkv", o->Tkv, "key/value length (default: T)")
      ->check(sizeRange());
  cmd->add_option("--B", o->B, "batch")
      ->capture_default_str()
      ->check(sizeRange());
  cmd->add_option("--mem-bw", o->memBw,
                  "memory bandwidth in GB/s (e.g. a measured triad): also "
                  "print the K/V bandwidth floor of one call")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--plot", o->plot,
                  "also draw how the heads split the projection columns (and "
                  "the K/V groups) into this PNG (one spec)");
  addFormatOption(cmd, o->format);
  cmd->callback([o, &exitCode] {
    std::vector<AttentionSpec> specs;
    try {
      specs = o->spec.build();
    } catch (const SpecError &e) {
      std::cerr << e.what() << "\n";
      exitCode = kExitUsage;
      return;
    }
    if (!o->plot.empty()) {
      if (specs.size() != 1) {
        std::cerr << "mhagen explain: error: --plot draws one spec, got "
                  << specs.size() << "\n";
        exitCode = kExitUsage;
        return;
      }
      try {
        inspect::writePng(o->plot, inspect::renderHeadSplit(specs[0]));
      } catch (const std::exception &e) {
        std::cerr << "mhagen explain: error: " << e.what() << "\n";
        exitCode = kExitFailure;
        return;
      }
    }
    const int64_t tkv = o->Tkv ? o->Tkv : o->T;
    if (o->format == "json") {
      std::cout << "[";
      for (size_t i = 0; i < specs.size(); ++i) {
        CostReport r = computeCost(specs[i], o->T, tkv, o->B, o->memBw);
        std::cout << (i ? ",\n" : "\n") << costReportJson(specs[i], r);
      }
      std::cout << "\n]\n";
    } else {
      for (size_t i = 0; i < specs.size(); ++i) {
        CostReport r = computeCost(specs[i], o->T, tkv, o->B, o->memBw);
        std::cout << (i ? "\n" : "") << formatCostReport(specs[i], r);
      }
    }
    exitCode = kExitOk;
  });
}

} // namespace mhagen::cli
