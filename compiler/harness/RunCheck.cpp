#include "mhagen/harness/RunCheck.h"

#include "mhagen/backend/AbiWrapper.h"
#include "mhagen/cuda_launch.h"
#include "mhagen/manifest.hpp"
#include "mhagen/spec/CostModel.h"
#include "mhagen/spec/SpecParser.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <thread>

namespace mhagen {

AttentionSpec specOfKernel(const mhagen_kernel *k) {
  KernelManifest m;
  std::string err;
  if (!KernelManifest::fromJson(mhagen_kernel_manifest(k), m, &err))
    throw std::runtime_error(err);
  return parseSpecs(m.spec.canonical, m.symbol).at(0);
}

namespace {

/// What one checked, timed call gave.
struct Measured {
  Comparison cmp;
  std::optional<Comparison> storage; ///< K/V stored as another type
  std::optional<Comparison> lse;     ///< lse = true
  std::optional<Comparison> cache;   ///< a layer's cache after the calls
  Timing t;
  /// CUDA kernels: how the timings were taken ("device-resident": the
  /// tensors on the device, device_pointers = 1; "host": each call copies
  /// in and out), and one warm call's time on device-resident tensors.
  std::string timedOn = "host";
  double warmCallMs = 0;
  double nominal = 0, useful = 0; ///< FLOPs
  double kvBytes = 0;             ///< K/V read per call
  Tolerance tol;
  int threads = 0;
  int64_t checked = 0, allRows = 0; ///< query rows compared, and in all
};

/// K and V as stored, read once per call: decode's bandwidth floor. Only
/// keys some query sees count: the mask skips the others' tiles, and with
/// per-batch lengths (padding, a paged cache, a ragged batch) the keys
/// past a length are never read.
double kvBytesRead(const AttentionSpec &spec, const Problem &p) {
  const MaskSpec mask = spec.effectiveMask();
  const bool ownEnd = spec.keysPerSequence();
  double kvTokens = 0;
  for (int64_t bi = 0; bi < p.size().B; ++bi) {
    const int64_t len = p.kvLens().empty() ? p.size().Tkv : p.kvLens()[bi];
    const int64_t tkv = ownEnd ? len : p.size().Tkv;
    const int64_t tq =
        std::min(tkv, p.qLens().empty() ? p.size().Tq : p.qLens()[bi]);
    kvTokens += static_cast<double>(visitedKeys(mask, tq, tkv, len));
  }
  return kvTokens * static_cast<double>(spec.kvBytesPerToken());
}

/// Device copies of a call's tensors (CUDA kernels): a GPU user calls
/// with device pointers, so the copies in and out are not the kernel's
/// time. The cuda backend's calls also name a stream of their own, as a
/// serving loop would (they return once queued). Empty when the device
/// memory cannot be had.
class DeviceTensors {
public:
  DeviceTensors(const AttentionSpec &spec, const Problem &p,
                const mhagen_call_args &host)
      : args_(host) {
    const abi::AbiShape shape = backend::abiShapeOf(spec);
    abi::CallSizes sizes;
    sizes.batch = p.size().B;
    sizes.tq = p.size().Tq;
    sizes.tkv = p.size().Tkv;
    char err[256];
    for (const abi::TensorModel *t : abi::tensors(shape)) {
      const void *h = t->pointer(host);
      if (!h)
        continue;
      const int64_t n = abi::elementsAt(*t, shape, sizes);
      const size_t bytes = static_cast<size_t>(n < 0 ? 0 : n) *
                           abi::scalarBytes(abi::scalarOf(*t, shape));
      void *d = nullptr;
      if (mhagen_cuda_alloc(bytes, &d, err, sizeof err) != 0 ||
          mhagen_cuda_copy_in(d, h, bytes, err, sizeof err) != 0) {
        mhagen_cuda_free(d);
        return;
      }
      owned_.push_back(d);
      if (t->output)
        outputs_.push_back({d, const_cast<void *>(h), bytes});
      t->bind(args_, d);
    }
    if (spec.backend == Backend::Cuda &&
        mhagen_cuda_stream_create(&args_.cuda_stream, err, sizeof err) != 0)
      return;
    args_.device_pointers = 1;
    ok_ = true;
  }
  ~DeviceTensors() {
    for (void *d : owned_)
      mhagen_cuda_free(d);
    mhagen_cuda_stream_destroy(args_.cuda_stream);
  }
  bool ok() const { return ok_; }
  const mhagen_call_args &args() const { return args_; }
  /// Waits for the call's stream (a call on a stream returns once queued).
  void synchronize() const {
    char err[256];
    if (mhagen_cuda_synchronize(args_.cuda_stream, err, sizeof err) != 0)
      throw std::runtime_error(err);
  }
  /// The outputs of the last device-resident call, into the host tensors
  /// the check reads.
  void copyOutputsBack() const {
    char err[256];
    synchronize();
    for (const Output &o : outputs_)
      if (mhagen_cuda_copy_out(o.host, o.device, o.bytes, err, sizeof err))
        throw std::runtime_error(err);
  }

private:
  struct Output {
    void *device, *host;
    size_t bytes;
  };
  mhagen_call_args args_;
  std::vector<void *> owned_;
  std::vector<Output> outputs_;
  bool ok_ = false;
};

Measured measure(const mhagen_kernel *k, const AttentionSpec &spec,
                 const RunCheckOptions &o, Problem &p) {
  Measured m;
  mhagen_call_args args = p.args();
  if (mhagen_call(k, &args) != MHAGEN_OK)
    throw std::runtime_error(mhagen_last_error());
  std::vector<int64_t> rows = rowsToCheck(p);
  m.cmp = p.check(rows);
  std::optional<DeviceTensors> device;
  if (spec.target.kind == TargetKind::Cuda)
    device.emplace(spec, p, args);
  auto timeCalls = [&](const mhagen_call_args &a, int reps) {
    return timeIt(
        [&] {
          if (mhagen_call(k, &a) != MHAGEN_OK)
            throw std::runtime_error(mhagen_last_error());
          if (a.cuda_stream)
            device->synchronize();
        },
        reps);
  };
  if (device && device->ok()) {
    m.warmCallMs = timeCalls(device->args(), 1).minMs;
    m.t = timeCalls(device->args(), o.reps);
    m.timedOn = device->args().cuda_stream ? "device-resident, own stream"
                                           : "device-resident";
    // What the device-resident calls wrote is checked as well: the worse
    // of the two comparisons is the call's.
    device->copyOutputsBack();
    const Comparison again = p.check(rows);
    if (!again.ok() || again.maxAbsErr > m.cmp.maxAbsErr)
      m.cmp = again;
  } else {
    m.t = timeCalls(args, o.reps);
  }
  m.nominal = nominalFlops(spec, p.size());
  m.useful = usefulFlops(spec, p.size(), p.kvLens(), p.qLens());
  m.tol = p.tolerance();
  m.threads = mhagen_get_num_threads();
  for (int64_t bi = 0; bi < p.size().B; ++bi) {
    const int64_t n = p.qLens().empty() ? p.size().Tq : p.qLens()[bi];
    m.allRows += n;
    m.checked += rows.empty() ? n
                              : std::count_if(rows.begin(), rows.end(),
                                              [&](int64_t r) { return r < n; });
  }
  m.kvBytes = kvBytesRead(spec, p);
  // K/V stored as another type: the storage error too, against the
  // reference on K/V before storage (kvStorageTolerance).
  if (spec.kv_dtype)
    m.storage = p.checkKvStorage(rows);
  // lse = true: the second output against the reference's log-sum-exp.
  if (spec.lse)
    m.lse = p.checkLse(rows);
  // A layer's cache: its appended rows, and the rest untouched (every
  // timed call wrote the same rows).
  if (spec.cachedLayer())
    m.cache = p.checkCache();
  return m;
}

void writeJson(const mhagen_kernel *k, const AttentionSpec &spec,
               const Problem &p, const Measured &m,
               nlohmann::ordered_json &js) {
  js["variant"] = mhagen_kernel_symbol(k);
  js["target"] = mhagen_kernel_target(k);
  js["backend"] = mhagen_kernel_backend(k);
  js["threads"] = m.threads;
  js["B"] = p.size().B;
  js["T"] = p.size().Tq;
  js["Tkv"] = p.size().Tkv;
  if (spec.op == Op::Sdpa && spec.pagedKv()) {
    js["kv_block"] = spec.kv_block;
    js["num_blocks"] = p.numBlocks();
    js["kv_lens"] = p.kvLens();
  }
  if (spec.op == Op::Sdpa && spec.ragged) {
    js["kv_lens"] = p.kvLens();
    js["q_offsets"] = p.qOffsets();
  }
  if (spec.target.kind == TargetKind::Cuda) {
    js["timed_on"] = m.timedOn;
    js["warm_call_ms"] = m.warmCallMs;
  }
  js["median_ms"] = m.t.medianMs;
  js["min_ms"] = m.t.minMs;
  js["reps"] = m.t.reps;
  js["gflops_nominal"] = m.nominal / (m.t.medianMs * 1e6);
  js["gflops_useful"] = m.useful / (m.t.medianMs * 1e6);
  if (spec.op == Op::Sdpa) // a layer computes its K/V, it reads X
    js["kv_gbs"] = m.kvBytes / (m.t.medianMs * 1e6);
  js["max_abs_err"] = m.cmp.maxAbsErr;
  js["rows_checked"] = m.checked;
  js["within_tolerance"] = m.cmp.ok();
  if (m.storage) {
    js["kv_dtype"] = toString(*spec.kv_dtype);
    js["kv_storage_max_abs_err"] = m.storage->maxAbsErr;
    js["kv_storage_within_bound"] = m.storage->ok();
  }
  if (m.lse) {
    js["lse_max_abs_err"] = m.lse->maxAbsErr;
    js["lse_within_tolerance"] = m.lse->ok();
  }
  if (m.cache) {
    js["kv_lens"] = p.kvLens();
    js["cache_max_abs_err"] = m.cache->maxAbsErr;
    js["cache_within_tolerance"] = m.cache->ok();
  }
}

/// The problem's lines: sizes, and a paged cache's or ragged batch's
/// layout.
void writeProblemText(const mhagen_kernel *k, const AttentionSpec &spec,
                      const Problem &p, const Measured &m, std::ostream &text) {
  text << "kernel   " << mhagen_kernel_symbol(k) << " ("
       << mhagen_kernel_backend(k) << ", " << mhagen_kernel_target(k) << ", "
       << m.threads << " threads)\n";
  text << "problem  B " << p.size().B << ", T_q " << p.size().Tq << ", T_kv "
       << p.size().Tkv << "\n";
  if (spec.op == Op::Sdpa && spec.pagedKv()) {
    // The harness's cache: every sequence in shuffled blocks.
    int64_t lo = INT64_MAX, hi = 0;
    for (int32_t len : p.kvLens()) {
      lo = std::min<int64_t>(lo, len);
      hi = std::max<int64_t>(hi, len);
    }
    text << "cache    paged: " << p.numBlocks() << " blocks of "
         << spec.kv_block
         << " tokens in shuffled order, sequence lengths (kv_lens) " << lo
         << ".." << hi << "\n";
  }
  auto range = [](const std::vector<int32_t> &v) {
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return std::to_string(*lo) + ".." + std::to_string(*hi);
  };
  if (spec.cachedLayer())
    text << "cache    contiguous, " << p.size().Tkv
         << " tokens each; lengths after the call (kv_lens) "
         << range(p.kvLens()) << ", the last T_q of each appended\n";
  if (spec.op == Op::Sdpa && spec.ragged) {
    // A ragged batch: seeded per-sequence query and key counts.
    text << "ragged   " << p.qOffsets().back()
         << " packed query rows, queries per sequence " << range(p.qLens())
         << ", keys per sequence (kv_lens) " << range(p.kvLens()) << "\n";
  }
}

/// The time, the rates and every check's verdict.
void writeResultText(const AttentionSpec &spec, const Measured &m,
                     std::ostream &text) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "time     median %.3f ms (min %.3f ms, %d reps)\n",
                m.t.medianMs, m.t.minMs, m.t.reps);
  text << buf;
  std::snprintf(buf, sizeof buf, "GFLOP/s  nominal %.1f, useful %.1f",
                m.nominal / (m.t.medianMs * 1e6),
                m.useful / (m.t.medianMs * 1e6));
  text << buf;
  if (spec.op == Op::Sdpa) {
    std::snprintf(buf, sizeof buf, "; K/V read %.1f GB/s",
                  m.kvBytes / (m.t.medianMs * 1e6));
    text << buf;
  }
  text << "\n";
  std::snprintf(buf, sizeof buf,
                "check    max |err| %.3g vs the f64 reference on %lld of "
                "%lld query rows: %s (tolerance %g + %g*|ref|)\n",
                m.cmp.maxAbsErr, static_cast<long long>(m.checked),
                static_cast<long long>(m.allRows), m.cmp.ok() ? "OK" : "FAILED",
                m.tol.atol, m.tol.rtol);
  text << buf;
  if (m.storage) {
    const Tolerance st = kvStorageTolerance(spec.dtype, spec.kvType(), spec.op);
    std::snprintf(buf, sizeof buf,
                  "storage  K/V as %s: max |err| %.3g vs the reference on K/V "
                  "before storage: %s (bound %g + %g*|ref|)\n",
                  toString(spec.kvType()), m.storage->maxAbsErr,
                  m.storage->ok() ? "OK" : "FAILED", st.atol, st.rtol);
    text << buf;
  }
  if (m.lse) {
    const Tolerance lt = lseTolerance(spec);
    std::snprintf(buf, sizeof buf,
                  "lse      max |err| %.3g vs the reference's log-sum-exp: %s "
                  "(tolerance %g + %g*|ref|)\n",
                  m.lse->maxAbsErr, m.lse->ok() ? "OK" : "FAILED", lt.atol,
                  lt.rtol);
    text << buf;
  }
  if (m.cache) {
    std::snprintf(buf, sizeof buf,
                  "cache    appended rows max |err| %.3g vs the reference, "
                  "%lld elements wrong (other rows must be untouched): %s\n",
                  m.cache->maxAbsErr, static_cast<long long>(m.cache->failures),
                  m.cache->ok() ? "OK" : "FAILED");
    text << buf;
  }
}

