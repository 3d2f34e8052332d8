# Cross-compiling for AArch64 Linux with Debian's cross compilers
# (g++-aarch64-linux-gnu). Libraries come from Debian's arm64 multiarch
# packages (/usr/lib/aarch64-linux-gnu); programs run under
# qemu-aarch64-static (qemu-user-static), which finds the arm64 loader
# those packages install in /lib.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
find_program(MHAGEN_QEMU_AARCH64 qemu-aarch64-static REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR "${MHAGEN_QEMU_AARCH64}")
