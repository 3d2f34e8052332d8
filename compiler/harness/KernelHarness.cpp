#include "mhagen/harness/KernelHarness.h"

#include "mhagen/abi_model.hpp"
#include "mhagen/backend/AbiWrapper.h"
#include "mhagen/reference/Numerics.h"
#include "mhagen/reference/Reference.h"
#include "mhagen/spec/CostModel.h"
#include "mhagen/spec/ScoreModifiers.h"

#include "mhagen/runtime.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>

namespace mhagen {

Problem::Tensor Problem::make(size_t n, float lo, float hi, uint32_t seed,
                              abi::Scalar x, size_t row, Tensor *scales,
                              bool keepExact) const {
  Tensor t;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  t.f32.resize(n);
  for (float &v : t.f32)
    v = u(rng);
  switch (x) {
  case abi::Scalar::BF16:
  case abi::Scalar::F16:
    if (keepExact)
      t.exact = t.f32;
    t.bits.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const bool bf = x == abi::Scalar::BF16;
      t.bits[i] = bf ? floatToBf16(t.f32[i]) : floatToF16(t.f32[i]);
      t.f32[i] = bf ? bf16ToFloat(t.bits[i]) : f16ToFloat(t.bits[i]);
    }
    break;
  case abi::Scalar::I8: {
    // The runtime's own quantiser: what a caller filling a cache uses.
    t.exact = t.f32;
    t.i8.resize(n);
    scales->f32.resize(n / row);
    if (mhagen_kv_quantize_i8(t.exact.data(), static_cast<int64_t>(n / row),
                              static_cast<int64_t>(row), t.i8.data(),
                              scales->f32.data()) != MHAGEN_OK)
      throw std::runtime_error(mhagen_last_error());
    for (size_t i = 0; i < n; ++i)
      t.f32[i] = static_cast<float>(t.i8[i]) * scales->f32[i / row];
    break;
  }
  default:
    break;
  }
  return t;
}

namespace {

// Elements of one tensor of the ABI model at these call sizes.
size_t elementCount(const abi::TensorModel &t, const abi::AbiShape &shape,
                    const ProblemSize &z) {
  int64_t n = 1;
  for (const abi::Dim &d : t.dims)
    for (abi::Size f : d.factors)
      n *= f == abi::Size::Batch      ? z.B
           : f == abi::Size::TokensQ  ? z.Tq
           : f == abi::Size::TokensKv ? z.Tkv
                                      : abi::staticSize(f, shape);
  return static_cast<size_t>(n);
}

} // namespace