/// Every comparison a call made is within its tolerance.
bool withinTolerance(const Measured &m) {
  return m.cmp.ok() && (!m.storage || m.storage->ok()) &&
         (!m.lse || m.lse->ok()) && (!m.cache || m.cache->ok());
}

/// One call of a layer session: what it is, and how many new tokens.
struct SessionStep {
  const char *kind;
  int64_t tokens;
};

} // namespace

int runLayerSession(const mhagen_kernel *k, const AttentionSpec &spec,
                    const RunCheckOptions &o, nlohmann::ordered_json &js,
                    std::ostream &text) {
  if (!spec.cachedLayer())
    throw std::invalid_argument("a session needs a layer with a KV cache");
  if (o.threads > 0 && mhagen_set_num_threads(o.threads) != MHAGEN_OK)
    throw std::runtime_error(mhagen_last_error());
  // Prefill, 8 decode steps, then a chunk of 5 tokens.
  std::vector<SessionStep> steps{{"prefill", o.size.Tq}};
  for (int i = 0; i < 8; ++i)
    steps.push_back({"decode", 1});
  steps.push_back({"chunk", 5});
  int64_t total = 0;
  for (const SessionStep &st : steps)
    total += st.tokens;
  ProblemSize size = o.size;
  size.Tkv = std::max(o.size.Tkv, total);
  ProblemOptions po;
  po.seed = o.seed;
  po.kvLen = o.size.Tq; // the prefill fills an empty cache
  Problem p(spec, size, po);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "session  B %lld, a cache of %lld tokens each: a prefill of "
                "%lld tokens, 8 decode steps, a chunk of 5; each call checked "
                "against the f64 reference on the cache as the call before "
                "left it\n",
                static_cast<long long>(size.B),
                static_cast<long long>(size.Tkv),
                static_cast<long long>(o.size.Tq));
  std::string session = buf;
  std::string table =
      "step  kind     T_q  cached   median ms  GFLOP/s  max |err|  rows "
      "checked  cache\n";
  nlohmann::ordered_json stepsJs = nlohmann::ordered_json::array();
  bool ok = true;
  int64_t cached = 0;
  Tolerance tol{};
  int threads = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i > 0)
      p.nextStep(steps[i].tokens,
                 o.seed * 7919u + 1000u + static_cast<uint32_t>(i));
    const Measured m = measure(k, spec, o, p);
    tol = m.tol;
    threads = m.threads;
    const bool stepOk = withinTolerance(m);
    const double gflops = m.useful / (m.t.medianMs * 1e6);
    ok = ok && stepOk;
    if (i == 0)
      writeJson(k, spec, p, m, js);
    nlohmann::ordered_json sj;
    sj["step"] = i;
    sj["kind"] = steps[i].kind;
    sj["T"] = steps[i].tokens;
    sj["cached"] = cached;
    sj["median_ms"] = m.t.medianMs;
    sj["min_ms"] = m.t.minMs;
    sj["gflops_useful"] = gflops;
    sj["max_abs_err"] = m.cmp.maxAbsErr;
    sj["rows_checked"] = m.checked;
    if (m.lse)
      sj["lse_max_abs_err"] = m.lse->maxAbsErr;
    if (m.cache)
      sj["cache_max_abs_err"] = m.cache->maxAbsErr;
    sj["within_tolerance"] = stepOk;
    stepsJs.push_back(sj);
    std::snprintf(buf, sizeof buf,
                  "%-5zu %-8s %-4lld %-8lld %9.3f  %7.1f  %9.3g  %4lld of "
                  "%-4lld %s\n",
                  i, steps[i].kind, static_cast<long long>(steps[i].tokens),
                  static_cast<long long>(cached), m.t.medianMs, gflops,
                  m.cmp.maxAbsErr, static_cast<long long>(m.checked),
                  static_cast<long long>(m.allRows), stepOk ? "OK" : "FAILED");
    table += buf;
    cached += steps[i].tokens;
  }
  js["steps"] = stepsJs;
  js.erase("within_tolerance"); // the whole session's verdict, last
  js["within_tolerance"] = ok;
  text << "kernel   " << mhagen_kernel_symbol(k) << " ("
       << mhagen_kernel_backend(k) << ", " << mhagen_kernel_target(k) << ", "
       << threads << " threads)\n"
       << session << table;
  std::snprintf(buf, sizeof buf,
                "check    %s: every output against the reference "
                "(tolerance %g + %g*|ref|), the appended cache rows too, "
                "every other cache row untouched\n",
                ok ? "OK" : "FAILED", tol.atol, tol.rtol);
  text << buf;
  return ok ? 0 : 1;
}

int runAndCheck(const mhagen_kernel *k, const AttentionSpec &spec,
                const RunCheckOptions &o, nlohmann::ordered_json &js,
                std::ostream &text) {
  if (o.threads > 0 && mhagen_set_num_threads(o.threads) != MHAGEN_OK)
    throw std::runtime_error(mhagen_last_error());
  ProblemOptions po;
  po.seed = o.seed;
  Problem p(spec, o.size, po);
  const Measured m = measure(k, spec, o, p);
  writeJson(k, spec, p, m, js);
  writeProblemText(k, spec, p, m, text);
  writeResultText(spec, m, text);
  return withinTolerance(m) ? 0 : 1;
}

} // namespace mhagen
