#!/usr/bin/env bash
# nmdp between real Linux hosts in network namespaces (docs/neighbours.md).
#
#   scripts/netns-demo.sh nat [--tap] [--dpdk] [--mode MODE]   NAT: a client downloads from a server
#   scripts/netns-demo.sh lb  [--ipip] [--dpdk] [--mode MODE]  LB: 60 connections to a VIP, 3 backends
#
# Builds the namespaces (nmdp-demo-*), runs the dataplane in its own namespace on
# configs/netns-nat.toml or configs/netns-lb.toml (the DPDK variants with --dpdk), runs the
# transfer, prints what the hosts saw and the dataplane's ARP, route and neighbour counters, and
# removes everything. Needs root, iproute2, ethtool, iputils-ping, curl and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/netns.sh

what=${1:-}
shift || true
tap=0 dpdk=0 ipip=0 mode=nic-inline
while [ $# -gt 0 ]; do
  case $1 in
    --tap) tap=1 ;;
    --dpdk) dpdk=1 ;;
    --ipip) ipip=1 ;;
    --mode) mode=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
case $what in nat|lb) ;; *) sed -n '2,5p' "$0" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
need_tools ip ethtool ping curl python3

P=nmdp-demo
work=$(mktemp -d)
trap 'exec 2>/dev/null; netns_cleanup' EXIT   # no job notices for the processes killed there
netns_cleanup
mkdir -p "$work"

# veth HOST HOST_IF ADDR GW DP_IF: a host on a veth whose other end is the dataplane's
veth() {
  ip -n "$(ns dp)" link add "$5" type veth peer name "$2" netns "$(ns "$1")"
  ip -n "$(ns dp)" link set "$5" up
  host_if "$1" "$2" "$3" "$4"
  in_ns "$1" ethtool -K "$2" tx off >/dev/null   # no TSO super-frames, finished checksums
}
host_if() {
  in_ns "$1" ip addr add "$3" dev "$2"
  in_ns "$1" ip link set "$2" up
  [ "$4" = - ] || in_ns "$1" ip route add default via "$4"
}

features=()
[ $dpdk = 1 ] && features=(--features dpdk)
cargo build -q "${features[@]}" --bin dataplane
bin=$PWD/target/debug/dataplane

if [ $what = nat ]; then
  add_hosts c s dp
  cfg=configs/netns-nat.toml
  [ $dpdk = 1 ] && cfg=configs/netns-nat-dpdk.toml
  if [ $tap = 1 ]; then
    [ $dpdk = 1 ] && cfg=configs/netns-nat-dpdk-tap.toml
    [ $dpdk = 0 ] && { sed 's/afpacket:/tap:/' $cfg > "$work/nat.toml"; cfg=$work/nat.toml; }
  else
    veth c c0 10.0.1.2/24 10.0.1.1 nmdp-in
    veth s s0 10.0.2.2/24 - nmdp-out
  fi
  head -c 20000000 /dev/urandom > "$work/blob"
  in_ns s python3 -m http.server 8080 --bind 10.0.2.2 --directory "$work" > "$work/http.log" 2>&1 &
  echo "$ dataplane run $cfg --set datapath.mode=$mode   (in namespace $(ns dp))"
  in_ns dp "$bin" run "$cfg" --set datapath.mode=$mode --set run.duration_s=15 --json \
    > "$work/summary.json" 2> "$work/dataplane.log" &
  dp=$!
  if [ $tap = 1 ]; then
    wait_until 100 ip -n "$(ns dp)" link show nmdp-out || true
    ip -n "$(ns dp)" link set nmdp-in netns "$(ns c)"
    ip -n "$(ns dp)" link set nmdp-out netns "$(ns s)"
    host_if c nmdp-in 10.0.1.2/24 10.0.1.1
    host_if s nmdp-out 10.0.2.2/24 -
  fi
  wait_until 100 in_ns c curl -s -m 1 -o /dev/null http://10.0.2.2:8080/ || true
  echo "$ ping -c 3 10.0.2.2              (client namespace)"
  in_ns c ping -c 3 -i 0.2 10.0.2.2 | sed -n '2,4p'
  echo "$ ping -c 1 -t 1 10.0.2.2         (TTL 1)"
  in_ns c ping -c 1 -t 1 -W 2 10.0.2.2 | sed -n '2p' || true
  echo "$ curl -o blob http://10.0.2.2:8080/blob   (20 MB)"
  in_ns c curl -s -o "$work/got" -w '%{size_download} bytes in %{time_total} s\n' http://10.0.2.2:8080/blob
  cmp -s "$work/blob" "$work/got" && echo "byte-identical: yes" || echo "byte-identical: NO"
  echo "server log: $(grep 'GET /blob' "$work/http.log")"
  echo "$ ip neigh                        (client namespace: learned by ARP)"
  in_ns c ip neigh show 10.0.1.1
