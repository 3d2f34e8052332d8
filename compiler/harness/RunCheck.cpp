#include "mhagen/harness/RunCheck.h"

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

int runAndCheck(const mhagen_kernel *k, const AttentionSpec &spec,
                const RunCheckOptions &o, nlohmann::ordered_json &js,
                std::ostream &text) {
  if (o.threads > 0 && mhagen_set_num_threads(o.threads) != MHAGEN_OK)
    throw std::runtime_error(mhagen_last_error());
  ProblemOptions po;
  po.seed = o.seed;
  Problem p(spec, o.size, po);
  mhagen_call_args args = p.args();
  if (mhagen_call(k, &args) != MHAGEN_OK)
    throw std::runtime_error(mhagen_last_error());
  std::vector<int64_t> rows = rowsToCheck(p);
  Comparison cmp = p.check(rows);
  Timing t = timeIt(
      [&] {
        if (mhagen_call(k, &args) != MHAGEN_OK)
          throw std::runtime_error(mhagen_last_error());
      },
      o.reps);
  const double nominal = nominalFlops(spec, p.size());
  const double useful = usefulFlops(spec, p.size(), p.kvLens(), p.qLens());
  const Tolerance tol = p.tolerance();
  const int threads = mhagen_get_num_threads();
  // Query rows compared with the reference, over every batch.
  int64_t checked = 0, allRows = 0;
  for (int64_t bi = 0; bi < p.size().B; ++bi) {
    const int64_t n = p.qLens().empty() ? p.size().Tq : p.qLens()[bi];
    allRows += n;
    checked += rows.empty() ? n
                            : std::count_if(rows.begin(), rows.end(),
                                            [&](int64_t r) { return r < n; });
  }

  js["variant"] = mhagen_kernel_symbol(k);
  js["target"] = mhagen_kernel_target(k);
  js["backend"] = mhagen_kernel_backend(k);
  js["threads"] = threads;
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
  js["median_ms"] = t.medianMs;
  js["min_ms"] = t.minMs;
  js["reps"] = t.reps;
  js["gflops_nominal"] = nominal / (t.medianMs * 1e6);
  js["gflops_useful"] = useful / (t.medianMs * 1e6);
  // K and V as stored, read once per call: decode's bandwidth floor. Only
  // keys some query sees count: the mask skips the others' tiles, and with
  // per-batch lengths (padding, a paged cache, a ragged batch) the keys
  // past a length are never read.
  const MaskSpec mask = spec.effectiveMask();
  const bool ownEnd = spec.pagedKv() || spec.ragged;
  double kvTokens = 0;
  for (int64_t bi = 0; bi < p.size().B; ++bi) {
    const int64_t len = p.kvLens().empty() ? p.size().Tkv : p.kvLens()[bi];
    const int64_t tkv = ownEnd ? len : p.size().Tkv;
    const int64_t tq =
        std::min(tkv, p.qLens().empty() ? p.size().Tq : p.qLens()[bi]);
    kvTokens += static_cast<double>(visitedKeys(mask, tq, tkv, len));
  }
  const double kvBytes = kvTokens * static_cast<double>(spec.kvBytesPerToken());
  if (spec.op == Op::Sdpa) // a layer computes its K/V, it reads X
    js["kv_gbs"] = kvBytes / (t.medianMs * 1e6);
  js["max_abs_err"] = cmp.maxAbsErr;
  js["rows_checked"] = checked;
  js["within_tolerance"] = cmp.ok();
  // K/V stored as another type: the storage error too, against the
  // reference on K/V before storage (kvStorageTolerance).
  std::optional<Comparison> storage;
  if (spec.kv_dtype) {
    storage = p.checkKvStorage(rows);
    js["kv_dtype"] = toString(*spec.kv_dtype);
    js["kv_storage_max_abs_err"] = storage->maxAbsErr;
    js["kv_storage_within_bound"] = storage->ok();
  }
  // lse = true: the second output against the reference's log-sum-exp.
  std::optional<Comparison> lse;
  if (spec.lse) {
    lse = p.checkLse(rows);
    js["lse_max_abs_err"] = lse->maxAbsErr;
    js["lse_within_tolerance"] = lse->ok();
  }

  char buf[512];
  text << "kernel   " << mhagen_kernel_symbol(k) << " ("
       << mhagen_kernel_backend(k) << ", " << mhagen_kernel_target(k) << ", "
       << threads << " threads)\n";
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
  if (spec.op == Op::Sdpa && spec.ragged) {
    // A ragged batch: seeded per-sequence query and key counts.
    auto range = [](const std::vector<int32_t> &v) {
      const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
      return std::to_string(*lo) + ".." + std::to_string(*hi);
    };
    text << "ragged   " << p.qOffsets().back()
         << " packed query rows, queries per sequence " << range(p.qLens())
         << ", keys per sequence (kv_lens) " << range(p.kvLens()) << "\n";
  }
  std::snprintf(buf, sizeof buf,
                "time     median %.3f ms (min %.3f ms, %d reps)\n", t.medianMs,
                t.minMs, t.reps);
  text << buf;
  std::snprintf(buf, sizeof buf, "GFLOP/s  nominal %.1f, useful %.1f",
                nominal / (t.medianMs * 1e6), useful / (t.medianMs * 1e6));
  text << buf;
  if (spec.op == Op::Sdpa) {
    std::snprintf(buf, sizeof buf, "; K/V read %.1f GB/s",
                  kvBytes / (t.medianMs * 1e6));
    text << buf;
  }
  text << "\n";
  std::snprintf(buf, sizeof buf,
                "check    max |err| %.3g vs the f64 reference on %lld of "
                "%lld query rows: %s (tolerance %g + %g*|ref|)\n",
                cmp.maxAbsErr, static_cast<long long>(checked),
                static_cast<long long>(allRows), cmp.ok() ? "OK" : "FAILED",
                tol.atol, tol.rtol);
  text << buf;
  if (storage) {
    const Tolerance st = kvStorageTolerance(spec.dtype, spec.kvType());
    std::snprintf(buf, sizeof buf,
                  "storage  K/V as %s: max |err| %.3g vs the reference on K/V "
                  "before storage: %s (bound %g + %g*|ref|)\n",
                  toString(spec.kvType()), storage->maxAbsErr,
                  storage->ok() ? "OK" : "FAILED", st.atol, st.rtol);
    text << buf;
  }
  if (lse) {
    const Tolerance lt = lseTolerance(spec);
    std::snprintf(buf, sizeof buf,
                  "lse      max |err| %.3g vs the reference's log-sum-exp: %s "
                  "(tolerance %g + %g*|ref|)\n",
                  lse->maxAbsErr, lse->ok() ? "OK" : "FAILED", lt.atol,
                  lt.rtol);
    text << buf;
  }
  return cmp.ok() && (!storage || storage->ok()) && (!lse || lse->ok()) ? 0 : 1;
}

} // namespace mhagen
