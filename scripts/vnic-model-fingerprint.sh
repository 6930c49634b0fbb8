#!/usr/bin/env bash
# The virtual NIC model's results over a matrix of virtual-clock runs, as one normalised JSON
# line per run: every summary field except the ones that depend on the wall clock. Speed work on
# the virtual NIC (its rings, its accounting, the timing layer's timelines) must leave every
# line the same, so run this with the binary before and after a change and compare:
#
#   scripts/vnic-model-fingerprint.sh /tmp/dataplane.before > before.txt
#   scripts/vnic-model-fingerprint.sh target/release/dataplane > after.txt
#   diff before.txt after.txt && echo same
#
# The matrix: every datapath mode at 64, 700 and 1518 B with io-fwd and macswap (at the
# profile's line rate, and pulled as fast as the NIC takes them), the NAT, a 200 Gb/s Gen4
# profile, host-memory misses (a small LLC, paced and pulled), compressed completions, two
# queues, and injected faults (at 700 B and at 64 B, where every mode receives frames whole
# into their header buffers).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:?usage: $0 DATAPLANE_BINARY}
N=${PACKETS:-20000}

# Fields that measure the machine, not the model: wall-clock time and rates, and the two-queue
# runs' arrival order at the sink (the queues' workers interleave as the OS schedules them).
normalise() {
  python3 -c '
import json, sys
WALL = {"elapsed_s", "wall_s", "cpu_s", "wall_mpps", "mpps_per_worker_core", "wall_clock",
        "reordered", "started_at", "hostname", "pid"}
def strip(o):
    if isinstance(o, dict):
        return {k: strip(v) for k, v in o.items() if k not in WALL}
    if isinstance(o, list):
        return [strip(v) for v in o]
    return o
print(json.dumps(strip(json.load(sys.stdin)), sort_keys=True))'
}

one() {
  local name=$1; shift
  printf '%s ' "$name"
  "$BIN" run configs/default.toml --packets "$N" --json -q \
    --set run.clock='"virtual"' --set run.stats_interval_s=0 "$@" 2>/dev/null | normalise
}

for mode in host split nic-payload nic-inline; do
  for size in 64 700 1518; do
    for nf in io_fwd macswap; do
      one "$mode-$size-$nf" --mode "$mode" --set traffic.frame_size=$size \
        --set "pipeline=[{name=\"$nf\"}]"
    done
    one "$mode-$size-pulled" --mode "$mode" --set traffic.frame_size=$size \
      --set traffic.rate_gbps=0 --set 'pipeline=[{name="io_fwd"}]'
  done
  one "$mode-paced-60" --mode "$mode" --set traffic.frame_size=64 --set traffic.rate_gbps=60
  one "$mode-gen4" --mode "$mode" --set traffic.frame_size=64 --set nic.profile='"cx6dx-gen4x16-200g"'
  one "$mode-nat" --mode "$mode" --set traffic.frame_size=64 --set 'pipeline=[{name="nat"}]'
  one "$mode-llc" --mode "$mode" --set traffic.frame_size=1518 --set host.llc_size='"1MiB"' --set host.ddio_ways=1
  one "$mode-llc-pulled" --mode "$mode" --set traffic.frame_size=1518 --set traffic.rate_gbps=0 \
    --set host.llc_size='"1MiB"' --set host.ddio_ways=1
  one "$mode-cqe-zip" --mode "$mode" --set traffic.frame_size=64 --set traffic.rate_gbps=0 \
    --set nic.descriptors.cqe_compression=true
  one "$mode-2q" --mode "$mode" --set traffic.frame_size=64 --workers 2
  one "$mode-faults" --mode "$mode" --set traffic.frame_size=700 --set traffic.rate_gbps=0 \
    --set vnic.faults.seed=4 --set vnic.faults.link_down_every=5000 \
    --set vnic.faults.link_down_frames=40 --set vnic.faults.rx_desc_every=500 \
    --set vnic.faults.tx_dma_every=500 --set vnic.faults.doorbell_lost_every=20 \
    --set vnic.faults.reset_every=3000
  # Small frames: every mode receives them whole into header buffers, faults included.
  one "$mode-faults-64" --mode "$mode" --set traffic.frame_size=64 --set traffic.rate_gbps=0 \
    --set vnic.faults.seed=9 --set vnic.faults.rx_desc_every=300 \
    --set vnic.faults.tx_dma_every=700 --set vnic.faults.doorbell_lost_every=30
done
