// The C ABI wrapper of a Halide kernel (HalideWrapper.h).
#include "HalideWrapper.h"

#include "mhagen/abi_model.hpp"
#include "mhagen/backend/AbiWrapper.h"
#include "mhagen/templates/Templates.h"

#ifndef MHAGEN_VERSION
#define MHAGEN_VERSION "0.0.0"
#endif

namespace mhagen::hl {

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
  // The pipeline a call runs: the long-call variant for the calls in its
  // range, where the kernel has one.
  std::string longDecl, call = symbol + "_pipeline(" + bufs.callArgs + ")";
  if (longCalls) {
    longDecl = "int " + symbol + "_long_pipeline(" + bufs.params + ");\n";
    std::string inRange = "a->t_q >= " + std::to_string(longCalls->minTokens);
    if (longCalls->maxKeys)
      inRange += " && a->t_kv <= " + std::to_string(*longCalls->maxKeys);
    call = inRange + " ? " + symbol + "_long_pipeline(" + bufs.callArgs +
           ")\n                 : " + call;
  }
  return fillTemplate(templateText("halide_wrapper.c.in"),
                      {{"MHAGEN_VERSION", MHAGEN_VERSION},
                       {"SYMBOL", symbol},
                       {"TARGET", target},
                       {"PIPELINE_PARAMS", bufs.params},
                       {"BUFFER_SETUP", setup},
                       {"LONG_PIPELINE_DECL", longDecl},
                       {"PIPELINE_CALL", call},
                       {"BUFFER_TEARDOWN", teardown},
                       {"EXTRA_INCLUDES", includes}});
}

} // namespace mhagen::hl
