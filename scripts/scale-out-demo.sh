#!/usr/bin/env bash
# Scale-out: N nmdp load-balancer instances behind a router that spreads flows over them by
# ECMP, each announced over BGP by BIRD 2 while `dataplane ctl health` says it is healthy
# (docs/scale-out.md).
#
#   scripts/scale-out-demo.sh lb [N] [--drain | --host] [--exabgp] [--connections C] [--seconds S]
#
# Builds network namespaces (nmdp-so-*): a client, a router running BIRD 2 (one eBGP session
# per instance, ECMP into Linux with `merge paths`, net.ipv4.fib_multipath_hash_policy = 1), N
# nmdp instances (configs/scale-out/lb-instance.toml, AF_PACKET links, the same VIP, backends
# and Maglev table, return = "ipip"), a BGP speaker per instance (BIRD 2,
# configs/scale-out/bird-instance.conf, with scripts/scale-out-health-agent.sh; with --exabgp
# ExaBGP 4 and its healthcheck, configs/scale-out/exabgp-instance.conf), and three
# backends that decapsulate IP-in-IP and answer the client directly. Opens C (default 64)
# long-lived TCP connections to the VIP, then kills the last instance's dataplane (kill -9; its
# health agent withdraws the route), or with --host its whole host (dataplane and agent killed,
# the speaker's link silent: the router's BGP hold time withdraws it), or with --drain drains it
# (`dataplane ctl drain`), and reports: how many connections kept transferring, the seconds until
# the router withdrew the instance's route, flows per backend before and after, and whether new
# connections still work. Exits non-zero when fewer than 95 % of the connections kept
# transferring, the route was not withdrawn within the BGP hold time (3 s), a new connection
# failed, or the drained instance did not stop cleanly. Removes everything it built. Needs root,
# iproute2, ethtool, python3, curl and bird2 (bird, birdc). NMDP_DATAPLANE=PATH runs that
# binary instead of building target/debug/dataplane.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '6p' "$0" | sed 's/^# *//' >&2; exit 2; }
what=${1:-}
shift || true
n=2 drain=0 host=0 conns=64 seconds=40 speaker=bird
if [[ ${1:-} =~ ^[0-9]+$ ]]; then n=$1; shift; fi
while [ $# -gt 0 ]; do
  case $1 in
    --drain) drain=1 ;;
    --host) host=1 ;;
    --exabgp) speaker=exabgp ;;
    --connections) conns=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    *) echo "unknown option $1" >&2; usage ;;
  esac
  shift
done
case $what in
  lb) ;;
  nat) echo "scale-out-demo.sh: the NAT across instances is not in this demo yet (lb only)" >&2; exit 2 ;;
  *) usage ;;
