// mhagen generate (the default subcommand): spec(s) -> object, header,
// manifest (+ IR dumps, + a loadable shared library).
#include "Commands.h"
#include "SpecOptions.h"

#include "mhagen/driver/Driver.h"
#include "mhagen/spec/SpecParser.h"
#include "mhagen/tune/TunedSchedule.h"

#include <cctype>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

namespace mhagen::cli {

namespace {
// A name that is one file in the output directory and nothing else.
bool plainFileName(const std::string &name) {
  if (name.empty() || name[0] == '.' || name[0] == '-')
    return false;
  for (unsigned char c : name)
    if (!std::isalnum(c) && c != '_' && c != '.' && c != '-')
      return false;
  return true;
}
} // namespace

std::set<std::string> parseEmitList(const std::string &list) {
  static const std::set<std::string> known = {
      "stmt", "html", "llvm", "asm", "mlir", "ptx", "cu", "ptxas", "fatbin"};
  std::set<std::string> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty())
      continue;
    bool stage = item.rfind("mlir.", 0) == 0;
    if (!known.count(item) && !stage)
      throw CLI::ValidationError(
          "--emit", "unknown IR '" + item +
                        "'; choose from stmt, html, llvm, asm, mlir, "
                        "mlir.<stage>, ptx, cu, ptxas, fatbin");
    out.insert(item);
  }
  return out;
}

ScheduleParams parseScheduleList(const std::string &list) {
  ScheduleParams p;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty())
      continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw CLI::ValidationError("--schedule",
                                 "expected NAME=VALUE, got '" + item + "'");
    try {
      size_t used = 0;
      long long v = std::stoll(item.substr(eq + 1), &used);
      if (used != item.size() - eq - 1)
        throw std::invalid_argument("trailing text");
      p[item.substr(0, eq)] = v;
    } catch (const std::exception &) {
      throw CLI::ValidationError("--schedule", "value of '" +
                                                   item.substr(0, eq) +
                                                   "' is not an integer");
    }
  }
  return p;
}

