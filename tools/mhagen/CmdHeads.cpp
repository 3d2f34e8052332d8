// mhagen heads: run a layer kernel (with its log-sum-exp output) on given
// or seeded inputs, rebuild every head's attention weights from lse, and
// report each head's entropy; write a heatmap per head, a grid of all
// heads and the weights as .npy.
#include "Commands.h"
#include "KernelLibrary.h"
#include "SpecOptions.h"

#include "mhagen/harness/KernelHarness.h"
#include "mhagen/harness/RunCheck.h"
#include "mhagen/inspect/HeadInspection.h"
#include "mhagen/inspect/Npy.h"
#include "mhagen/runtime.h"
#include "mhagen/spec/SpecParser.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

namespace mhagen::cli {

namespace {

// The most tokens heads inspects: it holds h x T x T weights in memory
// and writes them to weights.npy (h 32, T 4096: 2 GiB).
constexpr int64_t kMaxHeadsTokens = 4096;

// A command line heads cannot run (exit code kExitUsage).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct HeadsOpts {
  SpecOptions spec;
  int64_t T = 16;
  uint32_t seed = 1;
  std::string x;
  std::string weights; // w_q,w_k,w_v,w_o
  std::string biases;  // b_q,b_k,b_v,b_o
  std::string norms;   // q_norm,k_norm
  std::string outDir = "mhagen-heads";
  bool perRow = false;
  bool noPng = false;
  std::string format = "text";
};

std::vector<std::string> splitList(const std::string &s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    out.push_back(item);
  return out;
}

// Entropy and weights are only defined for finite inputs: a NaN or
// infinity is named with its file and element instead of being reported
// as a failed check.
void requireFinite(const std::string &path, const std::string &name,
                   const std::vector<float> &values) {
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]))
      throw std::runtime_error(path + ": input is not finite: " + name +
                               " element " + std::to_string(i) + " is " +
                               std::to_string(values[i]));
}

// An .npy input for tensor `name` whose shape must be `want` (outermost
// first); a leading batch dimension of 1 is accepted where noted.
std::vector<float> loadInput(const std::string &path, const std::string &name,
                             const std::vector<int64_t> &want,
                             bool batchOfOne) {
  inspect::NpyArray a = inspect::readNpy(path);
  std::vector<int64_t> shape = a.shape;
  if (batchOfOne && shape.size() == want.size() + 1 && shape[0] == 1)
    shape.erase(shape.begin());
  if (shape != want) {
    inspect::NpyArray w;
    w.shape = want;
    throw std::runtime_error(path + ": " + name + " must have shape " +
                             w.shapeText() + ", not " + a.shapeText());
  }
  requireFinite(path, name, a.data);
  return a.data;
}

