#!/usr/bin/env bash
# The soak: NAT, load balancer and flow counter (configs/soak.toml) on the virtual NIC in virtual
# time, random traffic over many flows, release build, for many packets; then the checks a long
# run must pass. Exits 1 on a violation, 2 when the run itself failed.
#
#   scripts/soak.sh                # 10^9 packets
#   scripts/soak.sh 5000000        # a quick run (CI runs this)
#
# Environment: SOAK_MODE (datapath mode, default nic-inline), SOAK_SET (extra `--set` words,
# space separated, e.g. "vnic.rx_ring=256"), SOAK_INTERVAL (seconds between RSS samples).
#
# Checks, from the `--json` summary and /proc/<pid>/status sampled while the run goes on:
# - every pool ends with zero buffers in use (`pools[].in_use`);
# - memory is flat after warm-up: the resident set (VmRSS plus HugetlbPages, since the large
#   flow tables sit on hugetlb pages that VmRSS leaves out) at its highest in the last quarter of
#   the packets is at most 4 MiB or 2 % above its highest in the second quarter (the first
#   quarter is warm-up: flow tables filling as the flows first appear). Each sample is paired
#   with the packets received so far, from the run's live stats line, so the setup before the
#   first packet (allocating the tables) is never mistaken for growth;
# - counters add up: frames sent by the generator = packets_rx + rx_missed + pcie_overrun +
#   rx_oversize + desc_errors + faults.link_down_drops + faults.reset_rx_drops, packets_rx =
#   packets_tx (frames put on the wire) + the drops by reason (without the two before Rx) +
#   faults.tx_dma_errors + faults.sq_error_drops + faults.reset_tx_drops, frames
#   received by the checking sink = packets_tx, and 0 payload mismatches.
# With injected faults (e.g. SOAK_SET="vnic.faults.rx_desc_every=10000
# vnic.faults.tx_dma_every=10000 vnic.faults.doorbell_lost_every=1000
# vnic.faults.link_down_every=1000000") the report adds the fault counters.
# The flow count scales with the packets (packets / 1000, 1 000 to 1 000 000; uniform flow
# choice reaches all of them within ~flows x ln(flows) packets), so a quick run warms up too.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKETS=${1:-1000000000}
case "$PACKETS" in
  '' | *[!0-9]*) echo "usage: $0 [packets]  (a positive integer, default 1000000000)" >&2; exit 2 ;;
esac
[ "$PACKETS" -gt 0 ] || { echo "$0: packets must be at least 1" >&2; exit 2; }
MODE=${SOAK_MODE:-nic-inline}
FLOWS=$((PACKETS / 1000))
[ "$FLOWS" -ge 1000 ] || FLOWS=1000
[ "$FLOWS" -le 1000000 ] || FLOWS=1000000
if [ -z "${SOAK_INTERVAL:-}" ]; then
  if [ "$PACKETS" -ge 100000000 ]; then SOAK_INTERVAL=1; else SOAK_INTERVAL=0.02; fi
fi

cargo build -q --release --bin dataplane
BIN=${CARGO_TARGET_DIR:-target}/release/dataplane
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
SETS=(--set "traffic.flows=$FLOWS" --set "run.stats_interval_s=$SOAK_INTERVAL")
for s in ${SOAK_SET:-}; do SETS+=(--set "$s"); done

start=$(date +%s.%N)
"$BIN" run configs/soak.toml --packets "$PACKETS" --mode "$MODE" "${SETS[@]}" --json \
  >"$DIR/summary.json" 2>"$DIR/stderr" &
pid=$!
# One line per sample: seconds since start, VmRSS kB, HugetlbPages kB, packets received so far
# (from the latest live stats line).
while kill -0 "$pid" 2>/dev/null; do
  if s=$(awk '/^VmRSS:/ {r=$2} /^HugetlbPages:/ {h=$2} END {if (r != "") print r, h+0}' \
    "/proc/$pid/status" 2>/dev/null) && [ -n "$s" ]; then
    rx=$(grep -a '^\[' "$DIR/stderr" 2>/dev/null | tail -n 1 | sed -n 's/.*| rx \([0-9]*\) |.*/\1/p' || true)
    echo "$(date +%s.%N) $s ${rx:-0}" >>"$DIR/rss"
  fi
  sleep "$SOAK_INTERVAL"