Problem::Problem(const AttentionSpec &s, ProblemSize size,
                 const ProblemOptions &o)
    : spec_(s), size_(size) {
  if (s.op == Op::Layer && !s.layerCache)
    size_.Tkv = size_.Tq;
  if (s.cachedLayer()) // the cache holds at least the call's tokens
    size_.Tkv = std::max(size_.Tkv, size_.Tq);
  const int64_t B = size_.B, Tkv = size_.Tkv;
  const uint32_t seed = o.seed * 7919u;
  // Value ranges that keep scores O(1) (or at the requested magnitude);
  // any other tensor is U(-1, 1).
  // Sdpa: |q|,|k| ~ U(-1,1) give q.k ~ sqrt(dk/9).
  float qAmp = 1.0f;
  if (o.logitMagnitude > 0)
    qAmp = static_cast<float>(o.logitMagnitude /
                              (std::sqrt(s.d_k / 9.0) * s.effectiveScale()));
  // Layer: weights ~ U(-a, a) with a = sqrt(3 / fan_in), unit-variance
  // outputs; for huge logits Q's weights grow so that q.k*scale reaches the
  // target.
  const float ain = std::sqrt(3.0f / static_cast<float>(s.d));
  float wqAmp = ain;
  if (o.logitMagnitude > 0)
    wqAmp *= static_cast<float>(o.logitMagnitude / s.effectiveScale() /
                                std::sqrt(static_cast<double>(s.d_k)));
  // A paged cache is generated as the contiguous one (the reference reads
  // that) and then copied into shuffled blocks (buildPagedCache).
  // A ragged batch is generated in the [B, Tq] layout too (the reference
  // reads that) and its queries packed (packQueries).
  abi::AbiShape shape = backend::abiShapeOf(s);
  shape.kvBlock = 0;
  shape.ragged = false;
  // The amplitude of a values input, from its role in the math.
  auto amplitude = [&](const abi::TensorModel &t) {
    switch (t.role) {
    case abi::Role::Queries:
      return qAmp;
    case abi::Role::QueryWeight:
      return wqAmp;
    case abi::Role::Weight: { // fan-in: the rows of W [in, out]
      int64_t fanIn = 1;
      for (abi::Size f : t.dims[0].factors)
        fanIn *= abi::staticSize(f, shape);
      return std::sqrt(3.0f / static_cast<float>(fanIn));
    }
    case abi::Role::Bias:
      return 0.1f;
    default:
      return 1.0f;
    }
  };
  uint32_t next = 1; // seeds in the model's order
  for (const abi::TensorModel *t : abi::tensors(shape)) {
    const size_t n = elementCount(*t, shape, size_);
    switch (t->role) {
    case abi::Role::Result: // out, and the f32 lse when the spec asks
      (t->elem == abi::Elem::F32 ? lse_ : outF32_).assign(n, 0.0f);
      continue;
    case abi::Role::RowScale: // made with its int8 tensor (its quantisation)
    case abi::Role::Index:    // drawn below, with the lengths
      continue;
    case abi::Role::Scale: {
      // The compiled-in default times a factor in [0.5, 2] (or
      // Options::scale), so each call checks another scale.
      const double base = s.effectiveScale();
      inputs_[t->name] = make(n, static_cast<float>(0.5 * base),
                              static_cast<float>(2.0 * base), seed + next++,
                              abi::Scalar::F32, n, nullptr, false);
      if (o.scale > 0)
        inputs_[t->name].f32.assign(n, static_cast<float>(o.scale));
      continue;
    }
    case abi::Role::NormWeight: // gains around 1, in the spec's dtype
      inputs_[t->name] = make(n, 0.5f, 1.5f, seed + next++,
                              abi::scalarOf(*t, shape), n, nullptr, false);
      continue;
    case abi::Role::SinkLogit: // around the scores' own range
    case abi::Role::Slope: {   // positive
      const bool sink = t->role == abi::Role::SinkLogit;
      inputs_[t->name] =
          make(n, sink ? -2.0f : 0.01f, sink ? 3.0f : 0.5f, seed + next++,
               abi::Scalar::F32, n, nullptr, false);
      continue;
    }
    default:
      break;
    }
    const float a = amplitude(*t);
    const size_t row = static_cast<size_t>(abi::denseInnerElements(
        *t, shape, t->dims.size() - 1)); // one int8 scale per row
    Tensor scales;
    inputs_[t->name] =
        make(n, -a, a, seed + next++, abi::scalarOf(*t, shape), row, &scales,
             t->elem == abi::Elem::KvData && s.kv_dtype.has_value());
    if (!scales.f32.empty())
      inputs_[std::string(t->name) + "_scale"] = std::move(scales);
  }
  if (s.dtype != DType::F32)
    outBits_.assign(outF32_.size(), 0);
  if (s.effectiveMask().hasPadding()) { // padding, paged or ragged
    std::mt19937 rng(seed + 10);
    // A layer's cache holds at least the tokens the call appends.
    const int64_t least = s.cachedLayer() ? size_.Tq : 0;
    std::uniform_int_distribution<int64_t> u(
        std::clamp<int64_t>(o.kvLenMin, least, Tkv), Tkv);
    for (int64_t b = 0; b < B; ++b)
      lens_.push_back(static_cast<int32_t>(
          o.kvLen >= 0 ? std::clamp<int64_t>(o.kvLen, least, Tkv) : u(rng)));
  }
  if (s.cachedLayer()) {
    // Rows from each sequence's first new token on hold NaN (int8: 127
    // with a NaN scale): the call writes its own and must read neither
    // those nor the ones past them.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (const char *name : {"k", "v"}) {
      Tensor &t = inputs_.at(name);
      const size_t row = t.f32.size() / static_cast<size_t>(B * Tkv);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t r = lens_[b] - size_.Tq; r < Tkv; ++r) {
          const size_t first = static_cast<size_t>(b * Tkv + r);
          for (size_t e = 0; e < row; ++e) {
            const size_t at = first * row + e;
            t.f32[at] = nan;
            if (!t.bits.empty())
              t.bits[at] = s.kvType() == KvType::BF16 ? 0x7fc0 : 0x7e00;
            if (!t.i8.empty())
              t.i8[at] = 127;
          }
          if (!t.i8.empty()) { // one scale per kv head's row
            Tensor &scales = inputs_.at(std::string(name) + "_scale");
            const size_t heads = scales.f32.size() / (B * Tkv);
            for (size_t g = 0; g < heads; ++g)
              scales.f32[first * heads + g] = nan;
          }
        }
      cacheBefore_[name] = t.f32; // what the kernel must leave as it was
    }
  }
  if (s.positionsAtRuntime) {
    std::mt19937 rng(seed + 13);
    std::uniform_int_distribution<int32_t> u(0, (1 << 16) - 1);
    positions_.resize(static_cast<size_t>(B * size_.Tq));
    for (int32_t &p : positions_)
      p = u(rng);
  }
  if (s.op == Op::Sdpa && s.ragged) {
    // Each sequence's query count, at most its key length (its queries
    // are its last tokens); the kernel writes packed rows.
    std::mt19937 rng(seed + 12);
    offsets_.assign(1, 0);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t most = std::min<int64_t>(size_.Tq, lens_[b]);
      std::uniform_int_distribution<int64_t> u(std::min<int64_t>(1, most),
                                               most);
      const int64_t n = o.qLen >= 0 ? std::min(o.qLen, most) : u(rng);
      qLens_.push_back(static_cast<int32_t>(n));
      offsets_.push_back(static_cast<int32_t>(offsets_.back() + n));
    }
    const auto rows = static_cast<size_t>(offsets_.back());
    outF32_.assign(rows * static_cast<size_t>(s.h * s.d_v), 0.0f);
    if (s.lse)
      lse_.assign(rows * static_cast<size_t>(s.h), 0.0f);
    if (!outBits_.empty())
      outBits_.assign(outF32_.size(), 0);
    packQueries();
  }
  if (s.op == Op::Sdpa && s.pagedKv())
    buildPagedCache(pagedSeed_ = seed + 11);
}