int runHeads(const HeadsOpts &o, AttentionSpec spec) {
  if (spec.op != Op::Layer)
    throw UsageError("op = sdpa has no weights to inspect; heads runs a "
                     "layer (op = layer)");
  if (spec.cachedLayer())
    throw UsageError("heads inspects a layer over its own tokens; drop "
                     "kv_cache = contiguous (the weights over a cache need "
                     "the cache's keys, which heads does not take)");
  if (spec.target.isGpu())
    throw UsageError("heads runs the layer on this CPU (lse is a CPU "
                     "output); drop target = " +
                     spec.target.str());
  spec.lse = true; // the weights are rebuilt from it
  spec.target = resolveTarget(spec.target, spec.dtype);
  const int64_t d = spec.d, h = spec.h, kv = spec.n_kv, dk = spec.d_k,
                dv = spec.d_v;

  // x fixes T; otherwise --T.
  int64_t T = o.T;
  std::vector<float> x;
  if (!o.x.empty()) {
    inspect::NpyArray a = inspect::readNpy(o.x);
    std::vector<int64_t> shape = a.shape;
    if (shape.size() == 3 && shape[0] == 1)
      shape.erase(shape.begin());
    if (shape.size() != 2 || shape[1] != d || shape[0] < 1)
      throw std::runtime_error(o.x + ": x must have shape [T, " +
                               std::to_string(d) + "] or [1, T, " +
                               std::to_string(d) + "], not " + a.shapeText());
    T = shape[0];
    if (T > kMaxHeadsTokens)
      throw UsageError(o.x + ": x has " + std::to_string(T) +
                       " tokens; heads rebuilds h x T x T weights and "
                       "inspects at most " +
                       std::to_string(kMaxHeadsTokens) +
                       " (the --T limit): pass a slice of x");
    requireFinite(o.x, "x", a.data);
    x = a.data;
  }
  if (spec.T && *spec.T != T)
    throw std::runtime_error("the spec fixes T = " + std::to_string(*spec.T) +
                             " but the input has " + std::to_string(T) +
                             " tokens");
  ProblemOptions po;
  po.seed = o.seed;
  Problem p(spec, ProblemSize{1, T, T}, po);
  if (!x.empty())
    p.setInput("x", x);
  if (!o.weights.empty()) {
    const std::vector<std::string> files = splitList(o.weights);
    if (files.size() != 4)
      throw std::runtime_error("--weights takes four files, "
                               "w_q.npy,w_k.npy,w_v.npy,w_o.npy; got " +
                               std::to_string(files.size()));
    const char *names[] = {"w_q", "w_k", "w_v", "w_o"};
    const std::vector<int64_t> shapes[] = {
        {d, h * dk}, {d, kv * dk}, {d, kv * dv}, {h * dv, d}};
    for (int i = 0; i < 4; ++i)
      p.setInput(names[i], loadInput(files[i], names[i], shapes[i], false));
  }
  if (!o.biases.empty()) {
    if (!spec.bias)
      throw std::runtime_error("--biases given but the spec has bias = false");
    const std::vector<std::string> files = splitList(o.biases);
    if (files.size() != 4)
      throw std::runtime_error("--biases takes four files, "
                               "b_q.npy,b_k.npy,b_v.npy,b_o.npy");
    const char *names[] = {"b_q", "b_k", "b_v", "b_o"};
    const std::vector<int64_t> shapes[] = {{h * dk}, {kv * dk}, {kv * dv}, {d}};
    for (int i = 0; i < 4; ++i)
      p.setInput(names[i], loadInput(files[i], names[i], shapes[i], false));
  }
  if (!o.norms.empty()) {
    if (!spec.qk_norm.enabled())
      throw std::runtime_error("--norms given but the spec has qk_norm = "
                               "none");
    const std::vector<std::string> files = splitList(o.norms);
    if (files.size() != 2)
      throw std::runtime_error("--norms takes two files, "
                               "q_norm.npy,k_norm.npy");
    const char *names[] = {"q_norm", "k_norm"};
    const std::vector<int64_t> shapes[] = {{spec.qk_norm.groupWidth(h, dk)},
                                           {spec.qk_norm.groupWidth(kv, dk)}};
    for (int i = 0; i < 2; ++i)
      p.setInput(names[i], loadInput(files[i], names[i], shapes[i], false));
  }

  // The layer kernel, generated for this spec and run once.
  SpecLibrary lib = generateSpecLibrary(spec, GenerateOptions{}, "");
  mhagen_library *loaded = nullptr;
  if (mhagen_load_library(lib.path.c_str(), &loaded) != MHAGEN_OK)
    throw std::runtime_error(mhagen_last_error());
  const mhagen_kernel *k = nullptr;
  if (mhagen_find(variantSymbol(spec).c_str(), &k) != MHAGEN_OK)
    throw std::runtime_error(mhagen_last_error());
  mhagen_call_args a = p.args();
  if (mhagen_call(k, &a) != MHAGEN_OK)
    throw std::runtime_error(mhagen_last_error());
  // The output and lse against the f64 reference on sampled rows: the
  // weights below are only as good as the kernel's lse.
  const std::vector<int64_t> rows = rowsToCheck(p, 3e8);
  const Comparison out = p.check(rows), lse = p.checkLse(rows);

  inspect::LayerCall c;
  c.T = T;
  c.x = p.inputValues("x");
  c.wq = p.inputValues("w_q");
  c.wk = p.inputValues("w_k");
  c.bq = p.inputValues("b_q");
  c.bk = p.inputValues("b_k");
  c.qNorm = p.inputValues("q_norm");
  c.kNorm = p.inputValues("k_norm");
  c.positions = p.positions().empty() ? nullptr : p.positions().data();
  c.sinks = p.inputValues("sinks");
  c.alibiSlopes = p.inputValues("alibi_slopes");
  c.scale = p.inputValues("scale");
  c.lse = p.lse().data();
  const inspect::HeadWeights w = inspect::rebuildHeadWeights(spec, c);

  // Files: a heatmap per head, the grid, the weights and entropies.
  std::filesystem::create_directories(o.outDir);
  std::vector<std::string> written;
  auto out2 = [&](const std::string &name) {
    written.push_back(o.outDir + "/" + name);
    return written.back();
  };
  if (!o.noPng) {
    for (int64_t head = 0; head < h; ++head) {
      char title[96], file[32];
      std::snprintf(title, sizeof title, "head %lld (kv %lld): %.3f nats",
                    static_cast<long long>(head),
                    static_cast<long long>(head / spec.groupSize()),
                    w.meanEntropy[head]);
      std::snprintf(file, sizeof file, "head_%02lld.png",
                    static_cast<long long>(head));
      inspect::writePng(out2(file), inspect::renderHeatmap(w, head, title));
    }
    inspect::writePng(out2("heads.png"), inspect::renderHeadGrid(w, spec));
  }
  inspect::writeNpy(out2("weights.npy"), {h, T, T}, w.weights.data());
  std::vector<float> ent(w.entropy.begin(), w.entropy.end());
  inspect::writeNpy(out2("entropy.npy"), {h, T}, ent.data());

  // The largest mean a head could have: uniform over each row's outcomes
  // (its keys, and its learned sink).
  double meanMaxEntropy = 0;
  for (double bound : w.maxEntropy)
    meanMaxEntropy += bound / static_cast<double>(T);
  const bool ok = out.ok() && lse.ok();
  if (o.format == "json") {
    nlohmann::ordered_json j;
    j["spec"] = spec.kernelName();
    j["T"] = T;
    j["within_tolerance"] = ok;
    j["output_max_abs_err"] = out.maxAbsErr;
    j["lse_max_abs_err"] = lse.maxAbsErr;
    j["lse_normalisation_error"] = w.maxNormError;
    j["mean_entropy_bound_nats"] = meanMaxEntropy;
    if (o.perRow)
      j["entropy_bound_nats"] = w.maxEntropy;
    nlohmann::ordered_json heads = nlohmann::ordered_json::array();
    for (int64_t head = 0; head < h; ++head) {
      nlohmann::ordered_json e;
      e["head"] = head;
      e["kv_head"] = head / spec.groupSize();
      e["mean_entropy_nats"] = w.meanEntropy[head];
      if (o.perRow)
        e["entropy_nats"] = std::vector<double>(
            w.entropy.begin() + head * T, w.entropy.begin() + (head + 1) * T);
      heads.push_back(e);
    }
    j["heads"] = heads;
    j["files"] = written;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "spec    " << spec.kernelName() << ", T " << T << "\n";
    std::printf("check   output max |err| %.3g, lse max |err| %.3g vs the "
                "f64 reference on %zu rows: %s\n",
                out.maxAbsErr, lse.maxAbsErr,
                rows.empty() ? size_t(T) : rows.size(), ok ? "OK" : "FAILED");
    std::printf("weights rebuilt as exp(s - lse); rows sum to 1 within "
                "%.2g\n",
                w.maxNormError);
    std::printf("head  kv  mean entropy (nats)  of at most\n");
    for (int64_t head = 0; head < h; ++head)
      std::printf("%4lld %3lld  %19.4f  %10.4f\n", static_cast<long long>(head),
                  static_cast<long long>(head / spec.groupSize()),
                  w.meanEntropy[head], meanMaxEntropy);
    if (o.perRow) {
      std::printf("entropy per row (nats), one column per head:\n");
      for (int64_t i = 0; i < T; ++i) {
        std::printf("%5lld", static_cast<long long>(i));
        for (int64_t head = 0; head < h; ++head)
          std::printf(" %8.4f", w.entropy[head * T + i]);
        std::printf("\n");
      }
    }
    for (const std::string &f : written)
      std::cout << "wrote   " << f << "\n";
  }
  return ok ? kExitOk : kExitFailure;
}

} // namespace

