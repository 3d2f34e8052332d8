// Build-time tool: writes the Halide runtime (thread pool, allocator, error
// reporting, CUDA and OpenCL device support) as one object for the mhagen
// runtime library. Generated kernels are compiled without their own copy,
// so every kernel in a process shares this one. Compiled for the baseline
// of the runtime's architecture (x86-64 by default; `arm-64-linux` for an
// AArch64 runtime) so that it runs on any CPU of it.
#include "Halide.h"

#include <cstdio>

int main(int argc, char **argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s OUTPUT.o [HALIDE_TARGET]\n", argv[0]);
    return 2;
  }
  Halide::Target t(argc == 3 ? argv[2] : "x86-64-linux-cuda-opencl");
  Halide::compile_standalone_runtime(argv[1], t);
  return 0;
}