void Problem::packQueries() {
  const Tensor &q = inputs_.at("q");
  const auto width = static_cast<size_t>(spec_.h * spec_.d_k);
  qPacked_ = Tensor{};
  const auto rows = static_cast<size_t>(offsets_.back());
  qPacked_.f32.resize(rows * width);
  if (!q.bits.empty())
    qPacked_.bits.resize(rows * width);
  for (size_t b = 0; b < qLens_.size(); ++b)
    for (size_t i = 0; i < static_cast<size_t>(qLens_[b]); ++i) {
      const size_t from = (b * static_cast<size_t>(size_.Tq) + i) * width;
      const size_t to = (static_cast<size_t>(offsets_[b]) + i) * width;
      std::copy_n(q.f32.begin() + from, width, qPacked_.f32.begin() + to);
      if (!q.bits.empty())
        std::copy_n(q.bits.begin() + from, width, qPacked_.bits.begin() + to);
    }
}

std::vector<float> Problem::unpack(const std::vector<float> &packed,
                                   int64_t width) const {
  std::vector<float> out(static_cast<size_t>(size_.B * size_.Tq * width));
  for (size_t b = 0; b < qLens_.size(); ++b)
    std::copy_n(packed.begin() + offsets_[b] * width, qLens_[b] * width,
                out.begin() + static_cast<int64_t>(b) * size_.Tq * width);
  return out;
}

const std::vector<float> &Problem::lse() const {
  if (qLens_.empty() || lse_.empty())
    return lse_;
  lseUnpacked_ = unpack(lse_, spec_.h);
  return lseUnpacked_;
}

