// The cuda backend (KernelBackend.h): a spec -> one CUDA C++ translation
// unit instantiating mhagen's tensor-core template (templates/cuda) ->
// nvcc -> a fatbin embedded in the ABI wrapper. Only the registry
// (compiler/driver/BackendRegistry.cpp) includes this header.
#ifndef MHAGEN_CUDA_CUDABACKEND_H
#define MHAGEN_CUDA_CUDABACKEND_H

#include "mhagen/backend/KernelBackend.h"

#include <memory>

namespace mhagen {

std::unique_ptr<KernelBackend> makeCudaBackend();

} // namespace mhagen

#endif