void addHeadsCommand(CLI::App &app, int &exitCode) {
  auto *cmd = app.add_subcommand(
      "heads", "Run a layer kernel and inspect its heads: attention weights "
               "rebuilt from lse, entropy per head, heatmaps");
  auto o = std::make_shared<HeadsOpts>();
  o->spec.addTo(*cmd);
  cmd->add_option("--T", o->T,
                  "tokens of the seeded random input (an --x "
                  "file fixes T itself)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), kMaxHeadsTokens));
  cmd->add_option("--seed", o->seed, "seed of the random inputs")
      ->capture_default_str();
  cmd->add_option("--x", o->x,
                  "input tokens, .npy f32/f64 [T, d] or [1, T, d]");
  cmd->add_option("--weights", o->weights,
                  "w_q.npy,w_k.npy,w_v.npy,w_o.npy ([d, h*dk], [d, kv*dk], "
                  "[d, kv*dv], [h*dv, d]); default: seeded random");
  cmd->add_option("--biases", o->biases,
                  "b_q.npy,b_k.npy,b_v.npy,b_o.npy (bias = true)");
  cmd->add_option("--norms", o->norms,
                  "q_norm.npy,k_norm.npy ([dk] each, or [h*dk] and [kv*dk]; "
                  "qk_norm); default: seeded random");
  cmd->add_option("-o,--out", o->outDir,
                  "directory for head_NN.png, heads.png, weights.npy "
                  "[h, T, T] and entropy.npy [h, T]")
      ->capture_default_str();
  cmd->add_flag("--per-row", o->perRow, "also print each row's entropy");
  cmd->add_flag("--no-png", o->noPng, "write only the .npy files");
  addFormatOption(cmd, o->format);
  cmd->callback([o, &exitCode] {
    std::vector<AttentionSpec> specs;
    try {
      specs = o->spec.build();
      if (specs.size() != 1)
        throw UsageError("give one layer spec, got " +
                         std::to_string(specs.size()));
      exitCode = runHeads(*o, specs[0]);
    } catch (const SpecError &e) {
      std::cerr << e.what() << "\n";
      exitCode = kExitUsage;
    } catch (const UsageError &e) {
      std::cerr << "mhagen heads: error: " << e.what() << "\n";
      exitCode = kExitUsage;
    } catch (const std::exception &e) {
      std::cerr << "mhagen heads: error: " << e.what() << "\n";
      exitCode = kExitFailure;
    }
  });
}

} // namespace mhagen::cli
