// AttentionSpec: the one description of an attention kernel that flows through
// every stage of mhagen (parser -> validation -> backend -> driver -> runtime
// manifest). The math it describes is in docs/design.md §1.
#ifndef MHAGEN_SPEC_ATTENTIONSPEC_H
#define MHAGEN_SPEC_ATTENTIONSPEC_H

#include "mhagen/spec/QkNorm.h"
#include "mhagen/spec/Rope.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mhagen {

struct MachineModel;

enum class Op { Sdpa, Layer };
enum class DType { F32, BF16, F16 };
/// Storage type of the K/V inputs (the `kv_dtype` field). I8 is symmetric
/// int8 with one f32 scale per (batch, token, kv head) beside the cache
/// (docs/design.md §5, "Low-precision K/V").
enum class KvType { F32, BF16, F16, I8 };
/// Halide and MLIR lower the algorithm; Cuda instantiates mhagen's CUDA C++
/// tensor-core template (templates/cuda) and compiles it with nvcc.
enum class Backend { Halide, Mlir, Cuda };

/// Where a kernel runs. `Host` is resolved to the best CPU target this
/// machine supports before a backend sees the spec (see resolveHostTarget).
/// `Neon` is AArch64: Armv8.2-A with Advanced SIMD, FP16 arithmetic and the
/// dot product (docs/design.md §7, "Targets").
enum class TargetKind {
  Host,
  Avx2,
  Avx512,
  Avx512Bf16,
  Avx512Amx,
  Neon,
  Cuda,
  OpenCL
};

struct Target {
  TargetKind kind = TargetKind::Host;
  /// CUDA compute capability (e.g. 86 for sm_86); only for kind == Cuda.
  int cudaCapability = 0;
  /// The architecture-specific feature set (sm_90a: wgmma, TMA,
  /// setmaxnreg), whose code runs on that exact capability only.
  bool cudaArchSpecific = false;
  /// The machine model when the target was resolved from `host` (the
  /// host's caches and cores); null: the named target's preset
  /// (mhagen/machine/MachineModel.h). Not part of the spec's identity.
  std::shared_ptr<const MachineModel> machine;

  bool isCpu() const {
    return kind != TargetKind::Cuda && kind != TargetKind::OpenCL;
  }
  bool isGpu() const { return !isCpu(); }
  /// Canonical name: host, avx2, avx512, avx512_bf16, avx512_amx, neon,
  /// cuda_sm86, cuda_sm90a, opencl.
  std::string str() const;
  bool operator==(const Target &o) const {
    return kind == o.kind && cudaCapability == o.cudaCapability &&
           cudaArchSpecific == o.cudaArchSpecific;
  }
};

/// One conjunction of mask terms (docs/design.md §2, "Masks"): causal,
/// window(W) (which implies causal), padding and sink(N) (the first N
/// keys). All false/zero is the term `none` (every key visible).
struct MaskClause {
  bool causal = false;
  int64_t window = 0; ///< 0: no window; otherwise W > 0 (implies causal)
  bool padding = false;
  int64_t sink = 0; ///< 0: no sink term; otherwise N > 0: keys j < N

  bool isTrue() const { return !causal && window == 0 && !padding && !sink; }
  bool isCausal() const { return causal || window > 0; }
  /// Does this clause hide everything the other one hides (is it implied
  /// by `o`)? Then `this | o` is `this`.
  bool weakerThan(const MaskClause &o) const;
  /// Terms joined by " & " in the order causal, window(W), padding,
  /// sink(N); causal is not printed when window is set.
  std::string str() const;
  /// causal, win256, pad, sink4 joined by "_".
  std::string shortName() const;
  bool operator==(const MaskClause &o) const {
    return causal == o.causal && window == o.window && padding == o.padding &&
           sink == o.sink;
  }
  bool operator<(const MaskClause &o) const;
};

/// The mask algebra of the spec language: terms joined by `&` and `|`
/// with parentheses, kept as a union of conjunctions (disjunctive normal
/// form, at most kMaxMaskClauses of them; none absorbed by another). No
/// clause is `none`.
struct MaskSpec {
  std::vector<MaskClause> anyOf; ///< empty: `none`, every key visible

