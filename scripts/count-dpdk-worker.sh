#!/usr/bin/env bash
# Instructions per forwarded packet of the forwarding thread alone, side by side: the worker of
# nmdp's `dataplane run` (io_fwd, macswap) and dpdk-testpmd's forwarding lcore (io, macswap), on
# the same two net_null vdevs (64 B frames, burst 32, no hugepages). Instruction counts do not
# swing with the load of a shared machine, unlike the wall-clock figures of bench-dpdk-null.sh.
#
#   cargo build --release --features dpdk
#   scripts/count-dpdk-worker.sh [PACKETS] [SECONDS]
#   VECTOR=32 scripts/count-dpdk-worker.sh    # nmdp asking the PMD for 32 a pass (`dpdk.vector`)
#   TESTPMD_BURST=64 scripts/count-dpdk-worker.sh   # testpmd asking for 64 a call (`--burst`)
#
# callgrind --separate-threads writes one profile per thread; in both programs the third thread
# is the forwarding one (the first is the main thread, which runs EAL's setup, the second EAL's
# interrupt thread). nmdp stops after PACKETS per port (2 x PACKETS forwarded); testpmd runs
# SECONDS under callgrind and is divided by the packets its accumulated statistics report.
# Needs valgrind and dpdk-testpmd (apt-get install valgrind dpdk-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
PACKETS=${1:-300000}
SECS=${2:-30}
BIN=${DATAPLANE_BIN:-${CARGO_TARGET_DIR:-target}/release/dataplane}
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)"; exit 2; }
command -v dpdk-testpmd >/dev/null || { echo "dpdk-testpmd not found (apt-get install dpdk-dev)"; exit 2; }
[ -x "$BIN" ] || { echo "$BIN not built (cargo build --release --features dpdk)"; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# thread3 FILE: instructions of the third thread's profile.
thread3() { awk '/^summary:/ {print $2}' "$1-03"; }

for pair in "io_fwd io" "macswap macswap"; do
  set -- $pair
  valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$TMP/nmdp" \
    "$BIN" run configs/dpdk-null.toml --packets "$PACKETS" --set run.duration_s=0 \
    --set run.stats_interval_s=0 --set 'dpdk.worker_cores=[]' \
    --set "pipeline=[{name=\"$1\"}]" ${VECTOR:+--set "dpdk.vector=$VECTOR"} -q >/dev/null 2>&1
  ours=$(awk -v w="$(thread3 "$TMP/nmdp")" -v n="$PACKETS" 'BEGIN {printf "%.1f", w / (2 * n)}')
  # testpmd runs until interrupted; timeout's exit status (124) is expected.
  timeout -s INT "$SECS" valgrind --tool=callgrind --separate-threads=yes \
    --callgrind-out-file="$TMP/tpmd" dpdk-testpmd -l 0,1 --no-huge -m 512 --no-pci --no-shconf \
    --no-telemetry --file-prefix="tpmd-count-$$" --log-level='*:warning' \
    --vdev=net_null0 --vdev=net_null1 -- --total-num-mbufs=16384 --forward-mode="$2" \
    ${TESTPMD_BURST:+--burst=$TESTPMD_BURST} --no-flush-rx --auto-start </dev/null >"$TMP/tpmd.log" 2>&1 || true
  fwd=$(awk '/Accumulated forward statistics/ {a = 1} a && /RX-packets:/ {print $2; exit}' "$TMP/tpmd.log")
  theirs=$(awk -v w="$(thread3 "$TMP/tpmd")" -v n="${fwd:-0}" 'BEGIN {if (n > 0) printf "%.1f", w / n; else print "?"}')
  printf '%-8s nmdp %s  testpmd %s instructions per packet\n' "$1" "$ours" "$theirs"
  rm -f "$TMP"/nmdp* "$TMP"/tpmd*
done