done
rc=0
wait "$pid" || rc=$?
wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')
if [ "$rc" -ne 0 ]; then
  echo "soak: dataplane run failed (rc $rc):" >&2
  cat "$DIR/stderr" >&2
  exit 2
fi
touch "$DIR/rss"

python3 - "$DIR/summary.json" "$DIR/rss" "$PACKETS" "$MODE" "$FLOWS" "$wall" "$start" <<'EOF'
import json
import sys

summary, rss_file, packets, mode, flows, wall, start = sys.argv[1:]
s = json.load(open(summary))
bad = []

# Pools: every buffer back.
leaked = sum(p["in_use"] for p in s["pools"])
for p in s["pools"]:
    if p["in_use"]:
        bad.append(f"pool {p['name']}: {p['in_use']} buffers still in use after the run")

# Counters.
drops = s["drops"]
before_rx = drops.get("rx_missed", 0) + drops.get("pcie_overrun", 0)
after_rx = sum(drops.values()) - before_rx
rx, tx = s["packets_rx"], s["packets_tx"]
sent, received = s["traffic"]["sent"], s["traffic"]["received"]
if sent != int(packets):
    bad.append(f"the generator sent {sent} frames, not {packets}")
faults = s.get("faults", {})
link_down = faults.get("link_down_drops", 0) + faults.get("reset_rx_drops", 0)
dma = sum(faults.get(k, 0) for k in ("tx_dma_errors", "sq_error_drops", "reset_tx_drops"))
arrived = rx + before_rx + s["rx_oversize"] + s["desc_errors"] + link_down
if sent != arrived:
    bad.append(f"sent {sent} != packets_rx + rx_missed + pcie_overrun + rx_oversize + desc_errors"
               f" + faults.link_down_drops + faults.reset_rx_drops = {arrived}")
if rx != tx + after_rx + dma:
    bad.append(f"packets_rx {rx} != packets_tx {tx} + drops {after_rx} + faults.tx_dma_errors"
               f" + sq_error_drops + reset_tx_drops {dma}")
if received != tx:
    bad.append(f"the sink received {received} frames, packets_tx is {tx}")
if s["payload_mismatches"]:
    bad.append(f"{s['payload_mismatches']} payload mismatches")

# Memory: flat after warm-up.
samples = []
for line in open(rss_file):
    t, r, h, n = line.split()
    samples.append((int(n), (int(r) + int(h)) * 1024))
early = late = None
if samples:
    total = int(packets)
    q2 = [m for n, m in samples if total / 4 <= n < total / 2]
    q4 = [m for n, m in samples if n >= 3 * total / 4]
    if len(q2) >= 2 and len(q4) >= 2:
        early, late = max(q2), max(q4)
        allowed = max(4 << 20, early // 50)
        if late > early + allowed:
            bad.append(f"memory grew after warm-up: {early >> 20} MiB -> {late >> 20} MiB")
if early is None:
    bad.append(f"too few memory samples in the 2nd and last quarters of the packets ({len(samples)} in all):"
               " run longer or lower SOAK_INTERVAL")

mib = lambda b: "-" if b is None else f"{b / (1 << 20):.1f} MiB"
nz = {k: v for k, v in drops.items() if v}
print(f"soak: {packets} packets, mode {mode}, {flows} flows, {float(wall):.1f} s wall, "
      f"{s['elapsed_s']:.3f} s model time")
print(f"  rx {rx} tx {tx} drops {nz or 'none'}  sink received {received}  payload mismatches {s['payload_mismatches']}")
print(f"  buffers in use after the run: {leaked} (pools {', '.join(p['name'] for p in s['pools'])})")
print(f"  memory (VmRSS + HugetlbPages): peak in the 2nd quarter of the packets {mib(early)}, in the last {mib(late)}, "
      f"{len(samples)} samples")
if faults:
    fc = {k: v for k, v in faults.items() if k != "queues"}
    print(f"  faults: {fc}  desc_errors {s['desc_errors']}")
nfs = s.get("nfs", {})
for name in ("nat", "lb", "flow-counter"):
    if name in nfs:
        n = nfs[name]
        print(f"  {name}: packets {n.get('packets')} dropped {n.get('dropped')}")
if bad:
    for b in bad:
        print(f"  VIOLATION: {b}")
    sys.exit(1)
print("  ok")
EOF
