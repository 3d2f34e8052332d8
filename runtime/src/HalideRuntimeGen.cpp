// Build-time tool: writes the Halide runtime (thread pool, allocator, error
// reporting, CUDA and OpenCL device support) as one object for the mhagen
// runtime library. Generated kernels are compiled without their own copy,
// so every kernel in a process shares this one. Compiled for baseline
// x86-64 so that the runtime itself runs on any x86-64 CPU.
#include "Halide.h"

#include <cstdio>

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT.o\n", argv[0]);
    return 2;
  }
  Halide::Target t("x86-64-linux-cuda-opencl");
  Halide::compile_standalone_runtime(argv[1], t);
  return 0;
}
