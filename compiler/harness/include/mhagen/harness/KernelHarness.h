// Running a generated kernel on seeded random data and checking it against
// the reference: shared by `mhagen run`, the numerical tests, the
// benchmarks and the tuner's trial runner, so all of them check the same
// way with the same tolerances (mhagen/reference/Tolerance.h).
#ifndef MHAGEN_HARNESS_KERNELHARNESS_H
#define MHAGEN_HARNESS_KERNELHARNESS_H

#include "mhagen/abi.h"
#include "mhagen/abi_model.hpp"
#include "mhagen/reference/Reference.h"
#include "mhagen/reference/Tolerance.h"
#include "mhagen/spec/AttentionSpec.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mhagen {

struct ProblemSize {
  int64_t B = 1, Tq = 1, Tkv = 1; ///< for op = layer, Tkv = Tq
};

struct ProblemOptions {
  uint32_t seed = 1;
  /// Multiplies Q so scores reach about this magnitude (e.g. 1e4 for the
  /// huge-logit tests); 0 keeps the natural O(1) scores.
  double logitMagnitude = 0;
  /// Padding (or paged sequence) lengths: -1 random in [kvLenMin, Tkv];
  /// otherwise this value for every batch (0 = every key hidden).
  int64_t kvLen = -1;
  int64_t kvLenMin = 1;
  /// ragged = true: each sequence's query count; -1 random in [1,
  /// min(Tq, its key length)], otherwise this value (capped at both).
  int64_t qLen = -1;
  /// scale = runtime: the call's scale; 0: a seeded random value in
  /// [0.5, 2] times the default 1/sqrt(dk).
  double scale = 0;
};

/// Inputs in f32 (already rounded to the spec's dtype) and in the kernel's
/// storage format, plus the output buffer.
class Problem {
public:
  Problem(const AttentionSpec &spec, ProblemSize size,
          const ProblemOptions &options);

  const AttentionSpec &spec() const { return spec_; }
  const ProblemSize &size() const { return size_; }
  /// Call arguments pointing at this problem's buffers (dense layouts).
  mhagen_call_args args();
  /// The output, converted to f32.
  std::vector<float> output() const;
  /// The `lse` output (spec lse = true; empty otherwise), [B, Tq, h] (a
  /// ragged batch's packed rows unpacked, the rows past a sequence's
  /// queries 0).
  const std::vector<float> &lse() const;
  /// Reference output (f64 accumulation) for the given query tokens
  /// (empty = all); other rows are 0.
  /// exactKv: on K/V as generated, before they were stored as the spec's
  /// kv_dtype (else on the stored values, as the kernel sees them).
  /// lse: also the reference's log-sum-exp, [B, Tq, h].
  std::vector<double> reference(const std::vector<int64_t> &rows,
                                bool exactKv = false,
                                std::vector<double> *lse = nullptr) const;
  /// The tolerance check() holds the output to: toleranceFor(spec), plus
  /// for ALiBi the rounding of biased scores at this problem's sizes and
  /// slopes (withAlibiScores).
  Tolerance tolerance() const;
  /// Compares output() with the reference on those rows: the kernel's
  /// arithmetic, held to toleranceFor (mhagen/reference/Tolerance.h).
  Comparison check(const std::vector<int64_t> &rows) const;
  /// The same against the reference on K/V before storage: the error of
  /// the kv_dtype storage too, held to kvStorageTolerance.
  Comparison checkKvStorage(const std::vector<int64_t> &rows) const;
  /// kv_cache = contiguous in a layer: the cache after the call against
  /// the reference's appended rows (rows [kv_lens[b] - Tq, kv_lens[b]) of
  /// k and v, held to toleranceFor) and every other row against the
  /// cache before the call (bit for bit); ok() for any other kernel.
  Comparison checkCache() const;
  /// Compares lse() with the reference's log-sum-exp on those rows
  /// (lseTolerance); ok() without an lse output.
  Comparison checkLse(const std::vector<int64_t> &rows) const;
  /// Reference cost estimate in FLOPs for all rows (to decide sampling).
  double referenceFlops() const;
  const std::vector<int32_t> &kvLens() const { return lens_; }
  /// ragged = true: each sequence's query count (its rows [0, n) of the
  /// [B, Tq] layout that output() and lse() return) and the packed rows'
  /// offsets (q_offsets, B + 1); empty otherwise.
  const std::vector<int32_t> &qLens() const { return qLens_; }
  const std::vector<int32_t> &qOffsets() const { return offsets_; }
  /// kv_cache = paged(BLOCK): the block table ([B, ceil(Tkv / BLOCK)],
  /// a seeded shuffle of the cache's blocks; entries past a sequence's
  /// length are -1) and the cache's block count (a few more blocks than
  /// the sequences use, so some are never named).
  const std::vector<int32_t> &blockTable() const { return table_; }
  /// positions = runtime: each token's position, [B, Tq], seeded draws in
  /// [0, 2^16) (not a run of consecutive positions, whose rotation the
  /// scores would not see); empty otherwise.
  const std::vector<int32_t> &positions() const { return positions_; }
  int64_t numBlocks() const { return numBlocks_; }
  void clearOutput();
  /// Replaces the values of a data input of the ABI model (x, w_q, sinks,
  /// ...), rounded to its storage type as generated ones are; throws
  /// std::invalid_argument naming the tensor when this kernel has no such
  /// input, the count differs, or it is stored as int8.
  void setInput(const std::string &name, const std::vector<float> &values);
  /// Replaces the positions of positions = runtime ([B, Tq]); throws
  /// std::invalid_argument when the kernel takes none or the count differs.
  void setPositions(const std::vector<int32_t> &values);
  /// kv_cache = contiguous in a layer: makes this problem the next call of
  /// a session, a decoder step of `tokens` new tokens after the call
  /// before. The cache is as that call left it (and what the reference
  /// reads), each sequence's length grows by `tokens`, and x (and runtime
  /// positions, the tokens' own: after the cached ones) are drawn anew
  /// from `seed`. Throws std::invalid_argument when the kernel has no
  /// layer cache or the cache's capacity cannot take the tokens.
  void nextStep(int64_t tokens, uint32_t seed);
  /// The names of the kernel's data inputs (x, w_q, ..., sinks), each
  /// settable with setInput; int8 scales are listed with their tensors'.
  std::vector<std::string> inputNames() const;
  /// The f32 values of an input (as stored), or nullptr if this kernel has
  /// no such input.
  const float *inputValues(const std::string &name) const {
    return input(name.c_str());
  }

private:
  struct Tensor {
    std::vector<float> f32;     ///< values as stored, in f32
    std::vector<float> exact;   ///< values before storage (K/V only)
    std::vector<uint16_t> bits; ///< bf16/f16 storage
    std::vector<int8_t> i8;     ///< int8 storage (row scales elsewhere)
    const void *data() const {
      if (!i8.empty())
        return i8.data();
      return bits.empty() ? static_cast<const void *>(f32.data())
                          : static_cast<const void *>(bits.data());
    }
  };
  /// n values U(lo, hi) stored as x; int8 is quantised per row of `row`
  /// values, its scales going to *scales. `keepExact`: keep the values
  /// before storage too (a K/V cache stored as another type than dtype).
  Tensor make(size_t n, float lo, float hi, uint32_t seed, abi::Scalar x,
              size_t row, Tensor *scales, bool keepExact) const;