  static constexpr int kMaxMaskClauses = 4;

  MaskSpec() = default;
  /// The mask of one conjunction (none when c is all false).
  static MaskSpec of(const MaskClause &c);
  bool isNone() const { return anyOf.empty(); }
  /// A union of more than one conjunction.
  bool isUnion() const { return anyOf.size() > 1; }
  /// Every clause hides the keys after the row's position.
  bool isCausal() const;
  /// Some clause has a padding term (the kernel takes kv_lens).
  bool hasPadding() const;
  /// The only clause (a conjunction or none); only when !isUnion().
  MaskClause single() const { return anyOf.empty() ? MaskClause{} : anyOf[0]; }
  /// Sorts the clauses, drops duplicates and clauses implied by others,
  /// and turns a union holding `none` into `none`.
  void normalize();
  /// Canonical text: "none", or clauses joined by " | " (each as
  /// MaskClause::str()); parsing it gives back this mask.
  std::string str() const;
  /// Short form for kernel names: none, causal, win256, pad, causal_pad,
  /// win256_or_causal_sink4.
  std::string shortName() const;
  bool operator==(const MaskSpec &o) const { return anyOf == o.anyOf; }
};

/// Where the ALiBi slopes come from (the `alibi` field; docs/design.md §2,
/// "Score modifiers"): none, the standard geometric slopes for h heads
/// compiled in, or one f32 slope per head passed at call time.
enum class AlibiSlopes { None, Standard, Runtime };

struct AttentionSpec {
  std::string name;  ///< user label; empty means "use derivedName()"
  Op op = Op::Layer; ///< the full layer unless the spec says sdpa
  int64_t d = 0;     ///< model width
  int64_t h = 0;     ///< query heads
  int64_t d_k = 0;   ///< query/key head width
  int64_t d_v = 0;   ///< value head width
  int64_t n_kv = 0;  ///< key/value heads (h % n_kv == 0)
  MaskSpec mask;
  DType dtype = DType::F32;
  /// K/V storage type; unset: the same as dtype (never set to it: the
  /// parser drops a kv_dtype equal to dtype, so equal specs print alike).
  std::optional<KvType> kv_dtype;
  /// `kv_cache = paged(BLOCK)`: K/V (and int8 scales) live in blocks of
  /// kv_block tokens, [num_blocks, BLOCK, kv, dk], that a per-sequence
  /// block table names; kv_lens gives each sequence's length, and its
  /// queries sit at its last T_q positions (docs/design.md §5, "Paged
  /// K/V"). 0: one contiguous [B, T_kv, kv, dk] cache.
  int64_t kv_block = 0;
  /// op = layer with `kv_cache = contiguous`: the layer appends its new
  /// tokens' K/V to a [B, T_kv, kv, dk] cache holding kv_lens[b] tokens
  /// after the call, and attends over all of them (docs/design.md §5,
  /// "The layer's KV cache"). false (`kv_cache = none`, the layer's
  /// default): it attends over its own tokens only. Unused by op = sdpa.
  bool layerCache = false;
  /// `ragged = true`: a ragged batch (docs/design.md §5, "Ragged
  /// batches"): the queries of all sequences packed, sequence b's rows
  /// [q_offsets[b], q_offsets[b + 1]), its last tokens; its keys are its
  /// first kv_lens[b] cache positions. The runtime calls the kernel once
  /// per sequence. false: every sequence has T_q queries.
  bool ragged = false;
  bool bias = false; ///< projection biases (op = layer only)
  /// RMSNorm of q and k after the projections, before the rotary
  /// positions (op = layer only; mhagen/spec/QkNorm.h).
  QkNormSpec qk_norm;
  /// Rotary positions on q and k after the projections (op = layer only;
  /// mhagen/spec/Rope.h).
  RopeSpec rope;
  /// `positions = runtime`: the rotation's positions are a call argument,
  /// positions [B, T] int32; false: token t of a call sits at position t.
  bool positionsAtRuntime = false;
  std::optional<double> scale; ///< unset: 1/sqrt(d_k)
  /// `scale = runtime`: the scale is a call argument (scale [1] f32) and
  /// `scale` stays unset; the compiled-in scale is the default.
  bool scaleAtRuntime = false;
  /// Score modifiers, applied in this order to s = scale * q.k inside the
  /// online softmax (docs/design.md §2): softcap C: s = C tanh(s / C);
  /// ALiBi: s += slope_h * (j - pos(i)); sinks: one learned logit per
  /// head joins each row's softmax denominator (a key with value 0).
  std::optional<double> softcap; ///< unset: no cap; else C > 0
  AlibiSlopes alibi = AlibiSlopes::None;
  bool sinks = false; ///< `sinks = learned`: sinks [h] f32 at call time
  /// `lse = true`: the kernel also writes lse [B, T_q, h] (f32), each
  /// row's log-sum-exp of its scores (docs/design.md §1, "Logsumexp").
  bool lse = false;
  Target target; ///< where it runs
  Backend backend = Backend::Halide;
  std::optional<int64_t> T;    ///< static query length
  std::optional<int64_t> T_kv; ///< static key/value length
  std::optional<int64_t> B;    ///< static batch

