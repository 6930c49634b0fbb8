#!/usr/bin/env bash
# Side-by-side benchmark: nmdp's DPDK io-fwd / macswap vs dpdk-testpmd's io / macswap forwarding,
# on the same two net_null vdevs (64 B frames, copy=0), the same forwarding core (1; EAL main
# lcore 0), no hugepages. Runs alternate (A B A B ...) so that drift on a shared machine hits both.
#
#   cargo build --release --features dpdk
#   scripts/bench-dpdk-null.sh [ROUNDS] [SECONDS]
#
# Each run prints a throughput sample per second; the first second (warm-up) is dropped and the
# median of the rest is the run's figure. Reported: the median over rounds and the ratio
# nmdp/testpmd per forwarding mode. Needs dpdk-testpmd (Debian: apt-get install dpdk-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
SECS=${2:-5}
BIN=${DATAPLANE_BIN:-${CARGO_TARGET_DIR:-target}/release/dataplane}
command -v dpdk-testpmd >/dev/null || { echo "dpdk-testpmd not found (apt-get install dpdk-dev)"; exit 2; }
[ -x "$BIN" ] || { echo "$BIN not built (cargo build --release --features dpdk)"; exit 2; }
# VECTOR=N sets nmdp's `dpdk.vector` (default 64: one poll asks the PMD for 64 packets; 32 asks
# for 32 a pass, testpmd's burst). TESTPMD_BURST=N runs testpmd with `--burst=N` (default 32),
# e.g. 64 to compare both sides asking the PMD for as many packets a call.
# HUGE=1 runs both sides on 2 MiB hugepages (mount hugetlbfs and reserve pages first, e.g.
# `echo 512 > /proc/sys/vm/nr_hugepages`); the default is --no-huge, as in CI.
NOHUGE='"--no-huge",'; NOHUGE_ARG=--no-huge
if [ "${HUGE:-0}" = 1 ]; then NOHUGE=; NOHUGE_ARG=; fi
EAL="-l 0,1 $NOHUGE_ARG -m 512 --no-pci --no-shconf --no-telemetry --log-level=*:warning"

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print 0; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

ours() { # $1 = nf
  { "$BIN" run configs/dpdk-null.toml --duration "$SECS" --set "dpdk.eal_args=[\"-l\",\"0\",$NOHUGE\"-m\",\"512\",\"--no-pci\",\"--no-shconf\",\"--no-telemetry\",\"--file-prefix=nmdp-bench-$$\",\"--log-level=*:warning\"]" \
      --set "pipeline=[{name=\"$1\"}]" ${VECTOR:+--set "dpdk.vector=$VECTOR"} 2>&1 || true; } \
    | sed -n 's/^\[ *\([0-9.]*\)s\] *\(rx *\)\{0,1\}\([0-9.]*\) Mpps.*/\1 \3/p' | awk '$1 > 1.5 {print $2}' | median
}

testpmd() { # $1 = forward mode
  # testpmd runs until interrupted; timeout's exit status (124) is expected.
  { timeout -s INT "$((SECS + 2))" dpdk-testpmd $EAL --file-prefix="tpmd-bench-$$" \
      --vdev=net_null0 --vdev=net_null1 -- --total-num-mbufs=16384 --forward-mode="$1" \
      ${TESTPMD_BURST:+--burst=$TESTPMD_BURST} --stats-period=1 --no-flush-rx --auto-start </dev/null 2>&1 || true; } \
    | awk '/Rx-pps:/ {s += $2; n++; if (n % 2 == 0) {print s / 1e6; s = 0}}' | tail -n +3 | median
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "dpdk: $(pkg-config --modversion libdpdk 2>/dev/null || echo '?'); rounds $ROUNDS x ${SECS}s; hugepages: $([ -n "$NOHUGE_ARG" ] && echo no || echo 2M); nmdp dpdk.vector ${VECTOR:-default}; testpmd --burst ${TESTPMD_BURST:-default}"
for pair in "io_fwd io" "macswap macswap"; do
  set -- $pair
  A=(); B=(); R=()
  for i in $(seq "$ROUNDS"); do
    a=$(ours "$1"); b=$(testpmd "$2")
    A+=("$a"); B+=("$b"); R+=("$(awk -v a="$a" -v b="$b" 'BEGIN {print (b > 0) ? a / b : 0}')")
    echo "  round $i: nmdp $1 $a Mpps | testpmd $2 $b Mpps"
  done
  ma=$(printf '%s\n' "${A[@]}" | median); mb=$(printf '%s\n' "${B[@]}" | median); mr=$(printf '%s\n' "${R[@]}" | median)
  printf '%-8s nmdp %.2f Mpps  testpmd %.2f Mpps  ratio (median of pairs) %.3f\n' "$1" "$ma" "$mb" "$mr"
done
