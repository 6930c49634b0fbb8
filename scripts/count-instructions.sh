#!/usr/bin/env bash
# The deterministic cost table: instructions per packet of nmdp's packet paths, counted with
# cachegrind (valgrind), not timed. Each row runs its driver twice with different packet counts
# and divides the difference of the instruction totals by the difference of the counts, so setup
# (ports, pools, flow tables populated with 1 M flows) cancels out. Instruction counts do not
# swing with the load of a shared machine, so a change of a few percent is real.
#
#   scripts/count-instructions.sh                      # print the table
#   scripts/count-instructions.sh --check FILE         # also fail if a row rose >10 % above FILE
#   scripts/count-instructions.sh --write FILE         # print and save as the new baseline
#
# Rows: the virtual NIC's io-fwd per mode (accounting on; `timed` adds the timing layer),
# macswap on the virtual NIC, the NAT and the LB alone at 1 M flows (64 B, random flows, every
# packet a hit of a live flow: nf_count fails when the NF drops one), and,
# where libdpdk-dev is installed, DPDK io-fwd and macswap on 2x net_null (whole process, EAL
# without hugepages). Needs valgrind (apt-get install valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=print FILE=
case "${1:-}" in
  --check) MODE=check FILE=${2:?--check needs a baseline file} ;;
  --write) MODE=write FILE=${2:?--write needs a file} ;;
  "") ;;
  *) echo "usage: $0 [--check FILE | --write FILE]" >&2; exit 2 ;;
esac
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 2; }
T=${CARGO_TARGET_DIR:-target}/release
cargo build -q --release -p dataplane --example iofwd_count
cargo build -q --release -p nfs --example nf_count
DPDK=0
if pkg-config --exists libdpdk 2>/dev/null; then
  cargo build -q --release --features dpdk --bin dataplane
  DPDK=1
fi

# instructions <args...>: total instructions of one run.
instructions() {
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null "$@" 2>&1 >/dev/null \
    | awk '/I[ ]+refs:/ {gsub(",", "", $4); print $4}'
}

# row NAME A B PER CMD...: CMD with the packet count substituted for the word PACKETS, run with
# A and B packets; PER packets are forwarded per counted packet (2 for two-port DPDK runs).
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
row() {
  local name=$1 a=$2 b=$3 per=$4; shift 4
  local ia ib
  ia=$(instructions "${@/PACKETS/$a}")
  ib=$(instructions "${@/PACKETS/$b}")
  local v=$(( (ib - ia) / ((b - a) * per) ))
  printf '%-28s %6d\n' "$name" "$v" | tee -a "$OUT"
}

echo "# instructions per packet (cachegrind, difference of two packet counts)"
for m in host split nic-payload nic-inline; do
  row "vnic-iofwd-$m" 100000 300000 1 "$T/examples/iofwd_count" "$m" 60 PACKETS
done
for m in host nic-inline; do
  row "vnic-iofwd-$m-timed" 100000 300000 1 "$T/examples/iofwd_count" "$m" 60 PACKETS timed
done
for m in host nic-inline; do
  row "vnic-macswap-$m" 100000 300000 1 "$T/examples/nf_count" vnic-macswap "$m" PACKETS
done
row "nf-nat-1M" 100000 300000 1 "$T/examples/nf_count" nat 1000000 PACKETS
row "nf-lb-1M" 100000 300000 1 "$T/examples/nf_count" lb 1000000 PACKETS
if [ "$DPDK" = 1 ]; then
  for nf in io_fwd macswap; do
    # --packets caps what each of the two ports receives: 2 packets forwarded per count.
    row "dpdk-$nf-net_null" 100000 300000 2 "$T/dataplane" run configs/dpdk-null.toml \
      --packets PACKETS --set run.duration_s=0 --set run.stats_interval_s=0 \
      --set 'dpdk.worker_cores=[]' --set "pipeline=[{name=\"$nf\"}]" -q
  done
fi

case "$MODE" in
  write)
    { echo "# baseline of scripts/count-instructions.sh: instructions per packet; CI fails a row"
      echo "# that rises more than 10 % above its figure here (rewrite with --write when a change"
      echo "# makes a path deliberately costlier, and say why in the commit)"
      cat "$OUT"; } > "$FILE"
    echo "baseline written to $FILE" ;;
  check)
    fail=0
    while read -r name v; do
      base=$(awk -v n="$name" '$1 == n {print $2}' "$FILE")
      if [ -z "$base" ]; then
        echo "note: $name has no baseline in $FILE"
      elif [ "$v" -gt $(( base * 110 / 100 )) ]; then
        echo "FAIL: $name $v instructions/packet, more than 10 % above the baseline $base" >&2
        fail=1
      fi
    done < "$OUT"
    [ "$fail" = 0 ] && echo "every row within 10 % of $FILE"
    exit "$fail" ;;
esac