  double effectiveScale() const;
  /// The K/V storage type in effect (kv_dtype, else dtype).
  KvType kvType() const;
  /// K/V stored as int8 with per-(token, head) scales.
  bool kvQuantized() const { return kvType() == KvType::I8; }
  /// K/V in a paged cache (kv_cache = paged(BLOCK)).
  bool pagedKv() const { return kv_block > 0; }
  /// op = layer reading and appending to a KV cache.
  bool cachedLayer() const { return op == Op::Layer && layerCache; }
  /// Each sequence has its own key count (kv_lens) and its queries are its
  /// last T_q tokens: a paged cache, a ragged batch or a layer's cache.
  bool keysPerSequence() const { return pagedKv() || ragged || cachedLayer(); }
  /// The mask a kernel applies: the spec's, and where keys are per
  /// sequence (keysPerSequence) every clause also hides the keys past its
  /// sequence's length (a padding term; `none` becomes `padding`).
  MaskSpec effectiveMask() const;
  /// Bytes of K and V stored per token (op = sdpa: what a decode step
  /// reads per cached token), int8 row scales included.
  int64_t kvBytesPerToken() const;
  int64_t groupSize() const { return h / n_kv; }
  /// Any score modifier (softcap, ALiBi or sinks) is set.
  bool hasScoreModifier() const {
    return softcap.has_value() || alibi != AlibiSlopes::None || sinks;
  }

  /// The whole spec as a `spec NAME { ... }` block in the spec language,
  /// one field a line in a fixed order. parse(canonical()) gives back this
  /// spec and printing it again gives the same text.
  std::string canonical() const;
  /// One line holding only what changes the computation (no name, target
  /// or backend): two specs with equal keys compute the same function.
  std::string semanticKey() const;
  /// 16 hex digits, FNV-1a 64 of semanticKey(): stable across runs and
  /// machines; used as cache and tuning key together with the target.
  std::string hash() const;
  /// mha_d4096_h32_kv8_dk128_causal_f32 (layer); mha_sdpa_... for the
  /// attention core; + _dv, _bias, _T... when those are set.
  std::string derivedName() const;
  /// name if set, else derivedName().
  std::string kernelName() const;

  bool operator==(const AttentionSpec &o) const;
  bool operator!=(const AttentionSpec &o) const { return !(*this == o); }
};

const char *toString(Op op);
const char *toString(DType t);
const char *toString(Backend b);
const char *toString(KvType t);
/// The `alibi` field's text: false, true (standard slopes), runtime.
const char *toString(AlibiSlopes a);
/// The KvType that stores a dtype unchanged.
KvType kvTypeOf(DType t);
/// Size in bytes of one stored K/V element (I8: 1; its scales aside).
int kvTypeBytes(KvType t);
/// Size in bytes of one element of the given input dtype.
int dtypeBytes(DType t);

} // namespace mhagen

#endif
