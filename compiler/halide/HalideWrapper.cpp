// The C ABI wrapper of a Halide kernel (HalideWrapper.h).
#include "HalideWrapper.h"

#include "mhagen/abi_model.hpp"
#include "mhagen/backend/AbiWrapper.h"
#include "mhagen/templates/Templates.h"

#ifndef MHAGEN_VERSION
#define MHAGEN_VERSION "0.0.0"
#endif

namespace mhagen::hl {

namespace {

/// A layer's cache (kv_cache = contiguous): the pipeline writes the call's
/// K/V rows to dense scratch (its outputs k_new, v_new, [B, TQ, kv, dk]
/// in the cache's type, and with kv_dtype = i8 their scales k_new_scale,
/// v_new_scale, [B, TQ, kv]); after it, each sequence's rows are copied
/// to its cache rows [kv_lens[b] - TQ, kv_lens[b]). The runtime has
/// checked kv_lens[b] in [TQ, TKV] and that the cache aliases no other
/// tensor.
struct CacheAppend {
  std::string setup, teardown, params, callArgs;
  std::vector<std::string> scratch; ///< the malloc'd buffers
};

/// One scratch output, [B, TQ, kv, width] (rows) or [B, TQ, kv] (scales,
/// width 1), and its copy into the cache tensor `dest` (with its token and
/// batch strides) after the pipeline.
enum class Scratch { Rows, Scales };
void appendRows(CacheAppend &c, const std::string &scratch,
                const std::string &dest, int64_t kv, int64_t width, int bytes,
                const char *typeCode, Scratch kind) {
  const std::string elem = std::to_string(bytes), K = std::to_string(kv);
  const std::string w = std::to_string(width);
  const std::string row = "(int64_t)" + K + " * " + w;
  const std::string mem = "mh_" + scratch, buf = "buf_" + scratch;
  const bool rowsHaveWidth = kind == Scratch::Rows;
  const std::string rank = rowsHaveWidth ? "4" : "3";
  c.setup += "  void *" + mem + " = malloc((size_t)(B * TQ * " + row + " * " +
             elem + "));\n";
  c.setup += "  halide_buffer_t " + buf + ";\n";
  c.setup += "  halide_dimension_t dim_" + scratch + "[" + rank + "];\n";
  c.setup += rowsHaveWidth ? "  {\n    const int64_t e[4] = {" + w + ", " + K +
                                 ", TQ, B};\n    const int64_t s[4] = {1, " +
                                 w + ", " + row + ", TQ * " + row + "};\n"
                           : "  {\n    const int64_t e[3] = {" + K +
                                 ", TQ, B};\n    const int64_t s[3] = {1, " +
                                 K + ", TQ * " + K + "};\n";
  c.setup += "    mh_buffer(&" + buf + ", dim_" + scratch + ", " + mem + ", " +
             typeCode + ", " + std::to_string(8 * bytes) + ", " + rank +
             ", e, s);\n  }\n";
  c.teardown += "    {\n      const int64_t ts = a->" + dest +
                "_token_stride ? a->" + dest + "_token_stride : " + row + ";\n";
  c.teardown += "      const int64_t bs = a->" + dest + "_batch_stride ? a->" +
                dest + "_batch_stride : ts * TKV;\n";
  c.teardown += "      for (int64_t b = 0; b < B; ++b)\n"
                "        for (int64_t t = 0; t < TQ; ++t)\n";
  c.teardown += "          memcpy((char *)(uintptr_t)a->" + dest +
                " + (b * bs + (a->kv_lens[b] - TQ + t) * ts) * " + elem +
                ",\n                 (const char *)" + mem +
                " + (b * TQ + t) * " + row + " * " + elem +
                ",\n                 (size_t)(" + row + " * " + elem +
                "));\n    }\n";
  c.params += ", halide_buffer_t *" + scratch;
  c.callArgs += ", &" + buf;
  c.scratch.push_back(mem);
}

CacheAppend cacheAppend(const AttentionSpec &s) {
  // GPU targets are refused (the spec's rule): bf16 is Halide's bfloat.
  const int bytes =
      static_cast<int>(abi::scalarBytes(backend::abiShapeOf(s).kv));
  // halide_type_code_t of the cache's elements: int, bfloat, float.
  const char *typeCode = s.kvQuantized()              ? "0"
                         : s.kvType() == KvType::BF16 ? "4"
                                                      : "2";
  CacheAppend c;
  c.setup = "  /* The call's new K/V rows, appended to the cache after the "
            "pipeline. */\n";
  c.teardown = "  if (rc == 0) {\n";
  appendRows(c, "k_new", "k", s.n_kv, s.d_k, bytes, typeCode, Scratch::Rows);
  appendRows(c, "v_new", "v", s.n_kv, s.d_v, bytes, typeCode, Scratch::Rows);
  if (s.kvQuantized()) {
    appendRows(c, "k_new_scale", "k_scale", s.n_kv, 1, 4, "2", Scratch::Scales);
    appendRows(c, "v_new_scale", "v_scale", s.n_kv, 1, 4, "2", Scratch::Scales);
  }
  std::string anyMissing, freeAll;
  for (const std::string &mem : c.scratch) {
    anyMissing += (anyMissing.empty() ? "!" : " || !") + mem;
    freeAll += "    free(" + mem + ");\n";
  }
  c.setup += "  if (" + anyMissing + ") {\n" + freeAll +
             "    snprintf(err, errlen, \"cannot allocate the new K/V "
             "rows\");\n"
             "    return -1;\n"
             "  }\n";
  c.teardown += "  }\n";
  for (const std::string &mem : c.scratch)
    c.teardown += "  free(" + mem + ");\n";
  return c;
}

} // namespace

std::string wrapperSource(const AttentionSpec &s, const std::string &symbol,
                          const std::string &target, bool gpu,
                          std::optional<LongCallRange> longCalls) {
  const backend::WrapperPlan plan = backend::wrapperPlan(s);
  const backend::HalideBufferCall bufs = backend::halideBufferCall(s, plan);
  std::string setup = bufs.setup, teardown;
  std::string includes;
  if (gpu) {
    // Host pointers (the default): Halide copies the inputs to the device
    // as needed; the output is copied back and every device allocation is
    // released before returning.
    std::string hostSetup, devSetup, hostDone, devDone;
    for (const backend::WrapperTensor &b : plan.tensors) {
      const std::string name = b.model->name;
      if (b.model->output)
        hostSetup += "    buf_" + name + ".flags = 0;\n";
      else
        hostSetup += "    buf_" + name + ".flags = 1; /* host dirty */\n";
    }
    hostDone += "    if (rc == 0)\n      rc = halide_copy_to_host(NULL, "
                "&buf_out);\n";
    for (const backend::WrapperTensor &b : plan.tensors)
      hostDone += "    halide_device_free(NULL, &buf_" +
                  std::string(b.model->name) + ");\n";
    if (s.target.kind == TargetKind::Cuda) {
      // Device pointers (args.device_pointers): the tensors are wrapped
      // as CUDA allocations in place and the output stays on the device.
      // Integer vectors (kv_lens) are always host pointers.
      includes = "#include <HalideRuntimeCuda.h>\n";
      for (const backend::WrapperTensor &b : plan.tensors) {
        const std::string name = b.model->name;
        if (b.model->elem == abi::Elem::Int32) {
          devSetup += "    buf_" + name + ".flags = 1; /* host dirty */\n";
          continue;
        }
        devSetup += "    buf_" + name +
                    ".host = NULL;\n"
                    "    if (halide_cuda_wrap_device_ptr(NULL, &buf_" +
                    name + ", (uint64_t)(uintptr_t)" + b.data +
                    ") != 0) {\n      snprintf(err, errlen, \"cannot wrap "
                    "the device pointer of " +
                    name + "\");\n      return -1;\n    }\n";
      }
      devDone += "    if (rc == 0)\n      rc = halide_device_sync(NULL, "
                 "&buf_out);\n";
      for (const backend::WrapperTensor &b : plan.tensors)
        devDone += b.model->elem == abi::Elem::Int32
                       ? "    halide_device_free(NULL, &buf_" +
                             std::string(b.model->name) + ");\n"
                       : "    halide_cuda_detach_device_ptr(NULL, &buf_" +
                             std::string(b.model->name) + ");\n";
      setup += "  if (a->device_pointers) {\n" + devSetup + "  } else {\n" +
               hostSetup + "  }\n";
      teardown += "  if (a->device_pointers) {\n" + devDone + "  } else {\n" +
                  hostDone + "  }\n";
    } else {
      setup += "  {\n" + hostSetup + "  }\n";
      teardown += "  {\n" + hostDone + "  }\n";
    }
  }
  std::string params = bufs.params, callArgs = bufs.callArgs;
  if (s.cachedLayer()) {
    const CacheAppend append = cacheAppend(s);
    includes += "#include <stdlib.h>\n";
    setup += append.setup;
    teardown = append.teardown + teardown;
    params += append.params;
    callArgs += append.callArgs;
  }
  // The pipeline a call runs: the long-call variant for the calls in its
  // range, where the kernel has one.
  std::string longDecl, call = symbol + "_pipeline(" + callArgs + ")";
  if (longCalls) {
    longDecl = "int " + symbol + "_long_pipeline(" + params + ");\n";
    std::string inRange = "a->t_q >= " + std::to_string(longCalls->minTokens);
    if (longCalls->maxKeys)
      inRange += " && a->t_kv <= " + std::to_string(*longCalls->maxKeys);
    call = inRange + " ? " + symbol + "_long_pipeline(" + callArgs +
           ")\n                 : " + call;
  }
  return fillTemplate(templateText("halide_wrapper.c.in"),
                      {{"MHAGEN_VERSION", MHAGEN_VERSION},
                       {"SYMBOL", symbol},
                       {"TARGET", target},
                       {"PIPELINE_PARAMS", params},
                       {"BUFFER_SETUP", setup},
                       {"LONG_PIPELINE_DECL", longDecl},
                       {"PIPELINE_CALL", call},
                       {"BUFFER_TEARDOWN", teardown},
                       {"EXTRA_INCLUDES", includes}});
}

} // namespace mhagen::hl