void addGenerateCommand(CLI::App &app, int &exitCode) {
  auto *cmd = app.add_subcommand(
      "generate", "Generate kernels: object, C header and manifest (default)");
  struct Opts {
    SpecOptions spec;
    std::string outDir = ".";
    std::string emit;
    bool shared = false;
    std::string libName = "mhagen_kernels";
    std::string schedule;
    std::string targets;
    std::string bundle;
    std::string db;
    std::string machineClass;
  };
  auto o = std::make_shared<Opts>();
  o->spec.addTo(*cmd);
  cmd->add_option("-o,--out-dir", o->outDir, "output directory")
      ->capture_default_str();
  cmd->add_option("--emit", o->emit,
                  "also write IRs: stmt,html,llvm,asm (halide); "
                  "mlir,mlir.<stage>,llvm,asm (mlir); ptx (cuda)");
  cmd->add_flag("--shared", o->shared,
                "also link a loadable shared library of all kernels");
  cmd->add_option("--lib-name", o->libName,
                  "shared library name (lib<NAME>.so)")
      ->capture_default_str();
  cmd->add_option("--schedule", o->schedule,
                  "schedule parameters NAME=VALUE,... (override defaults)");
  cmd->add_option("--db", o->db,
                  "tuning database: each spec gets its best correct record "
                  "(the default schedule, with a note, when there is none)");
  cmd->add_option("--machine-class", o->machineClass,
                  "with --db: the machine class the kernels are for, as "
                  "`mhagen tune --report` prints it (default: this machine)");
  cmd->add_option("--targets", o->targets,
                  "generate each spec for each of these targets "
                  "(comma-separated, e.g. avx2,avx512); overrides --target");
  cmd->add_option("--bundle", o->bundle,
                  "also write NAME.o (every kernel in one object) and NAME.h "
                  "(including every header): fixed names for build systems");
  cmd->callback([o, &exitCode] {
    // Both name files written into -o; a path would write elsewhere (or
    // fail only in the linker, after every kernel was compiled).
    for (const auto &[flag, name] :
         {std::pair<const char *, const std::string &>{"--lib-name",
                                                       o->libName},
          {"--bundle", o->bundle}})
      if (!name.empty() && !plainFileName(name)) {
        std::cerr << "error: " << flag << " '" << name
                  << "' must be a plain name (letters, digits, '_', '.', "
                     "'-'; not starting with '.' or '-'): the files go into "
                     "-o\n";
        exitCode = kExitUsage;
        return;
      }
    std::vector<AttentionSpec> specs;
    GenerateOptions g;
    try {
      specs = o->spec.build();
      g.emit = parseEmitList(o->emit);
      g.schedule = parseScheduleList(o->schedule);
    } catch (const SpecError &e) {
      std::cerr << e.what() << "\n";
      exitCode = kExitUsage;
      return;
    } catch (const CLI::Error &e) {
      std::cerr << "error: " << e.what() << "\n";
      exitCode = kExitUsage;
      return;
    }
    g.outDir = o->outDir;
    std::optional<MachineClass> machine;
    if (!o->machineClass.empty()) {
      MachineClass c;
      std::string why;
      if (o->db.empty() || !MachineClass::fromKey(o->machineClass, c, &why)) {
        std::cerr << "error: --machine-class: "
                  << (o->db.empty() ? "only meaningful with --db" : why)
                  << "\n";
        exitCode = kExitUsage;
        return;
      }
      machine = c;
    }
    if (!g.schedule.empty())
      g.scheduleSource.kind = "explicit";
    if (!o->targets.empty()) {
      std::vector<AttentionSpec> expanded;
      std::stringstream ss(o->targets);
      std::set<std::string> seen;
      // (spec, target) pairs already expanded, with host resolved: on an
      // AVX-512 machine `--targets host,avx512` names avx512 twice and
      // generates it once.
      std::set<std::pair<std::string, std::string>> kernels;
      for (std::string name; std::getline(ss, name, ',');) {
        if (!seen.insert(name).second)
          continue; // --targets avx2,avx2 names avx2 once
        Target t;
        if (!parseTarget(name, t)) {
          std::cerr << "error: --targets: unknown target '" << name
                    << "'; expected host, avx2, avx512, avx512_bf16, "
                       "cuda[_smXX] or opencl\n";
          exitCode = kExitUsage;
          return;
        }
        for (AttentionSpec s : specs) {
          s.target = resolveTarget(t, s.dtype);
          if (kernels.insert({s.name, s.target.str()}).second)
            expanded.push_back(s);
        }
      }
      specs = expanded;
    }
    try {
      std::vector<GeneratedKernel> all;
      if (o->db.empty()) {
        all = generateKernels(specs, g);
      } else {
        std::set<std::string> warned; // each torn record once
        for (const AttentionSpec &s : specs) {
          GenerateOptions one = g;
          std::vector<std::string> warnings;
          bool tuned = applyTuningDatabase(s, o->db, one, &warnings,
                                           machine ? &*machine : nullptr);
          for (const std::string &w : warnings)
            if (warned.insert(w).second)
              std::cerr << "mhagen: warning: " << w << "\n";
          if (!one.scheduleSource.note.empty())
            std::cerr << "mhagen: note: " << s.kernelName() << ": "
                      << one.scheduleSource.note << "\n";
          if (tuned && one.scheduleSource.note.empty())
            std::cerr << "mhagen: " << s.kernelName() << ": tuned record "
                      << one.scheduleSource.trialId
                      << ", measured on this machine class\n";
          else if (!g.schedule.empty())
            for (const auto &[k, v] : g.schedule)
              one.schedule[k] = v; // explicit --schedule wins
          auto ks = generateKernels({s}, one);
          all.insert(all.end(), ks.begin(), ks.end());
        }
      }
      for (const GeneratedKernel &k : all) {
        std::cout << k.symbol << ": " << k.objectPath << " " << k.headerPath
                  << " " << k.manifestPath;
        for (const auto &[name, path] : k.irPaths)
          std::cout << " " << path;
        std::cout << "\n";
      }
      if (!o->bundle.empty()) {
        writeBundle(all, o->outDir, o->bundle);
        std::cout << "bundle: " << o->outDir << "/" << o->bundle << ".o "
                  << o->outDir << "/" << o->bundle << ".h\n";
      }
      if (o->shared) {
        std::string lib = o->outDir + "/lib" + o->libName + ".so";
        linkSharedLibrary(all, lib);
        std::cout << "shared library: " << lib << "\n";
      }
      exitCode = kExitOk;
    } catch (const DriverError &e) {
      std::cerr << "mhagen: error: " << e.what() << "\n";
      exitCode = e.inputError ? kExitUsage : kExitFailure;
    } catch (const std::exception &e) {
      std::cerr << "mhagen: error: " << e.what() << "\n";
      exitCode = kExitFailure;
    }
  });
}

} // namespace mhagen::cli