void Problem::buildPagedCache(uint32_t seed) {
  const int64_t BLK = spec_.kv_block, B = size_.B;
  const int64_t width = (size_.Tkv + BLK - 1) / BLK;
  // Every sequence's blocks, a quarter more that no sequence names, in a
  // seeded random order: sequences never sit in consecutive blocks.
  numBlocks_ = B * width + (B * width) / 4 + 1;
  std::vector<int32_t> order(static_cast<size_t>(numBlocks_));
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = static_cast<int32_t>(i);
  std::mt19937 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  table_.assign(static_cast<size_t>(B * width), -1);
  size_t used = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t need = (lens_[b] + BLK - 1) / BLK;
    for (int64_t j = 0; j < need; ++j)
      table_[b * width + j] = order[used++];
  }
  // Copy each stored tensor's rows into their slots; every other slot
  // holds NaN (bf16/f16 NaN bits, int8 127 with a NaN scale), which the
  // kernel must never let into a result.
  paged_.clear();
  for (const char *name : {"k", "v", "k_scale", "v_scale"}) {
    auto it = inputs_.find(name);
    if (it == inputs_.end())
      continue;
    const Tensor &src = it->second;
    const size_t rows = static_cast<size_t>(B * size_.Tkv);
    const size_t row = src.f32.size() / rows;
    const size_t n = static_cast<size_t>(numBlocks_ * BLK) * row;
    Tensor dst;
    dst.f32.assign(n, std::numeric_limits<float>::quiet_NaN());
    if (!src.bits.empty())
      dst.bits.assign(n, abi::quietNaNBits(spec_.kvType() == KvType::BF16
                                               ? abi::Scalar::BF16
                                               : abi::Scalar::F16));
    if (!src.i8.empty())
      dst.i8.assign(n, 127);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < lens_[b]; ++t) {
        const size_t from = static_cast<size_t>(b * size_.Tkv + t) * row;
        const size_t to =
            static_cast<size_t>(table_[b * width + t / BLK] * BLK + t % BLK) *
            row;
        std::copy_n(src.f32.begin() + from, row, dst.f32.begin() + to);
        if (!src.bits.empty())
          std::copy_n(src.bits.begin() + from, row, dst.bits.begin() + to);
        if (!src.i8.empty())
          std::copy_n(src.i8.begin() + from, row, dst.i8.begin() + to);
      }
    paged_[name] = std::move(dst);
  }
}

void Problem::setPositions(const std::vector<int32_t> &values) {
  if (!spec_.positionsAtRuntime)
    throw std::invalid_argument("this kernel takes no positions (positions = "
                                "implicit)");
  if (values.size() != positions_.size())
    throw std::invalid_argument(
        "positions needs " + std::to_string(positions_.size()) +
        " values, got " + std::to_string(values.size()));
  positions_ = values;
}

void Problem::nextStep(int64_t tokens, uint32_t seed) {
  if (!spec_.cachedLayer())
    throw std::invalid_argument("nextStep: only a layer with a KV cache "
                                "(kv_cache = contiguous) takes steps");
  const int64_t longest = *std::max_element(lens_.begin(), lens_.end());
  if (tokens < 1 || longest + tokens > size_.Tkv)
    throw std::invalid_argument("a step of " + std::to_string(tokens) +
                                " tokens after " + std::to_string(longest) +
                                " cached ones does not fit the cache's " +
                                std::to_string(size_.Tkv) + " tokens");
  // The cache as the last call wrote it is what this one finds; its rows
  // past each sequence's length still hold the NaN they were made with.
  for (const char *name : {"k", "v"}) {
    Tensor &t = inputs_.at(name);
    t.f32 = cacheValues(name);
    cacheBefore_[name] = t.f32;
    if (!t.exact.empty()) // the rows earlier calls wrote exist only stored
      t.exact = t.f32;
  }
  std::vector<int32_t> cached = lens_;
  for (int32_t &len : lens_)
    len += static_cast<int32_t>(tokens);
  size_.Tq = tokens;
  const abi::AbiShape shape = backend::abiShapeOf(spec_);
  for (const abi::TensorModel *t : abi::tensors(shape)) {
    const size_t n = elementCount(*t, shape, size_);
    if (t->role == abi::Role::Result)
      (t->elem == abi::Elem::F32 ? lse_ : outF32_).assign(n, 0.0f);
    else if (std::string(t->name) == "x")
      inputs_["x"] = make(n, -1.0f, 1.0f, seed, abi::scalarOf(*t, shape), n,
                          nullptr, false);
  }
  if (!outBits_.empty())
    outBits_.assign(outF32_.size(), 0);
  if (spec_.positionsAtRuntime) {
    positions_.resize(static_cast<size_t>(size_.B * tokens));
    for (int64_t b = 0; b < size_.B; ++b)
      for (int64_t i = 0; i < tokens; ++i)
        positions_[static_cast<size_t>(b * tokens + i)] =
            cached[static_cast<size_t>(b)] + static_cast<int32_t>(i);
  }
}

std::vector<std::string> Problem::inputNames() const {
  std::vector<std::string> names;
  for (const auto &[name, tensor] : inputs_)
    names.push_back(name);
  return names;
}

