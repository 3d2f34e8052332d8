// mhagen explain: parameter, FLOP and memory counts of each spec.
#include "Commands.h"
#include "SpecOptions.h"

#include "mhagen/driver/BackendRegistry.h"
#include "mhagen/driver/Driver.h"
#include "mhagen/inspect/HeadInspection.h"
#include "mhagen/machine/MachineModel.h"
#include "mhagen/spec/CostModel.h"
#include "mhagen/spec/Rope.h"
#include "mhagen/spec/SpecParser.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <memory>

namespace mhagen::cli {

namespace {
// The machine a spec's kernel is compiled for: its class and the model the
// schedule reads (`host` resolved as generate would resolve it here).
std::string targetSection(const Target &target, DType dtype) {
  Target t = target;
  std::string name = target.str();
  try {
    t = resolveTarget(target, dtype);
  } catch (const std::exception &e) {
    return "target " + name + ": " + e.what() + "\n";
  }
  if (target.kind == TargetKind::Host)
    name += " -> " + t.str();
  return "target " + name + " (the machine model its schedule reads):\n" +
         machineOf(t).describe();
}

// Rotary positions: which channels rotate and the inverse frequencies the
// kernel embeds (compiler/spec/Rope.cpp).
std::string ropeSection(const AttentionSpec &s) {
  if (!s.rope.enabled())
    return "";
  const std::vector<double> inv = ropeInverseFrequencies(s.rope, s.d_k);
  char line[160];
  std::snprintf(line, sizeof line,
                "  rotated       %lld of %lld channels per head, %zu "
                "frequencies (%.6g .. %.6g), cos/sin x %.6g\n",
                static_cast<long long>(s.rope.rotated(s.d_k)),
                static_cast<long long>(s.d_k), inv.size(), inv.front(),
                inv.back(), ropeAttentionFactor(s.rope));
  return "rope " + s.rope.str() + ":\n" + line;
}

nlohmann::ordered_json ropeJson(const AttentionSpec &s) {
  nlohmann::ordered_json j;
  j["text"] = s.rope.str();
  j["rotated_channels"] = s.rope.rotated(s.d_k);
  j["inv_freq"] = ropeInverseFrequencies(s.rope, s.d_k);
  j["attention_factor"] = ropeAttentionFactor(s.rope);
  return j;
}

// What the spec's backend builds with its default schedule, where the
// backend says (the cuda backend: tiles, warps, shared memory).
std::string kernelSection(const AttentionSpec &s) {
  if (!backendBuilt(s.backend))
    return "";
  const std::string text = kernelBackend(s.backend).scheduleSummary(s);
  return text.empty() ? ""
                      : std::string("kernel (backend ") + toString(s.backend) +
                            ", default schedule):\n" + text;
}

nlohmann::ordered_json targetJson(const Target &target, DType dtype) {
  nlohmann::ordered_json j;
  j["target"] = target.str();
  try {
    const Target t = resolveTarget(target, dtype);
    j["resolved"] = t.str();
    j["class"] = machineOf(t).className;
    j["machine"] = machineOf(t).source;
  } catch (const std::exception &e) {
    j["error"] = e.what();
  }
  return j;
}
} // namespace

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
        nlohmann::ordered_json j =
            nlohmann::ordered_json::parse(costReportJson(specs[i], r));
        j["target"] = targetJson(specs[i].target, specs[i].dtype);
        if (specs[i].rope.enabled())
          j["rope"] = ropeJson(specs[i]);
        if (const std::string k = kernelSection(specs[i]); !k.empty())
          j["kernel"] = k;
        std::cout << (i ? ",\n" : "\n") << j.dump(2);
      }
      std::cout << "\n]\n";
    } else {
      for (size_t i = 0; i < specs.size(); ++i) {
        CostReport r = computeCost(specs[i], o->T, tkv, o->B, o->memBw);
        std::cout << (i ? "\n" : "") << formatCostReport(specs[i], r)
                  << ropeSection(specs[i])
                  << targetSection(specs[i].target, specs[i].dtype)
                  << kernelSection(specs[i]);
      }
    }
    exitCode = kExitOk;
  });
}

} // namespace mhagen::cli
