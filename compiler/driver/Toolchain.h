// The C toolchain the driver uses for wrappers and links (Toolchain.cpp).
#ifndef MHAGEN_DRIVER_TOOLCHAIN_H
#define MHAGEN_DRIVER_TOOLCHAIN_H

#include <string>
#include <vector>

namespace mhagen {

/// The C compiler for wrappers and links: $MHAGEN_CC, else $CC, else cc.
std::vector<std::string> cCompiler();
/// Runs a tool; DriverError("<what> failed (...)") with its output if it
/// fails.
void runTool(std::vector<std::string> argv, const std::string &what);
/// Upper case (the header guards of generated files).
std::string upperCase(std::string s);

} // namespace mhagen

#endif
