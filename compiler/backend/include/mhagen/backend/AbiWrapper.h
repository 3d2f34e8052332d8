// The C side of the ABI for every backend: how mhagen_call_args becomes the
// arguments of a generated function. Both calling conventions are written
// from one plan derived from the ABI model (mhagen/abi_model.hpp):
// halide_buffer_t (Halide pipelines) and memref descriptors (MLIR's C
// interface). Only the per-backend glue stays in the backends.
#ifndef MHAGEN_BACKEND_ABIWRAPPER_H
#define MHAGEN_BACKEND_ABIWRAPPER_H

#include "mhagen/abi_model.hpp"
#include "mhagen/spec/AttentionSpec.h"

#include <optional>
#include <string>
#include <vector>

namespace mhagen::backend {

/// The ABI shape of a spec: which tensors its kernel has, and their sizes.
abi::AbiShape abiShapeOf(const AttentionSpec &s);
/// The shape the kernel itself is called with (abi::perSequence): a
/// ragged batch reaches it one sequence at a time. Backends build their
/// parameters and wrappers from this one.
abi::AbiShape kernelAbiShapeOf(const AttentionSpec &s);

/// The value the spec fixes for a dimension that is a call size (B, T_q,
/// T_kv), if it fixes one; nullopt for any other dimension. A layer's key
/// tokens are its own tokens.
std::optional<int64_t> fixedCallSize(const abi::Dim &d, const AttentionSpec &s);

/// One tensor of a call, as C expressions over `a` (the mhagen_call_args
/// pointer of the wrapper).
struct WrapperTensor {
  const abi::TensorModel *model;
  std::string data;                 ///< the data pointer
  std::vector<std::string> extents; ///< outermost first
  std::vector<std::string> strides; ///< outermost first, in elements
};

/// Every tensor of a kernel in parameter order, plus the C statements that
/// declare what the expressions use (B, TQ, TKV, effective strides).
struct WrapperPlan {
  std::string setup;
  std::vector<WrapperTensor> tensors;
};
WrapperPlan wrapperPlan(const AttentionSpec &s);

/// halide_buffer_t convention: `setup` builds one buffer per tensor with
/// mh_buffer (templates/halide_wrapper.c.in), `params` is the pipeline's
/// parameter list and `callArgs` its arguments.
struct HalideBufferCall {
  std::string setup, params, callArgs;
};
HalideBufferCall halideBufferCall(const AttentionSpec &s,
                                  const WrapperPlan &plan);

/// Memref-descriptor convention: the descriptor typedefs and the
/// declaration of `_mlir_ciface_<fn>`, and the statements that fill the
/// descriptors and call it.
struct MemrefCall {
  std::string decls, call;
};
MemrefCall memrefCall(const WrapperPlan &plan, const std::string &fn);

} // namespace mhagen::backend

#endif