esac
[ "$n" -ge 2 ] && [ "$n" -le 8 ] || { echo "N: 2..8 instances" >&2; exit 2; }
[ $((drain + host)) -le 1 ] || { echo "--drain or --host, not both" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
tools="ip ethtool python3 curl bird birdc"
[ $speaker = bird ] || tools="$tools exabgp"
for t in $tools; do
  command -v $t >/dev/null || { echo "needs $t (bird, birdc: apt-get install bird2)" >&2; exit 1; }
done

P=nmdp-so
VIP=10.9.0.100
HOLD_S=3
work=$(mktemp -d)
ns() { echo "$P-$1"; }
in_ns() { local h=$1; shift; ip netns exec "$(ns "$h")" "$@"; }
cleanup() {
  exec 2>/dev/null   # no job notices for the processes killed here
  for h in $(ip netns list | awk '{print $1}' | grep "^$P-" || true); do
    ip netns pids "$h" | xargs -r kill -9 2>/dev/null || true
    ip netns del "$h"
  done
  rm -rf "$work"
}
trap cleanup EXIT
cleanup
mkdir -p "$work"
fail() { echo "FAILED: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*"; }

# NMDP_DATAPLANE: a binary built already (the test wrapper passes its own).
if [ -n "${NMDP_DATAPLANE:-}" ]; then bin=$NMDP_DATAPLANE
else
  nice cargo build -q --bin dataplane
  bin=$PWD/target/debug/dataplane
fi

hosts=(c r b1 b2 b3)
for k in $(seq "$n"); do hosts+=("i$k" "s$k"); done
for h in "${hosts[@]}"; do
  ip netns add "$(ns "$h")"
  in_ns "$h" ip link set lo up
  in_ns "$h" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
done
# A veth from host A's interface A_IF to the router's R_IF (on BRIDGE, if given), offloads off
# on both ends (AF_PACKET gets no TSO super-frames, checksums finished).
to_router() {
  local a=$1 a_if=$2 r_if=$3 bridge=${4:-}
  ip -n "$(ns "$a")" link add "$a_if" type veth peer name "$r_if" netns "$(ns r)"
  in_ns "$a" ethtool -K "$a_if" tx off >/dev/null
  in_ns r ethtool -K "$r_if" tx off >/dev/null
  in_ns "$a" ip link set "$a_if" up
  [ -z "$bridge" ] || in_ns r ip link set "$r_if" master "$bridge"
  in_ns r ip link set "$r_if" up
}

# The router: the client's subnet, the instances' front segment, the backends' segment.
in_ns r sysctl -qw net.ipv4.ip_forward=1 net.ipv4.fib_multipath_hash_policy=1 \
  net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
for br in br-f br-b; do
  in_ns r ip link add $br type bridge
  in_ns r ip link set $br up
done
in_ns r ip addr add 10.1.0.1/24 dev br-f
in_ns r ip addr add 10.2.0.254/24 dev br-b
to_router c c0 r-c
in_ns r ip addr add 10.0.0.1/24 dev r-c
in_ns c ip addr add 10.0.0.2/24 dev c0
in_ns c ip route add default via 10.0.0.1
# Room for the 20 B IP-in-IP header on the 1500 B links behind the instances.
in_ns c ip link set c0 mtu 1480

# Backends: the VIP on loopback, IP-in-IP decapsulation, answering the client directly.
for j in 1 2 3; do
  to_router b$j b0 r-bb$j br-b
  in_ns b$j ip addr add 10.2.0.1$j/24 dev b0
  in_ns b$j ip route add default via 10.2.0.254
  in_ns b$j ip addr add $VIP/32 dev lo
  if in_ns b$j ip link add nmdp-ipip type ipip local 10.2.0.1$j 2>/dev/null; then dev=nmdp-ipip
  else
    in_ns b$j python3 tests/netns/ipip_decap.py nmdp-decap > /dev/null 2>&1 &
    for _ in $(seq 50); do in_ns b$j ip link show nmdp-decap >/dev/null 2>&1 && break; sleep 0.1; done
    dev=nmdp-decap
  fi
  in_ns b$j ip link set $dev up
  for k in all default $dev b0; do in_ns b$j sysctl -qw net.ipv4.conf.$k.rp_filter=0; done
  in_ns b$j python3 tests/netns/stream_backend.py b$j 9000 > /dev/null 2>&1 &
  in_ns b$j python3 tests/netns/lb_backend.py b$j 8080 > /dev/null 2>&1 &
done
log "backends decapsulate with ${dev/nmdp-decap/tests/netns/ipip_decap.py (no ipip driver in this kernel)}"

# The router's BIRD: one session per instance's speaker.
cp configs/scale-out/bird-router.conf "$work/bird-r.conf"
for k in $(seq "$n"); do
  echo "protocol bgp instance$k from nmdp_instance { neighbor 10.1.0.2$k as 65001; }" >> "$work/bird-r.conf"
done
in_ns r bird -c "$work/bird-r.conf" -s "$work/bird-r.ctl" -P "$work/bird-r.pid"
birdc_r() { birdc -s "$work/bird-r.ctl" "$@"; }

declare -A dp_pid agent_pid
for k in $(seq "$n"); do
  to_router i$k nmdp-f r-f$k br-f
  to_router i$k nmdp-b r-b$k br-b
  to_router s$k s0 r-s$k br-f
  in_ns s$k ip addr add 10.1.0.2$k/24 dev s0
  sed -e "s|10\.1\.0\.11/24|10.1.0.1$k/24|" -e "s|10\.2\.0\.1/24|10.2.0.$k/24|" \
    -e "s|02:6e:6d:64:01:|02:6e:6d:64:0$k:|" \
    configs/scale-out/lb-instance.toml > "$work/lb-$k.toml"
  sed -e "s/10\.1\.0\.21/10.1.0.2$k/g" -e "s/10\.1\.0\.11/10.1.0.1$k/g" \
    configs/scale-out/bird-instance.conf > "$work/bird-$k.conf"
  # Not through in_ns: `ip netns exec` execs the dataplane, so $! is its pid.
  ip netns exec "$(ns i$k)" "$bin" run "$work/lb-$k.toml" --set "run.telemetry_prefix=\"so-lb$k\"" \
    --json > "$work/summary-$k.json" 2> "$work/dataplane-$k.log" &
  dp_pid[$k]=$!
  if [ $speaker = exabgp ]; then
    # ExaBGP's own healthcheck runs `dataplane ctl health` (as root: the socket is 0600).
    sed -e "s/10\.1\.0\.21/10.1.0.2$k/g" -e "s/10\.1\.0\.11/10.1.0.1$k/g" \
      -e "s|\"dataplane ctl --prefix lb1 health\"|\"$bin ctl --prefix so-lb$k health\"|" \
      configs/scale-out/exabgp-instance.conf > "$work/exabgp-$k.conf"
    ip netns exec "$(ns s$k)" env exabgp_daemon_user=root exabgp_daemon_daemonize=false \
      exabgp_log_destination=stdout exabgp "$work/exabgp-$k.conf" > "$work/agent-$k.log" 2>&1 &
  else
    in_ns s$k bird -c "$work/bird-$k.conf" -s "$work/bird-$k.ctl" -P "$work/bird-$k.pid"
    ip netns exec "$(ns s$k)" scripts/scale-out-health-agent.sh --prefix so-lb$k \
      --birdc-socket "$work/bird-$k.ctl" --dataplane "$bin" --interval 0.3 --rise 2 --fall 1 \
      > "$work/agent-$k.log" 2>&1 &
  fi
  agent_pid[$k]=$!
done
log "started $n instances (configs/scale-out/lb-instance.toml), their $speaker speakers and health checks"

nexthops() { in_ns r ip route show $VIP | grep -o 'via 10\.1\.0\.1[0-9]' | sort -u | wc -l; }
has_nexthop() { in_ns r ip route show $VIP | grep -q "via 10\.1\.0\.1$1 "; }
for _ in $(seq 600); do [ "$(nexthops)" = "$n" ] && break; sleep 0.1; done
[ "$(nexthops)" = "$n" ] || { birdc_r show protocols; cat "$work"/agent-*.log; fail "the router never had $n next hops for $VIP"; }
log "the router learned $VIP from all $n instances over BGP:"
echo "\$ birdc show route $VIP/32   (router)"
birdc_r show route $VIP/32 | sed 1d
echo "\$ ip route show $VIP   (router)"
in_ns r ip route show $VIP

for _ in $(seq 100); do in_ns c curl -s -m 1 -o /dev/null http://$VIP:8080/ && break; sleep 0.1; done
rm -f "$work/mark"
log "opening $conns long-lived connections to $VIP:9000 for ${seconds} s (a line every 0.2 s each)"
in_ns c python3 tests/netns/stream_clients.py $VIP 9000 "$conns" "$seconds" "$work/mark" \
  > "$work/clients.json" 2> "$work/clients.log" &
clients=$!
sleep $((seconds / 3))

new_flows() { "$bin" ctl --prefix so-lb$1 --json nf lb | python3 -c \
  'import json,sys; v=json.load(sys.stdin)["/nmdp/nf"]; print(v["new_flows"], v["midflow_fallback"])'; }
echo "ECMP before the event (per instance: new flows, of them mid-flow fallbacks):"
declare -A before_flows
for k in $(seq "$n"); do
  read -r nf mf < <(new_flows $k)
  before_flows[$k]=$nf
  echo "  instance $k (10.1.0.1$k): new_flows $nf, midflow_fallback $mf"
  [ "$nf" -gt 0 ] || fail "instance $k received no flow: ECMP did not spread"
done

victim=$n
t0=$(date +%s.%N)
echo "$t0" > "$work/mark"
if [ $drain = 1 ]; then
  log "\$ dataplane ctl --prefix so-lb$victim drain   (instance $victim: withdraw, serve 5 s, stop)"
  "$bin" ctl --prefix so-lb$victim drain | sed 's/^/  /'
  pid=${dp_pid[$victim]}
  ( while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done; date +%s.%N > "$work/ended" ) &
elif [ $host = 1 ]; then
  # A host that dies sends no BGP notification and no TCP reset: its speaker's link goes
  # silent, so only the router's hold timer ends the session.
  log "instance $victim's host dies: link of its speaker down, dataplane and agent killed (kill -9)"
  in_ns s$victim ip link set s0 down
  kill -9 "${dp_pid[$victim]}" "${agent_pid[$victim]}"
  wait "${dp_pid[$victim]}" 2>/dev/null || true
else
  log "kill -9 instance $victim (pid ${dp_pid[$victim]})"
  kill -9 "${dp_pid[$victim]}"
  wait "${dp_pid[$victim]}" 2>/dev/null || true
fi
withdrawn=""
for _ in $(seq 300); do
  if ! has_nexthop $victim; then withdrawn=$(date +%s.%N); break; fi
  sleep 0.02
done
[ -n "$withdrawn" ] || { in_ns r ip route show $VIP; cat "$work/agent-$victim.log"; fail "the router kept instance $victim's route for 6 s"; }
# The kernel route follows BIRD's within a scan; allow it half a second beyond the hold time.
limit_s=$(python3 -c "print($HOLD_S + 0.5)")
withdraw_s=$(python3 -c "print(f'{$withdrawn - $t0:.2f}')")
log "the router withdrew instance $victim's route after $withdraw_s s:"
in_ns r ip route show $VIP
grep -iE 'withdraw:|DOWN state' "$work/agent-$victim.log" | tail -2 | sed 's/^/  agent: /' || true
[ $host = 0 ] || birdc_r show protocols instance$victim | sed -n '2,3p'

echo "\$ python3 tests/netns/lb_client.py $VIP 8080 30   (new connections, client)"
newc=$(in_ns c python3 tests/netns/lb_client.py $VIP 8080 30)
echo "  $newc"

wait $clients || true
python3 - "$work/clients.json" <<'PY' > "$work/report.txt"
import collections, json, sys
r = json.load(open(sys.argv[1]))
per = r["per_connection"]
before = collections.Counter(c["before"] for c in per if c["before"])
after = collections.Counter(c["after"] for c in per if c["after"])
print("kept", r["kept_transferring"], r["connections"], r["changed_backend"], r["opened"],
      sum(1 for c in per if c["error"]))
print("flows per backend before:", dict(sorted(before.items())))
print("flows per backend after: ", dict(sorted(after.items())))
gaps = sorted(c["longest_gap_s"] or 0 for c in per)
print("longest pause of a connection: median %.2f s, max %.2f s" % (gaps[len(gaps) // 2], gaps[-1]))
if r["errors"]:
    print("errors:", r["errors"])
PY
read -r _ kept total changed opened errors < "$work/report.txt"
sed 1d "$work/report.txt"

status=0
if [ $drain = 1 ]; then
  for _ in $(seq 300); do [ -s "$work/ended" ] && break; sleep 0.1; done
  ended=$(cat "$work/ended")
  if wait "${dp_pid[$victim]}"; then
    stopped=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["stopped_by"])' "$work/summary-$victim.json")
    echo "instance $victim stopped by: $stopped (exit status 0)," \
      "$(python3 -c "print(f'{$ended - $withdrawn:.1f}')") s after its route was withdrawn"
    [ "$stopped" = drain ] || { echo "FAILED: stopped by $stopped, not drain" >&2; status=1; }
  else
    echo "FAILED: the drained instance did not exit cleanly" >&2; tail "$work/dataplane-$victim.log" >&2; status=1
  fi
fi
echo "survivors (new flows since the event, of them mid-flow fallbacks: connections moved by the rehash):"
for k in $(seq "$n"); do
  [ "$k" = "$victim" ] && continue
  read -r nf mf < <(new_flows $k)
  echo "  instance $k: new_flows $((nf - before_flows[$k])), midflow_fallback $mf"
done

pct=$(python3 -c "print(f'{100 * $kept / $total:.1f}')")
new_failed=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["failed"])' "$newc")
echo
what_s="killed the dataplane of"
[ $drain = 1 ] && what_s=drained
[ $host = 1 ] && what_s="killed the host of"
echo "summary: $n instances, $what_s instance $victim;" \
  "$kept of $total connections kept transferring ($pct %), $changed changed backend," \
  "$errors reset or failed;" \
  "route withdrawn after $withdraw_s s (hold time ${HOLD_S} s);" \
  "new connections after the event: $((30 - new_failed)) of 30 answered"
[ "$opened" = "$total" ] || { echo "FAILED: only $opened of $total connections opened" >&2; status=1; }
python3 -c "import sys; sys.exit(0 if $kept * 100 >= 95 * $total else 1)" ||
  { echo "FAILED: fewer than 95 % kept transferring" >&2; status=1; }
python3 -c "import sys; sys.exit(0 if $withdraw_s <= $limit_s else 1)" ||
  { echo "FAILED: withdrawn after more than the hold time" >&2; status=1; }
[ "$new_failed" = 0 ] || { echo "FAILED: $new_failed new connections failed" >&2; status=1; }
exit $status