void Problem::setInput(const std::string &name,
                       const std::vector<float> &values) {
  auto it = inputs_.find(name);
  if (it == inputs_.end())
    throw std::invalid_argument("this kernel has no input " + name);
  Tensor &t = it->second;
  if (values.size() != t.f32.size())
    throw std::invalid_argument(name + " needs " +
                                std::to_string(t.f32.size()) + " values, got " +
                                std::to_string(values.size()));
  if (!t.i8.empty())
    throw std::invalid_argument(name + " is stored as int8: set its values "
                                       "before quantisation");
  if (!t.exact.empty())
    t.exact = values;
  t.f32 = values;

  if (!t.bits.empty()) {
    // The tensor's storage type: the spec's dtype (K/V: its kv_dtype).
    const abi::AbiShape shape = backend::abiShapeOf(spec_);
    abi::Scalar x = abi::Scalar::F32;
    for (const abi::TensorModel *m : abi::tensors(shape))
      if (name == m->name)
        x = abi::scalarOf(*m, shape);
    const bool bf = x == abi::Scalar::BF16;
    for (size_t i = 0; i < values.size(); ++i) {
      t.bits[i] = bf ? floatToBf16(values[i]) : floatToF16(values[i]);
      t.f32[i] = bf ? bf16ToFloat(t.bits[i]) : f16ToFloat(t.bits[i]);
    }
  }
  if (cacheBefore_.count(name)) // a layer's cache: its values before a call
    cacheBefore_[name] = t.f32;
  if (!paged_.empty()) // the paged copy follows the new values
    buildPagedCache(pagedSeed_);
  if (!qLens_.empty() && name == "q") // so does the packed one
    packQueries();
}

const float *Problem::input(const char *name) const {
  auto it = inputs_.find(name);
  return it == inputs_.end() ? nullptr : it->second.f32.data();
}

mhagen_call_args Problem::args() {
  mhagen_call_args a{};
  a.abi_version = MHAGEN_ABI_VERSION;
  a.batch = size_.B;
  a.t_q = size_.Tq;
  a.t_kv = spec_.op == Op::Sdpa || spec_.cachedLayer() ? size_.Tkv : 0;
  a.num_blocks = paged_.empty() ? 0 : numBlocks_;
  for (const abi::TensorModel *t : abi::tensors(backend::abiShapeOf(spec_))) {
    const std::string name = t->name;
    if (t->output && t->elem == abi::Elem::F32)
      t->bind(a, lse_.data());
    else if (t->output)
      t->bind(a, outBits_.empty() ? static_cast<void *>(outF32_.data())
                                  : static_cast<void *>(outBits_.data()));
    else if (t->elem == abi::Elem::Int32)
      t->bind(a, t->content == abi::Content::BlockIndices   ? table_.data()
                 : t->content == abi::Content::QueryOffsets ? offsets_.data()
                 : t->content == abi::Content::TokenPositions
                     ? positions_.data()
                     : lens_.data());
    else if (t->isPacked())
      t->bind(a, const_cast<void *>(qPacked_.data()));
    else if (paged_.count(name))
      t->bind(a, const_cast<void *>(paged_.at(name).data()));
    else
      t->bind(a, const_cast<void *>(inputs_.at(name).data()));
  }
  return a;
}

void Problem::clearOutput() {
  std::fill(outF32_.begin(), outF32_.end(), 0.0f);
  std::fill(outBits_.begin(), outBits_.end(), 0);
  std::fill(lse_.begin(), lse_.end(), 0.0f);
}

std::vector<float> Problem::output() const {
  std::vector<float> out = outF32_;
  if (!outBits_.empty())
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = spec_.dtype == DType::BF16 ? bf16ToFloat(outBits_[i])
                                          : f16ToFloat(outBits_[i]);
  return qLens_.empty() ? out : unpack(out, spec_.h * spec_.d_v);
}

