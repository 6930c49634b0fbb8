#!/usr/bin/env bash
# Builds and runs every cargo-fuzz target in fuzz/ (libFuzzer, AddressSanitizer, release build
# with debug assertions and overflow checks), one target after another at the lowest CPU
# priority, and prints the inputs executed and the crashes found per target. Exits 1 when any
# target crashed (the input is kept under fuzz/artifacts/<target>/), 2 when the tools are
# missing or a build failed.
#
#   scripts/fuzz.sh              # 60 seconds per target
#   scripts/fuzz.sh 600          # 600 seconds per target
#   scripts/fuzz.sh --inputs N   # N inputs per target
#
# Needs a nightly toolchain (`rustup toolchain install nightly`) and cargo-fuzz
# (`cargo install cargo-fuzz`); the workspace itself builds on stable. Environment:
# FUZZ_TARGETS (space-separated subset, default every target of `cargo fuzz list`).
# Corpora grow in fuzz/corpus/<target>/ and are reused by the next run; the config and pcap
# targets start from the shipped configs and the golden pcaps.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() {
  echo "usage: $0 [seconds-per-target | --inputs N]" >&2
  exit 2
}
LIMIT=(-max_total_time=60)
case "${1:-}" in
  '') ;;
  --inputs)
    [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || usage
    LIMIT=(-runs="$2")
    ;;
  *)
    [[ "$1" =~ ^[1-9][0-9]*$ ]] || usage
    LIMIT=(-max_total_time="$1")
    ;;
esac
cargo +nightly --version >/dev/null 2>&1 || {
  echo "$0: no nightly toolchain (rustup toolchain install nightly)" >&2
  exit 2
}
cargo +nightly fuzz --version >/dev/null 2>&1 || {
  echo "$0: cargo-fuzz is not installed (cargo install cargo-fuzz)" >&2
  exit 2
}
cd fuzz
TARGETS=${FUZZ_TARGETS:-$(cargo +nightly fuzz list)}
nice -n 19 cargo +nightly fuzz build || exit 2

# Seeds: the shipped configs for the config target, the golden pcaps (after the target's
# selector byte) for the pcap target.
mkdir -p corpus/config corpus/pcap_read
for c in ../configs/*.toml ../configs/*/*.toml; do
  [ -f "$c" ] && cp -n "$c" "corpus/config/$(basename "$(dirname "$c")")-$(basename "$c")"
done
for p in ../tests/golden/*.pcap; do
  [ -f "$p" ] && { [ -f "corpus/pcap_read/$(basename "$p")" ] ||
    { printf '\x05'; cat "$p"; } >"corpus/pcap_read/$(basename "$p")"; }
done

LOGDIR=$(mktemp -d)
total=0
crashed=0
printf '%-10s %14s %8s %10s\n' target inputs crashes seconds
for t in $TARGETS; do
  mkdir -p "corpus/$t" "artifacts/$t"
  before=$(find "artifacts/$t" -type f | wc -l)
  start=$(date +%s)
  rc=0
  nice -n 19 cargo +nightly fuzz run "$t" "corpus/$t" -- "${LIMIT[@]}" -print_final_stats=1 \
    >"$LOGDIR/$t.log" 2>&1 || rc=$?
  secs=$(($(date +%s) - start))
  runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$LOGDIR/$t.log" | tail -1)
  after=$(find "artifacts/$t" -type f | wc -l)
  crashes=$((after - before))
  if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then
    echo "$t: libFuzzer exited $rc without an artifact; its log:" >&2
    tail -40 "$LOGDIR/$t.log" >&2
    crashes=1
  elif [ "$crashes" -gt 0 ]; then
    echo "$t: crash, input in fuzz/artifacts/$t/; the log:" >&2
    grep -m 20 -A 20 -E 'panicked|ERROR: (AddressSanitizer|libFuzzer)' "$LOGDIR/$t.log" >&2 || true
  fi
  printf '%-10s %14s %8s %10s\n' "$t" "${runs:-0}" "$crashes" "$secs"
  total=$((total + ${runs:-0}))
  crashed=$((crashed + crashes))
done
printf '%-10s %14s %8s\n' total "$total" "$crashed"
rm -rf "$LOGDIR"
[ "$crashed" -eq 0 ] || exit 1
