#!/usr/bin/env bash
# The worked example of README's "How to add an ABI field": adding a tensor
# to the ABI touches the ABI model only (abi.h's struct and table, one row
# in AbiModel.cpp) plus the kernel math that reads it -- here none, the
# tensor is read by no kernel. Checks that the patch still applies to this
# tree and touches nothing else. (Applied and built, it was run end to end:
# see the git log of bench/RESULTS.md, "ABI worked example".)
set -euo pipefail
src="$1"
patch="$src/test/abi/add-tensor.patch"
if ! git -C "$src" rev-parse --git-dir > /dev/null 2>&1; then
  echo "not a git checkout: skipped"
  exit 77
fi
git -C "$src" apply --check "$patch"
files=$(git -C "$src" apply --numstat "$patch" | awk '{print $3}' | sort)
allowed=$'runtime/include/mhagen/abi.h\nruntime/src/AbiModel.cpp'
if [ "$files" != "$allowed" ]; then
  echo "the worked example touches more than the ABI model:"
  echo "$files"
  exit 1
fi
git -C "$src" apply --stat "$patch"
echo "worked example applies; it touches only the ABI model"
