#!/usr/bin/env bash
# Prints bench/results/<class>, the folder this machine's raw results go
# to (bench/make_results.py makes one table per folder), creating it and
# its class.txt (the line that heads the table) on first use. The class
# comes from the CPU's vendor, family and flags, so two VMs of one class
# share a folder.
set -euo pipefail
cd "$(dirname "$0")/.."
field() { awk -F': *' -v k="$1" '$1 ~ "^"k"[ \t]*$" {print $2; exit}' /proc/cpuinfo; }
vendor="$(field vendor_id)"
family="$(field 'cpu family')"
model="$(field model)"
flags=" $(field flags) "
has() { [[ "$flags" == *" $1 "* ]]; }
case "$vendor-$family" in
AuthenticAMD-23) class=zen2 ;;
AuthenticAMD-25) if has avx512f; then class=zen4; else class=zen3; fi ;;
AuthenticAMD-26) class=zen5 ;;
GenuineIntel-6)
  if has amx_tile; then class=sapphire-rapids
  elif has avx512f; then class=intel-avx512
  else class=intel-avx2; fi ;;
*) class="$(echo "$vendor-$family-$model" | tr -c 'A-Za-z0-9\n-' -)" ;;
esac
dir="bench/results/$class"
mkdir -p "$dir"
if [ ! -f "$dir/class.txt" ]; then
  isa=AVX2
  has avx512f && isa=AVX-512
  for f in avx512_bf16 avx512_fp16 amx_tile; do has "$f" && isa="$isa + $f"; done
  l2="$(lscpu | awk -F': *' '/^L2 cache/ {print $2; exit}')"
  echo "$(field 'model name') ($vendor family $family model $model; $isa;" \
    "L2 $l2; $(nproc) vCPUs)" > "$dir/class.txt"
fi
echo "$dir"
