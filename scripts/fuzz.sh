#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS (default 600) from its corpus in
# test/fuzz/corpus/<name>, in the sanitized build (scripts/sanitize.sh
# builds it). New inputs go to a scratch copy, not to the repository; a
# crash stops the run and leaves its input under
# $MHAGEN_ASAN_BUILD_DIR/fuzz-crashes/: add it to the corpus as a
# regression test once fixed.
#   bash scripts/fuzz.sh [SECONDS]
# $MHAGEN_FUZZ_SEED fixes libFuzzer's seed (CI uses 1, so a run can be
# repeated); 0 or unset here means a random seed.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${1:-600}"
SEED="${MHAGEN_FUZZ_SEED:-0}"
BUILD_DIR="${MHAGEN_ASAN_BUILD_DIR:-build-asan}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$PWD/scripts/lsan.supp:print_suppressions=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
mkdir -p "$BUILD_DIR/fuzz-crashes"
for name in spec_parser manifest elf_check call_validation; do
  work="$BUILD_DIR/fuzz-work/$name"
  rm -rf "$work" && mkdir -p "$work"
  cp test/fuzz/corpus/"$name"/* "$work"/
  echo "== fuzz_$name for ${SECONDS_EACH} s =="
  log="$BUILD_DIR/fuzz-work/$name.log"
  set +e
  "$BUILD_DIR/test/fuzz/fuzz_$name" -max_total_time="$SECONDS_EACH" \
    -max_len=8192 -print_final_stats=1 -seed="$SEED" \
    -artifact_prefix="$BUILD_DIR/fuzz-crashes/$name-" "$work" > "$log" 2>&1
  rc=$?
  set -e
  grep -E '^(Done [0-9]+ runs|stat::number_of_executed_units|stat::new_units_added|INFO: seed corpus)' "$log" || true
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$log"
    echo "fuzz_$name failed (exit $rc); the input is in $BUILD_DIR/fuzz-crashes/"
    exit 1
  fi
done
