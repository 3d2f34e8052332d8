// libFuzzer target: the check a kernel library file passes before dlopen
// (runtime/src/ElfCheck.cpp). Arbitrary bytes, truncated and malformed
// ELF files included, are refused with a message or accepted; the check
// itself never crashes. Accepted files are not dlopened here: running the
// constructors of fuzzed code would test the fuzzer, not mhagen.
#include "mhagen/abi.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace mhagen::rt {
int checkElfLibrary(const char *path); // exported by libmhagen_runtime
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int fd = memfd_create("fuzz-elf", 0);
  if (fd < 0 || ftruncate(fd, 0) != 0)
    return 0;
  if (size && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))
    return 0;
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  mhagen::rt::checkElfLibrary(path.c_str());
  return 0;
}