std::vector<double> Problem::reference(const std::vector<int64_t> &rows,
                                       bool exactKv,
                                       std::vector<double> *lse) const {
  const std::vector<int64_t> *r = rows.empty() ? nullptr : &rows;
  if (spec_.op == Op::Sdpa) {
    ref::SdpaArgs a;
    a.B = size_.B;
    a.Tq = size_.Tq;
    a.Tkv = size_.Tkv;
    a.q = input("q");
    a.k = input("k");
    a.v = input("v");
    if (exactKv && !inputs_.at("k").exact.empty()) {
      a.k = inputs_.at("k").exact.data();
      a.v = inputs_.at("v").exact.data();
    }
    a.kvLens = lens_.empty() ? nullptr : lens_.data();
    a.qLens = qLens_.empty() ? nullptr : qLens_.data();
    a.modifiers = modifierArgs();
    a.lse = lse;
    a.rows = r;
    return ref::sdpa<double>(spec_, a);
  }
  ref::LayerArgs a = layerArgs();
  if (exactKv && spec_.cachedLayer() && !inputs_.at("k").exact.empty()) {
    // The cache's rows before storage, and the new rows unrounded: the
    // error of storing K/V as kv_dtype too.
    a.kCache = inputs_.at("k").exact.data();
    a.vCache = inputs_.at("v").exact.data();
    a.store = nullptr;
  }
  a.lse = lse;
  a.rows = r;
  return ref::layer<double>(spec_, a);
}

namespace {
void storeBf16(double *row, int64_t width) {
  for (int64_t c = 0; c < width; ++c)
    row[c] = bf16ToFloat(floatToBf16(static_cast<float>(row[c])));
}
void storeF16(double *row, int64_t width) {
  for (int64_t c = 0; c < width; ++c)
    row[c] = f16ToFloat(floatToF16(static_cast<float>(row[c])));
}
/// The i8 rule (docs/design.md §5, "Low-precision K/V") from the exact
/// row: amax = max |x|, an f32 scale amax / 127, x * 127 / amax rounded to
/// the nearest integer (ties to even) in [-127, 127], read back as
/// q * scale.
void storeI8(double *row, int64_t width) {
  double amax = 0;
  for (int64_t c = 0; c < width; ++c)
    amax = std::max(amax, std::fabs(row[c]));
  const float scale = static_cast<float>(amax) / 127.0f;
  for (int64_t c = 0; c < width; ++c) {
    const double q =
        amax > 0
            ? std::clamp(std::nearbyint(row[c] * 127.0 / amax), -127.0, 127.0)
            : 0.0;
    row[c] = q * static_cast<double>(scale);
  }
}
} // namespace

ref::LayerArgs Problem::layerArgs() const {
  ref::LayerArgs a;
  a.B = size_.B;
  a.T = size_.Tq;
  a.x = input("x");
  a.wq = input("w_q");
  a.wk = input("w_k");
  a.wv = input("w_v");
  a.wo = input("w_o");
  a.bq = input("b_q"); // nullptr without bias
  a.bk = input("b_k");
  a.bv = input("b_v");
  a.bo = input("b_o");
  a.qNorm = input("q_norm"); // nullptr without qk_norm
  a.kNorm = input("k_norm");
  a.positions = positions_.empty() ? nullptr : positions_.data();
  a.kvLens = lens_.empty() ? nullptr : lens_.data();
  a.modifiers = modifierArgs();
  if (spec_.cachedLayer()) { // the cache as it was before any call
    a.kCache = cacheBefore_.at("k").data();
    a.vCache = cacheBefore_.at("v").data();
    a.Tkv = size_.Tkv;
    // New rows are rounded to the cache's type, as the kernel stores them.
    a.store = spec_.kvType() == KvType::BF16  ? storeBf16
              : spec_.kvType() == KvType::F16 ? storeF16
              : spec_.kvType() == KvType::I8  ? storeI8
                                              : nullptr;
  }
  return a;
}

std::vector<float> Problem::cacheValues(const std::string &name) const {
  const Tensor &t = inputs_.at(name);
  if (!t.i8.empty()) { // each row times its scale
    const std::vector<float> &scales = inputs_.at(name + "_scale").f32;
    const size_t row = t.i8.size() / scales.size();
    std::vector<float> out(t.i8.size());
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = static_cast<float>(t.i8[i]) * scales[i / row];
    return out;
  }
  if (t.bits.empty())
    return t.f32;
  std::vector<float> out(t.bits.size());
  const bool bf16 = spec_.kvType() == KvType::BF16;
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = bf16 ? bf16ToFloat(t.bits[i]) : f16ToFloat(t.bits[i]);
  return out;
}

