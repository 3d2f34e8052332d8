#!/usr/bin/env bash
# Installs exactly the Debian packages mhagen needs that are missing on this
# machine. Idempotent: runs `apt-get update` once, and only when something is
# missing. Needs root (or sudo) on Debian 12.
set -euo pipefail

PACKAGES=(
  # build tools (python3-venv: the SASS tools' venv, setup-sass-tools.sh)
  cmake ninja-build g++ ccache lld-19 python3 python3-venv clang-format
  # the sanitized build and the fuzz targets (scripts/sanitize.sh)
  clang-19 libclang-rt-19-dev
  # Halide 14; its CMake config needs LLVM 14's; llc-14 compiles Halide's bitcode
  libhalide14-0-dev llvm-14-dev llvm-14
  # MLIR/LLVM 19 (the MLIR backend, FileCheck, lit's tools)
  llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools
  # libraries
  libbenchmark-dev libgtest-dev libcli11-dev nlohmann-json3-dev
  # the runtime checks kernel libraries (ELF headers, segments) before dlopen
  libelf-dev
  # mhagen heads / explain --plot write PNGs
  libpng-dev
  # benchmark baselines
  libopenblas-dev libdnnl-dev libomp-19-dev
  # OpenCL on the CPU (the GPU schedule's numerical check)
  pocl-opencl-icd ocl-icd-opencl-dev
  # tuning report plot
  python3-matplotlib
  # tuning spread over a cluster: the one-node Slurm test (tune_slurm_array)
  slurm-wlm
  # the neon target's subset under emulation (scripts/test-aarch64.sh):
  # Debian's AArch64 cross compiler, qemu, and the arm64 libraries the
  # emulated test programs load (multiarch packages): the runtime's libelf
  # and libstdc++, which no other package here pulls in
  g++-aarch64-linux-gnu qemu-user-static libelf-dev:arm64 libstdc++6:arm64
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
# The :arm64 packages need dpkg to know the architecture (before the
# update, so that it fetches arm64's package lists).
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "setup-deps: adding the arm64 architecture (multiarch)"
  $SUDO dpkg --add-architecture arm64
fi
echo "setup-deps: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