else
  add_hosts c sw b1 b2 b3 dp
  cfg=configs/netns-lb.toml
  [ $dpdk = 1 ] && cfg=configs/netns-lb-dpdk.toml
  if [ $ipip = 1 ]; then sed 's/return = "nat"/return = "ipip"/' $cfg > "$work/lb.toml"; cfg=$work/lb.toml; fi
  veth c c0 10.0.1.2/24 10.0.1.1 nmdp-in
  [ $ipip = 1 ] && in_ns c ip link set c0 mtu 1480
  in_ns sw ip link add br0 type bridge
  in_ns sw ip link set br0 up
  ip -n "$(ns dp)" link add nmdp-bk type veth peer name sw-dp netns "$(ns sw)"
  ip -n "$(ns dp)" link set nmdp-bk up
  in_ns sw ip link set sw-dp up master br0
  for i in 1 2 3; do
    ip -n "$(ns b$i)" link add b0 type veth peer name sw-b$i netns "$(ns sw)"
    in_ns sw ip link set sw-b$i up master br0
    host_if b$i b0 10.0.2.1$i/24 10.0.2.1
    in_ns b$i ethtool -K b0 tx off >/dev/null
    if [ $ipip = 1 ]; then
      in_ns b$i ip addr add 10.0.1.100/32 dev lo
      ipip_decap b$i 10.0.2.1$i b0
    fi
    in_ns b$i python3 tests/netns/lb_backend.py b$i 8080 > /dev/null 2>&1 &
  done
  echo "$ dataplane run $cfg --set datapath.mode=$mode   (in namespace $(ns dp))"
  in_ns dp "$bin" run "$cfg" --set datapath.mode=$mode --set run.duration_s=15 --json \
    > "$work/summary.json" 2> "$work/dataplane.log" &
  dp=$!
  wait_until 100 in_ns c curl -s -m 1 -o /dev/null http://10.0.1.100:8080/ || true
  echo "$ python3 tests/netns/lb_client.py 10.0.1.100 8080 60   (client namespace)"
  in_ns c python3 tests/netns/lb_client.py 10.0.1.100 8080 60
  echo "$ ip neigh show 10.0.1.100        (client namespace: the VIP, answered by nmdp)"
  in_ns c ip neigh show 10.0.1.100
fi
echo "waiting for the run to end (run.duration_s = 15) ..."
wait $dp || { cat "$work/dataplane.log" >&2; exit 1; }
python3 - "$work/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print("arp:      ", json.dumps(s["arp"]))
print("route:    ", json.dumps(s["route"]))
print("neighbors:", ", ".join(f'{n["ip"]} {n["mac"]} port {n["port"]} {n["state"]}' for n in s["neighbors"]))
drops = {k: v for k, v in s["drops"].items() if v}
print("drops:    ", drops or "none")
print("mode %s: payloads from nicmem %d, from host %d; PCIe upstream %d bytes" % (
    s["mode"], s["rx_primary"], s["rx_secondary"], s.get("pcie", {}).get("upstream_bytes", 0)))
PY