Comparison Problem::checkCache() const {
  Comparison c;
  if (!spec_.cachedLayer())
    return c;
  // Only the appended rows are needed: one output row keeps the
  // reference's attention short.
  const std::vector<int64_t> one{0};
  // The new rows as stored, and before storage (the bound's rounding
  // boundaries).
  std::vector<double> newK, newV, exactK, exactV;
  ref::LayerArgs a = layerArgs();
  a.newK = &newK;
  a.newV = &newV;
  a.rows = &one;
  (void)ref::layer<double>(spec_, a);
  a.store = nullptr;
  a.newK = &exactK;
  a.newV = &exactV;
  (void)ref::layer<double>(spec_, a);
  struct Rows {
    const char *name;
    const std::vector<double> *fresh, *exact;
    int64_t width; // of one kv head's row
  };
  const Rows tensors[] = {{"k", &newK, &exactK, spec_.d_k},
                          {"v", &newV, &exactV, spec_.d_v}};
  int64_t offset = 0; // the flat index of a failure across k then v
  for (const auto &[name, fresh, exactRows, width] : tensors) {
    const std::vector<float> now = cacheValues(name);
    const std::vector<float> &was = cacheBefore_.at(name);
    const int64_t row =
        static_cast<int64_t>(now.size()) / (size_.B * size_.Tkv); // kv * width
    for (int64_t b = 0; b < size_.B; ++b) {
      const int64_t first = lens_[b] - size_.Tq;
      for (int64_t t = 0; t < size_.Tkv; ++t)
        for (int64_t e = 0; e < row; ++e) {
          const size_t at = static_cast<size_t>((b * size_.Tkv + t) * row + e);
          const float got = now[at];
          double want = was[at]; // rows outside the call's: untouched
          bool exact = true;
          double bound = 0;
          if (t >= first && t < lens_[b]) {
            const size_t newAt =
                static_cast<size_t>(((b * size_.Tq) + (t - first)) * row + e);
            want = (*fresh)[newAt];
            exact = false;
            // The largest |value| of this kv head's row before storage.
            const size_t head = newAt - static_cast<size_t>(e % width);
            double rowMax = 0;
            for (int64_t c = 0; c < width; ++c)
              rowMax = std::max(rowMax, std::fabs((*exactRows)[head + c]));
            bound =
                appendedCacheBound(spec_, want, (*exactRows)[newAt], rowMax);
          }
          const double err = std::fabs(static_cast<double>(got) - want);
          if (std::isnan(got) != std::isnan(want))
            c.sawNaN = true;
          const bool bad = exact ? !(got == static_cast<float>(want) ||
                                     (std::isnan(got) && std::isnan(want)))
                                 : err > bound;
          if (err > c.maxAbsErr || (bad && c.failures == 0)) {
            c.maxAbsErr = std::max(c.maxAbsErr, err);
            c.worstIndex = offset + static_cast<int64_t>(at);
          }
          c.failures += bad ? 1 : 0;
        }
    }
    offset += static_cast<int64_t>(now.size());
  }
  return c;
}

Tolerance Problem::tolerance() const {
  Tolerance tol = toleranceFor(spec_);
  if (spec_.alibi == AlibiSlopes::None)
    return tol;
  double maxSlope = 0;
  if (const float *slopes = input("alibi_slopes"))
    for (int64_t i = 0; i < spec_.h; ++i)
      maxSlope = std::max(maxSlope, std::fabs(static_cast<double>(slopes[i])));
  else
    for (double x : standardAlibiSlopes(spec_.h))
      maxSlope = std::max(maxSlope, x);
  return withAlibiScores(tol, maxSlope, size_.Tq, size_.Tkv);
}

ref::ModifierArgs Problem::modifierArgs() const {
  ref::ModifierArgs m;
  m.sinks = input("sinks"); // nullptr when the spec has none
  m.alibiSlopes = input("alibi_slopes");
  m.scale = input("scale");
  return m;
}

Comparison Problem::check(const std::vector<int64_t> &rows) const {
  return compare(rows, false);
}

Comparison Problem::checkLse(const std::vector<int64_t> &rows) const {
  if (lse_.empty())
    return {};
  std::vector<double> want;
  reference(rows, false, &want);
  const Tolerance tol = lseTolerance(spec_);
  const std::vector<float> &got = lse();
  if (rows.empty())
    return compareToReference(got, want, tol);
  std::vector<float> g;
  std::vector<double> w;
  for (int64_t b = 0; b < size_.B; ++b)
    for (int64_t t : rows)
      for (int64_t hd = 0; hd < spec_.h; ++hd) {
        const size_t idx =
            static_cast<size_t>((b * size_.Tq + t) * spec_.h + hd);
        g.push_back(got[idx]);
        w.push_back(want[idx]);
      }
  return compareToReference(g, w, tol);
}