  /// The f32 values of an input tensor of the ABI model, by name (nullptr
  /// if this problem's kernel has no such tensor).
  const float *input(const char *name) const;
  /// The reference's arguments for op = layer: this problem's inputs, and
  /// a layer cache as it was before any call (its capacity and storage
  /// rounding too).
  ref::LayerArgs layerArgs() const;
  /// A cache tensor's values now (as the kernel left them), in f32.
  std::vector<float> cacheValues(const std::string &name) const;
  /// The call-time score modifiers (sinks, ALiBi slopes) for the reference.
  ref::ModifierArgs modifierArgs() const;
  Comparison compare(const std::vector<int64_t> &rows, bool exactKv) const;

  AttentionSpec spec_;
  ProblemSize size_;
  /// One entry per data input of the ABI model (mhagen/abi_model.hpp).
  std::map<std::string, Tensor> inputs_;
  /// A layer's cache (k, v) as generated, before any call wrote to it.
  std::map<std::string, std::vector<float>> cacheBefore_;
  std::vector<int32_t> lens_;
  std::vector<int32_t> positions_;
  /// A paged cache: K/V (and int8 scales) copied into their blocks, by
  /// name; slots past a sequence's length hold NaN (never written).
  std::map<std::string, Tensor> paged_;
  std::vector<int32_t> table_;
  int64_t numBlocks_ = 0;
  uint32_t pagedSeed_ = 0;
  void buildPagedCache(uint32_t seed);
  /// A ragged batch: the queries packed as the kernel reads them.
  std::vector<int32_t> qLens_, offsets_;
  Tensor qPacked_;
  void packQueries();
  /// [B, Tq, width] from a ragged batch's packed rows (0 elsewhere).
  std::vector<float> unpack(const std::vector<float> &packed,
                            int64_t width) const;
  mutable std::vector<float> lseUnpacked_;
  /// What the kernel writes (a ragged batch: packed rows).
  std::vector<float> outF32_;
  std::vector<float> lse_;
  std::vector<uint16_t> outBits_;
};

/// Query tokens to check: all of them when the reference is cheap, else an
/// evenly spread sample (always including the first and last tokens).
std::vector<int64_t> rowsToCheck(const Problem &p, double flopBudget = 2e9);

struct Timing {
  double medianMs = 0, minMs = 0;
  int reps = 0;
};

/// Calls fn once to warm up, then `reps` times; returns median and min.
template <typename Fn> Timing timeIt(Fn &&fn, int reps);

/// Nominal (every pair) and useful (visited pairs) FLOPs of one call.
double nominalFlops(const AttentionSpec &spec, const ProblemSize &size);
/// qLens: a ragged batch's query counts (each sequence's last tokens).
double usefulFlops(const AttentionSpec &spec, const ProblemSize &size,
                   const std::vector<int32_t> &kvLens,
                   const std::vector<int32_t> &qLens = {});

} // namespace mhagen

#include "mhagen/harness/Timing.inc"

#endif
