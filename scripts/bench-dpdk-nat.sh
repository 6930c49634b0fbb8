#!/usr/bin/env bash
# Side-by-side benchmark: nmdp's NAT (1 M flows, 64 B frames) on DPDK against dpdk-testpmd's
# macswap, on the same vdev: one net_pcap port that replays a pcap of 1 M UDP flows without end
# (`infinite_rx=1`) and, having no Tx file, frees what it transmits. net_null carries no IPv4
# flows, so a NAT on it would only drop; this is the like-for-like source of real flows.
#
#   cargo build --release --features dpdk
#   scripts/bench-dpdk-nat.sh [ROUNDS] [SECONDS]
#
# The pcap (1 M frames, one per flow, 64 B with FCS: 16.1.1.1 upward to 48.1.1.1-4, UDP) is
# written once by `pktgen gen` to $PCAP (default /tmp/nmdp-nat-1m.pcap). net_pcap holds every
# frame of it in an mbuf of the Rx pool, so both programs get 1.1 M mbufs (about 2.6 GB; no
# hugepages: EAL -m 6144) and take some seconds to load the file before forwarding. Each
# replayed frame is copied into a fresh mbuf by the PMD, on both sides.
#
# Same forwarding core (1; EAL main lcore 0), burst 32, runs alternating (A B A B ...). Each run
# prints a throughput sample per second; the first WARMUP seconds (default 3: the NAT creates
# its 1 M sessions in the first pass over the file) are dropped and the median of the rest is
# the run's figure. Reported: the median over rounds and the ratio nmdp NAT / testpmd macswap
# (median of pairs).
# Needs dpdk-testpmd (Debian: apt-get install dpdk-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECS=${2:-10}
WARMUP=${WARMUP:-3}
FLOWS=1000000
PCAP=${PCAP:-/tmp/nmdp-nat-1m.pcap}
BIN=${DATAPLANE_BIN:-${CARGO_TARGET_DIR:-target}/release/dataplane}
PKTGEN=${PKTGEN_BIN:-${CARGO_TARGET_DIR:-target}/release/pktgen}
command -v dpdk-testpmd >/dev/null || { echo "dpdk-testpmd not found (apt-get install dpdk-dev)"; exit 2; }
[ -x "$BIN" ] || { echo "$BIN not built (cargo build --release --features dpdk)"; exit 2; }
if [ ! -s "$PCAP" ]; then
  [ -x "$PKTGEN" ] || { echo "$PKTGEN not built (cargo build --release)"; exit 2; }
  "$PKTGEN" gen --frame-size 64 --flows "$FLOWS" --flow-dist round-robin --count "$FLOWS" -o "$PCAP"
fi
MBUFS=1100000
VDEV="net_pcap0,rx_pcap=$PCAP,infinite_rx=1"

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print 0; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT

ours() {
  { "$BIN" run configs/dpdk-null.toml --duration "$SECS" \
      --set "dpdk.eal_args=[\"-l\",\"0\",\"--no-huge\",\"-m\",\"6144\",\"--no-pci\",\"--no-shconf\",\"--no-telemetry\",\"--file-prefix=nmdp-nat-$$\",\"--log-level=*:warning\"]" \
      --set "dpdk.ports=[{devargs=\"$VDEV\",tx_port=0}]" --set "dpdk.mbufs=$MBUFS" \
      --set "pipeline=[{name=\"nat\",nat_ips=\"10.0.0.0/26\",port_min=1024,port_max=65535,flows=$FLOWS}]" 2>&1 || true; } >"$LOG"
  sed -n 's/^\[ *\([0-9.]*\)s\] *\(rx *\)\{0,1\}\([0-9.]*\) Mpps.*/\1 \3/p' "$LOG" \
    | awk -v w="$WARMUP" '$1 > w + 0.5 {print $2}' | median
}

testpmd() {
  # testpmd runs until interrupted and prints a sample per second once the file is loaded: it
  # is stopped (SIGINT) after SECS samples.
  dpdk-testpmd -l 0,1 --no-huge -m 6144 --no-pci --no-shconf --no-telemetry \
      --file-prefix="tpmd-nat-$$" --log-level='*:warning' --vdev="$VDEV" -- \
      --total-num-mbufs="$MBUFS" --forward-mode=macswap --stats-period=1 --no-flush-rx \
      --auto-start </dev/null >"$LOG" 2>&1 &
  local pid=$! waited=0
  while [ "$(grep -c 'Rx-pps: *[1-9]' "$LOG" || true)" -lt "$SECS" ] && [ "$waited" -lt 300 ] \
      && kill -0 "$pid" 2>/dev/null; do
    sleep 1; waited=$((waited + 1))
  done
  kill -INT "$pid" 2>/dev/null || true
  wait "$pid" || true
  awk '/Rx-pps:/ && $2 > 0 {print $2 / 1e6}' "$LOG" | tail -n +"$((WARMUP + 1))" \
    | head -n "$((SECS - WARMUP))" | median
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "dpdk: $(pkg-config --modversion libdpdk 2>/dev/null || echo '?'); rounds $ROUNDS x ${SECS}s (first ${WARMUP}s dropped); $FLOWS flows, 64 B, no hugepages"
A=(); B=(); R=()
for i in $(seq "$ROUNDS"); do
  a=$(ours); b=$(testpmd)
  A+=("$a"); B+=("$b"); R+=("$(awk -v a="$a" -v b="$b" 'BEGIN {print (b > 0) ? a / b : 0}')")
  echo "  round $i: nmdp nat $a Mpps | testpmd macswap $b Mpps (load $(cut -d' ' -f1 /proc/loadavg))"
done
ma=$(printf '%s\n' "${A[@]}" | median); mb=$(printf '%s\n' "${B[@]}" | median); mr=$(printf '%s\n' "${R[@]}" | median)
printf 'nat      nmdp %.2f Mpps  testpmd macswap %.2f Mpps  ratio (median of pairs) %.3f\n' "$ma" "$mb" "$mr"
