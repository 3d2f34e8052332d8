// The C toolchain the driver uses for wrappers and links (Toolchain.cpp).
#ifndef MHAGEN_DRIVER_TOOLCHAIN_H
#define MHAGEN_DRIVER_TOOLCHAIN_H

#include <string>
#include <vector>

namespace mhagen {

struct GeneratedKernel;
struct MachineModel;

/// The C compiler for wrappers and links of code for `m`: on mhagen's own
/// architecture $MHAGEN_CC, else $CC, else cc; for another (a cross
/// target) $MHAGEN_CC_<ARCH>, else <arch>-linux-gnu-gcc (Debian's cross
/// compilers), e.g. MHAGEN_CC_AARCH64 or aarch64-linux-gnu-gcc.
std::vector<std::string> cCompiler(const MachineModel &m);
/// The machine model of kernels that go into one object or library;
/// DriverError when their architectures differ.
const MachineModel &kernelsMachine(const std::vector<GeneratedKernel> &kernels);
/// Runs a tool; DriverError("<what> failed (...)") with its output if it
/// fails.
void runTool(std::vector<std::string> argv, const std::string &what);
/// Upper case (the header guards of generated files).
std::string upperCase(std::string s);

} // namespace mhagen

#endif
