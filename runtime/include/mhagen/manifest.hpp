// KernelManifest: what a generated kernel says about itself. The compiler
// writes it (next to the object file and inside it) and the runtime reads it
// to check ABI, CPU features, device and call arguments. The format lives
// here, in the runtime, because the runtime must read it; the compiler
// writes it through these same definitions.
#ifndef MHAGEN_MANIFEST_HPP
#define MHAGEN_MANIFEST_HPP

#include <cstdint>
#include <string>
#include <vector>

namespace mhagen {

/// The spec as the runtime needs it (the runtime does not include the
/// compiler's AttentionSpec). Static sizes are 0 when set at call time.
struct ManifestSpec {
  std::string canonical;   ///< spec-language text (AttentionSpec::canonical)
  std::string semanticKey; ///< AttentionSpec::semanticKey
  std::string hash;        ///< AttentionSpec::hash
  std::string op;          ///< "sdpa" | "layer"
  int64_t d = 0, h = 0, d_k = 0, d_v = 0, n_kv = 0;
  bool causal = false;  ///< every key after the row's position is hidden
  int64_t window = 0;   ///< a mask of one conjunction with window(W): W
  bool padding = false; ///< the kernel takes kv_lens
  /// The whole mask in the spec language (MaskSpec::str, e.g.
  /// "window(4096) | causal & sink(4)"); absent from older manifests.
  std::string maskExpr;
  std::string dtype;    ///< "f32" | "bf16" | "f16"
  std::string kv_dtype; ///< K/V storage: dtype's name, or "i8" etc.;
                        ///< empty is read as dtype
  /// kv_cache = paged(BLOCK): tokens per K/V block; 0: contiguous (and
  /// in older manifests).
  int64_t kv_block = 0;
  /// ragged = true: packed queries with q_offsets, the runtime calls the
  /// kernel once per sequence; false in older manifests.
  bool ragged = false;
  bool bias = false;
  /// qk_norm's scope: "none" | "head" | "projection" (the weights the
  /// kernel takes); "none" in older manifests.
  std::string qk_norm = "none";
  /// positions = runtime (a positions [B, t_q] argument); false in older
  /// manifests.
  bool positions = false;
  /// op = layer with kv_cache = contiguous: the kernel appends to the K/V
  /// cache it attends over; false in older manifests.
  bool layer_cache = false;
  double scale = 0;            ///< 0 when scaleAtRuntime
  bool scaleAtRuntime = false; ///< scale = runtime (a `scale` argument)
  /// Score modifiers (docs/design.md §2); absent from older manifests.
  double softcap = 0;          ///< 0: none
  std::string alibi = "false"; ///< "false" | "true" (standard) | "runtime"
  bool sinks = false;          ///< sinks = learned (a `sinks` argument)
  bool lse = false;            ///< lse = true (an `lse` output)
  int64_t T = 0, T_kv = 0, B = 0;
};

struct KernelManifest {
  int abiVersion = 0;
  std::string mhagenVersion;
  std::string symbol;     ///< entry point of this variant
  std::string kernelName; ///< the spec's name, shared by its variants
  ManifestSpec spec;
  std::string target;  ///< avx2 | avx512 | avx512_bf16 | cuda_smXX | opencl
  std::string backend; ///< halide | mlir | cuda
  std::string device;  ///< cpu | cuda | opencl
  std::vector<std::string> cpuFeatures; ///< all must be present to run
  std::string scheduleJson = "{}";      ///< backend's schedule parameters
  std::string tuningJson = "{}";        ///< provenance of the schedule

  /// Deterministic JSON (fixed key order, 2-space indent, trailing newline).
  std::string toJson() const;
  /// Parses and checks required fields; on failure returns false and says
  /// why in *error.
  static bool fromJson(const std::string &json, KernelManifest &out,
                       std::string *error);
};

} // namespace mhagen

#endif
