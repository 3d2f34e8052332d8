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
JOBS="${MHAGEN_JOBS:-$(nproc)}"
mkdir -p "$BUILD_DIR/fuzz-crashes"

# One target: its corpus copied to a scratch folder, its exit status left
# in <name>.rc next to its log.
fuzz_one() {
  local name="$1" work="$BUILD_DIR/fuzz-work/$1"
  rm -rf "$work" && mkdir -p "$work"
  cp test/fuzz/corpus/"$name"/* "$work"/
  local rc=0
  "$BUILD_DIR/test/fuzz/fuzz_$name" -max_total_time="$SECONDS_EACH" \
    -max_len=8192 -print_final_stats=1 -seed="$SEED" \
    -artifact_prefix="$BUILD_DIR/fuzz-crashes/$name-" "$work" \
    > "$BUILD_DIR/fuzz-work/$name.log" 2>&1 || rc=$?
  echo "$rc" > "$BUILD_DIR/fuzz-work/$name.rc"
}

# Each target is single-threaded: they run $JOBS at a time, so the time
# taken is SECONDS per batch, not per target.
targets=(spec_parser manifest elf_check call_validation)
running=0
for name in "${targets[@]}"; do
  fuzz_one "$name" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait
failed=0
for name in "${targets[@]}"; do
  log="$BUILD_DIR/fuzz-work/$name.log"
  rc="$(cat "$BUILD_DIR/fuzz-work/$name.rc")"
  echo "== fuzz_$name for ${SECONDS_EACH} s =="
  grep -E '^(Done [0-9]+ runs|stat::number_of_executed_units|stat::new_units_added|INFO: seed corpus)' "$log" || true
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$log"
    echo "fuzz_$name failed (exit $rc); the input is in $BUILD_DIR/fuzz-crashes/"
    failed=1
  fi
done
exit "$failed"