Comparison Problem::checkKvStorage(const std::vector<int64_t> &rows) const {
  return compare(rows, true);
}

Comparison Problem::compare(const std::vector<int64_t> &rows,
                            bool exactKv) const {
  std::vector<float> got = output();
  std::vector<double> want = reference(rows, exactKv);
  const Tolerance tol =
      exactKv ? kvStorageTolerance(spec_.dtype, spec_.kvType(), spec_.op)
              : tolerance();
  if (rows.empty())
    return compareToReference(got, want, tol);
  // Only the checked rows: gather them from both.
  const int64_t width = spec_.op == Op::Sdpa ? spec_.h * spec_.d_v : spec_.d;
  std::vector<float> g;
  std::vector<double> w;
  for (int64_t b = 0; b < size_.B; ++b)
    for (int64_t t : rows)
      for (int64_t c = 0; c < width; ++c) {
        size_t idx = static_cast<size_t>((b * size_.Tq + t) * width + c);
        g.push_back(got[idx]);
        w.push_back(want[idx]);
      }
  return compareToReference(g, w, tol);
}

double Problem::referenceFlops() const {
  const AttentionSpec &s = spec_;
  double attn = 2.0 * size_.B * s.h * size_.Tq * size_.Tkv * (s.d_k + s.d_v);
  if (s.op == Op::Sdpa)
    return attn;
  return attn + 2.0 * size_.B * size_.Tq * s.d *
                    (s.h * s.d_k + s.n_kv * (s.d_k + s.d_v) + s.h * s.d_v);
}

std::vector<int64_t> rowsToCheck(const Problem &p, double flopBudget) {
  const int64_t T = p.size().Tq;
  std::vector<int64_t> rows;
  double cost = p.referenceFlops();
  if (cost <= flopBudget)
    return rows; // empty = all
  const AttentionSpec &s = p.spec();
  // Projections of K/V for every token stay; scale the rest.
  double fixed = s.op == Op::Layer ? 2.0 * p.size().B * p.size().Tq * s.d *
                                         s.n_kv * (s.d_k + s.d_v)
                                   : 0.0;
  double perRow = (cost - fixed) / static_cast<double>(T);
  int64_t n = static_cast<int64_t>((flopBudget - fixed) / perRow);
  n = std::max<int64_t>(8, n);
  if (n >= T)
    return {}; // few rows (decode, T_q = 1): every row of every batch
  for (int64_t i = 0; i < n; ++i)
    rows.push_back(i * (T - 1) / std::max<int64_t>(1, n - 1));
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

double nominalFlops(const AttentionSpec &s, const ProblemSize &z) {
  CostReport r = computeCost(s, z.Tq, z.Tkv, z.B);
  return r.flopsProjections + r.flopsNominalAttention;
}

double usefulFlops(const AttentionSpec &s, const ProblemSize &z,
                   const std::vector<int32_t> &kvLens,
                   const std::vector<int32_t> &qLens) {
  CostReport r = computeCost(s, z.Tq, z.Tkv, z.B);
  if (kvLens.empty() || !s.effectiveMask().hasPadding())
    return r.flopsTotal;
  // Count visible pairs with the actual lengths (a paged cache or a
  // ragged batch: each sequence ends at its own length; a ragged one has
  // its own query count too).
  const int64_t Tkv = s.op == Op::Layer && !s.layerCache ? z.Tq : z.Tkv;
  const MaskSpec mask = s.effectiveMask();
  const bool ownEnd = s.keysPerSequence();
  double pairs = 0;
  for (int64_t b = 0; b < z.B; ++b) {
    const int64_t end = ownEnd ? kvLens[b] : Tkv;
    const int64_t Tq = qLens.empty() ? z.Tq : qLens[b];
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t j = 0; j < std::min(Tkv, end); ++j)
        pairs += maskAllows(mask, i, j, Tq, end, kvLens[b]) ? 1 : 0;
  }
  return r.flopsProjections + 2.0 * pairs * s.h * (s.d_k + s.d_v);
}

} // namespace mhagen
