#!/usr/bin/env bash
# Side-by-side benchmark: pktgen's DPDK generator (`pktgen dpdk-gen`) vs `dpdk-testpmd
# --forward-mode=txonly`, on the same single net_null vdev: 64 B frames (60 B + FCS), burst 32,
# the Tx loop on core 1 (EAL main lcore 0), no hugepages. Runs alternate (A B A B ...) so that
# drift on a shared machine hits both.
#
#   cargo build --release --features dpdk --bin pktgen
#   scripts/bench-dpdk-txonly.sh [ROUNDS] [SECONDS]
#
# Both sides count the same thing, frames the PMD accepted: testpmd's Tx-pps is the rate of the
# port's `opackets`; ours is the rate of frames `rte_eth_tx_burst` took (its summary prints the
# port's `opackets` too, and they are equal). Each run prints a sample per second; the first
# second (warm-up) is dropped and the median of the rest is the run's figure. Reported: the
# median over rounds of each side and the median of the per-round ratios ours/testpmd, for one
# flow (testpmd's default) and for 1024 flows (testpmd `--txonly-multi-flow`, which varies the
# source address per frame). Needs dpdk-testpmd (Debian: apt-get install dpdk-dev).
#
# The generator alone (no DPDK, frames into a buffer and into the virtual NIC):
#   cargo bench -p pktgen --bench generator
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
SECS=${2:-5}
BIN=${PKTGEN_BIN:-${CARGO_TARGET_DIR:-target}/release/pktgen}
command -v dpdk-testpmd >/dev/null || { echo "dpdk-testpmd not found (apt-get install dpdk-dev)"; exit 2; }
[ -x "$BIN" ] || { echo "$BIN not built (cargo build --release --features dpdk --bin pktgen)"; exit 2; }
# HUGE=1 runs both sides on 2 MiB hugepages (mount hugetlbfs and reserve pages first, e.g.
# `echo 512 > /proc/sys/vm/nr_hugepages`); the default is --no-huge, as in CI.
NOHUGE='"--no-huge",'; NOHUGE_ARG=--no-huge
if [ "${HUGE:-0}" = 1 ]; then NOHUGE=; NOHUGE_ARG=; fi
EAL="-l 0,1 $NOHUGE_ARG -m 512 --no-pci --no-shconf --no-telemetry --log-level=*:warning"

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print 0; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

ours() { # $1 = flows
  { "$BIN" dpdk-gen configs/dpdk-txgen.toml --duration "$SECS" --flows "$1" \
      --set "dpdk.eal_args=[\"-l\",\"0\",$NOHUGE\"-m\",\"512\",\"--no-pci\",\"--no-shconf\",\"--no-telemetry\",\"--file-prefix=nmdp-txgen-$$\",\"--log-level=*:warning\"]" \
      2>&1 || true; } \
    | sed -n 's/^\[ *\([0-9.]*\)s\] *\([0-9.]*\) Mpps.*/\1 \2/p' | awk '$1 > 1.5 {print $2}' | median
}

testpmd() { # $@ = extra testpmd options
  # testpmd runs until interrupted; timeout's exit status (124) is expected. Its first Tx-pps
  # line comes before forwarding starts (0) and the second covers the warm-up second.
  { timeout -s INT "$((SECS + 2))" dpdk-testpmd $EAL --file-prefix="tpmd-txonly-$$" \
      --vdev=net_null0 -- --total-num-mbufs=16384 --forward-mode=txonly --port-topology=loop \
      --txpkts=60 --burst=32 --stats-period=1 --auto-start "$@" </dev/null 2>&1 || true; } \
    | awk '/Tx-pps:/ {print $2 / 1e6}' | tail -n +3 | median
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "dpdk: $(pkg-config --modversion libdpdk 2>/dev/null || echo '?'); rounds $ROUNDS x ${SECS}s; 64 B, burst 32, Tx on core 1; hugepages: $([ -n "$NOHUGE_ARG" ] && echo no || echo 2M)"
for pair in "1 -" "1024 --txonly-multi-flow"; do
  set -- $pair
  flows=$1; extra=$2; [ "$extra" = "-" ] && extra=""
  A=(); B=(); R=()
  for i in $(seq "$ROUNDS"); do
    a=$(ours "$flows"); b=$(testpmd $extra)
    # A run that printed no per-second line (a failed start, a changed format) is an error, not 0.
    [ "$a" != 0 ] || { echo "error: no throughput read from pktgen dpdk-gen ($flows flows)" >&2; exit 1; }
    [ "$b" != 0 ] || { echo "error: no throughput read from dpdk-testpmd --forward-mode=txonly" >&2; exit 1; }
    A+=("$a"); B+=("$b"); R+=("$(awk -v a="$a" -v b="$b" 'BEGIN {print (b > 0) ? a / b : 0}')")
    echo "  round $i: pktgen dpdk-gen ($flows flows) $a Mpps | testpmd txonly ${extra:-(1 flow)} $b Mpps"
  done
  ma=$(printf '%s\n' "${A[@]}" | median); mb=$(printf '%s\n' "${B[@]}" | median); mr=$(printf '%s\n' "${R[@]}" | median)
  printf '%5s flows: pktgen %.2f Mpps  testpmd %.2f Mpps  ratio (median of pairs) %.3f\n' "$flows" "$ma" "$mb" "$mr"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
