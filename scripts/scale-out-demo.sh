#!/usr/bin/env bash
# Scale-out: N nmdp instances behind routers that spread flows over them by ECMP, each announced
# over BGP by BIRD 2 while `dataplane ctl health` says it is healthy (docs/scale-out.md).
#
#   scripts/scale-out-demo.sh lb|nat [N] [--drain | --host] [--exabgp] [--bfd] [--connections C] [--seconds S]
#
# Builds network namespaces (nmdp-so-*): N nmdp instances on AF_PACKET links, a BGP speaker per
# instance (BIRD 2 with scripts/scale-out-health-agent.sh; with --exabgp, lb only, ExaBGP 4 and
# its healthcheck, configs/scale-out/exabgp-instance.conf), routers running BIRD 2 (one eBGP
# session per speaker, ECMP into Linux with `merge paths`), opens C long-lived TCP connections
# through the instances, then kills the last instance's dataplane (kill -9; its health agent
# withdraws its routes), or with --host its whole host (dataplane and agent killed, the
# speaker's links silent: the routers' BGP hold time, or with --bfd BFD, withdraws them), or
# with --drain (lb only) drains it (`dataplane ctl drain`), and prints a summary.
#
# lb: a client, a router, the instances (configs/scale-out/lb-instance.toml: the same VIP,
# backends and Maglev table, return = "ipip"; speakers configs/scale-out/bird-instance.conf)
# and three backends that decapsulate IP-in-IP and answer the client directly; C defaults to
# 64. Reports how many connections kept transferring, the seconds until the router withdrew
# the instance's route, flows per backend before and after, and whether new connections work.
# Fails when fewer than 95 % kept transferring, the route was not withdrawn within the BGP hold
# time (3 s, and 1 s for BIRD and the kernel), a new connection failed, or the drained instance
# did not stop cleanly.
#
# nat: 32 subscribers (one client namespace), an inside router hashing by address
# (fib_multipath_hash_policy = 0, so a subscriber stays on one instance), the NAT instances
# (configs/scale-out/nat-instance.toml: one pool, instance K of N translating into its own /28
# share of it; speakers configs/scale-out/bird-nat-instance.conf announce a default route
# inside and the share outside), an outside router and a server; C defaults to 64. Reports the
# connections per instance before the event and how many of them kept transferring, the
# seconds until both routers withdrew the dead instance, and whether 30 new connections (the
# dead instance's subscribers too) work. Fails when a connection through a surviving instance
# was lost (N = 2; with more, Linux's hash-threshold ECMP moves some subscribers between
# survivors too, which is reported), the routes were not withdrawn in time (as for lb), or a
# new connection failed.
#
# Removes everything it built. Needs root, iproute2, ethtool, python3, curl and bird2 (bird,
# birdc). NMDP_DATAPLANE=PATH runs that binary instead of building target/debug/dataplane.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/netns.sh

usage() { sed -n '5p' "$0" | sed 's/^# *//' >&2; exit 2; }
what=${1:-}
shift || true
n=2 drain=0 host=0 conns=64 seconds="" speaker=bird bfd=0
if [[ ${1:-} =~ ^[0-9]+$ ]]; then n=$1; shift; fi
while [ $# -gt 0 ]; do
  case $1 in
    --drain) drain=1 ;;
    --host) host=1 ;;
    --exabgp) speaker=exabgp ;;
    --bfd) bfd=1 ;;
    --connections) conns=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    *) echo "unknown option $1" >&2; usage ;;
  esac
  shift
done
case $what in
  lb) seconds=${seconds:-40} ;;
  nat)
    seconds=${seconds:-30}
    [ $drain = 0 ] || { echo "--drain: lb only (a NAT's sessions cannot move to another instance)" >&2; exit 2; }
    [ $speaker = bird ] || { echo "--exabgp: lb only" >&2; exit 2; } ;;
  *) usage ;;
esac
[ "$n" -ge 2 ] && [ "$n" -le 8 ] || { echo "N: 2..8 instances" >&2; exit 2; }
[ $((drain + host)) -le 1 ] || { echo "--drain or --host, not both" >&2; exit 2; }
[ $speaker = bird ] || [ $bfd = 0 ] || { echo "--bfd: BIRD speakers only (ExaBGP has no BFD)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
command -v bird >/dev/null && command -v birdc >/dev/null ||
  { echo "needs bird and birdc (apt-get install bird2)" >&2; exit 1; }
need_tools ip ethtool python3 curl
[ $speaker = bird ] || need_tools exabgp

P=nmdp-so
HOLD_S=3
work=$(mktemp -d)
trap 'exec 2>/dev/null; netns_cleanup' EXIT   # no job notices for the processes killed there
netns_cleanup
mkdir -p "$work"
fail() { echo "FAILED: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*"; }
py() { python3 -c "$@"; }

# NMDP_DATAPLANE: a binary built already (the test wrapper passes its own).
if [ -n "${NMDP_DATAPLANE:-}" ]; then bin=$NMDP_DATAPLANE
else
  nice cargo build -q --bin dataplane
  bin=$PWD/target/debug/dataplane
fi

# A veth from host A's interface A_IF to router R's interface R_IF (on BRIDGE, if given),
# offloads off on both ends (AF_PACKET gets no TSO super-frames, checksums finished).
to_router() {
  local r=$1 a=$2 a_if=$3 r_if=$4 bridge=${5:-}
  ip -n "$(ns "$a")" link add "$a_if" type veth peer name "$r_if" netns "$(ns "$r")"
  in_ns "$a" ethtool -K "$a_if" tx off >/dev/null
  in_ns "$r" ethtool -K "$r_if" tx off >/dev/null
  in_ns "$a" ip link set "$a_if" up
  [ -z "$bridge" ] || in_ns "$r" ip link set "$r_if" master "$bridge"
  in_ns "$r" ip link set "$r_if" up
}
# A router R forwarding, with a bridge BRIDGE holding ADDR for the instances' segment.
router() {
  local r=$1 bridge=$2 addr=$3 policy=$4
  in_ns "$r" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.fib_multipath_hash_policy="$policy" \
    net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
  in_ns "$r" ip link add "$bridge" type bridge
  in_ns "$r" ip link set "$bridge" up
  in_ns "$r" ip addr add "$addr" dev "$bridge"
}
# BIRD with BFD on every BGP session (--bfd) or as shipped.
bfd_sed() { if [ $bfd = 1 ]; then sed 's/bfd off;/bfd on;/'; else cat; fi; }
# Router R's BIRD (configs/scale-out/bird-router.conf), router id ID, a session per instance
# K's speaker at NET.2K.
router_bird() {
  local r=$1 id=$2 net=$3 k
  sed "s/^router id 10\.1\.0\.1;/router id $id;/" configs/scale-out/bird-router.conf | bfd_sed > "$work/bird-$r.conf"
  for k in $(seq "$n"); do
    echo "protocol bgp instance$k from nmdp_instance { neighbor $net.2$k as 65001; }" >> "$work/bird-$r.conf"
  done
  in_ns "$r" bird -c "$work/bird-$r.conf" -s "$work/bird-$r.ctl" -P "$work/bird-$r.pid"
}
birdc_at() { local r=$1; shift; birdc -s "$work/bird-$r.ctl" "$@"; }
# Instance K's dataplane on CONFIG with telemetry prefix so-WHATK (and --set ARGS...), its
# speaker's BIRD on BIRD_CONFIG and the health agent; sets dp_pid[K] and agent_pid[K].
declare -A dp_pid agent_pid
start_instance() {
  local k=$1 config=$2 bird_config=$3
  shift 3
  # Not through in_ns: `ip netns exec` execs the dataplane, so $! is its pid.
  ip netns exec "$(ns i$k)" "$bin" run "$config" --set "run.telemetry_prefix=\"so-$what$k\"" "$@" \
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
    bfd_sed < "$bird_config" > "$work/bird-$k.conf"
    in_ns s$k bird -c "$work/bird-$k.conf" -s "$work/bird-$k.ctl" -P "$work/bird-$k.pid"
    ip netns exec "$(ns s$k)" scripts/scale-out-health-agent.sh --prefix so-$what$k \
      --birdc-socket "$work/bird-$k.ctl" --dataplane "$bin" --interval 0.3 --rise 2 --fall 1 \
      > "$work/agent-$k.log" 2>&1 &
  fi
  agent_pid[$k]=$!
}
# The event on instance `victim`; sets t0 to when it started.
victim=$n
the_event() {
  t0=$(date +%s.%N)
  echo "$t0" > "$work/mark"
  if [ $drain = 1 ]; then
    log "\$ dataplane ctl --prefix so-$what$victim drain   (instance $victim: withdraw, serve 5 s, stop)"
    "$bin" ctl --prefix so-$what$victim drain | sed 's/^/  /'
    local pid=${dp_pid[$victim]}
    ( while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done; date +%s.%N > "$work/ended" ) &
  elif [ $host = 1 ]; then
    # A host that dies sends no BGP notification and no TCP reset: its speaker's links go
    # silent, so only the routers' hold timers (or BFD) end the sessions.
    log "instance $victim's host dies: links of its speaker down, dataplane and agent killed (kill -9)"
    local l
    for l in $(in_ns s$victim ls /sys/class/net | grep '^s[0-9]'); do in_ns s$victim ip link set "$l" down; done
    kill -9 "${dp_pid[$victim]}" "${agent_pid[$victim]}"
    wait "${dp_pid[$victim]}" 2>/dev/null || true
  else
    log "kill -9 instance $victim (pid ${dp_pid[$victim]})"
    kill -9 "${dp_pid[$victim]}"
    wait "${dp_pid[$victim]}" 2>/dev/null || true
  fi
}
# Polls GONE (a command that succeeds once the victim's routes are gone) for up to 6 s; sets
# withdraw_s to the seconds since the event.
wait_withdrawn() {
  local withdrawn="" i
  for i in $(seq 300); do
    if "$@"; then withdrawn=$(date +%s.%N); break; fi
    sleep 0.02
  done
  [ -n "$withdrawn" ] || { cat "$work/agent-$victim.log"; fail "the routers kept instance $victim's routes for 6 s"; }
  withdraw_s=$(py "print(f'{$withdrawn - $t0:.2f}')")
}
# The hold timer runs from the last keepalive, so a dead host's sessions end within the hold
# time; allow BIRD and the kernel a second beyond it to act on a loaded machine (3.6 s were
# measured at load 16 on 2 cores). With --bfd: BFD's detection time (0.3 s) and the same second.
limit_s=$((HOLD_S + 1))
by_what="the health agent"
[ $speaker = bird ] || by_what="ExaBGP's healthcheck"
if [ $host = 1 ]; then
  by_what="the BGP hold timer (${HOLD_S} s)"
  [ $bfd = 0 ] || { limit_s=1.3; by_what="BFD (3 x 100 ms)"; }
fi
what_s="killed the dataplane of"
[ $drain = 1 ] && what_s=drained
[ $host = 1 ] && what_s="killed the host of"

lb_demo() {
  local VIP=10.9.0.100 j k
  add_hosts c r b1 b2 b3
  for k in $(seq "$n"); do add_hosts i$k s$k; done
  # The router: the client's subnet, the instances' front segment, the backends' segment.
  router r br-f 10.1.0.1/24 1
  in_ns r ip link add br-b type bridge
  in_ns r ip link set br-b up
  in_ns r ip addr add 10.2.0.254/24 dev br-b
  to_router r c c0 r-c
  in_ns r ip addr add 10.0.0.1/24 dev r-c
  in_ns c ip addr add 10.0.0.2/24 dev c0
  in_ns c ip route add default via 10.0.0.1
  # Room for the 20 B IP-in-IP header on the 1500 B links behind the instances.
  in_ns c ip link set c0 mtu 1480

  # Backends: the VIP on loopback, IP-in-IP decapsulation, answering the client directly.
  for j in 1 2 3; do
    to_router r b$j b0 r-bb$j br-b
    in_ns b$j ip addr add 10.2.0.1$j/24 dev b0
    in_ns b$j ip route add default via 10.2.0.254
    in_ns b$j ip addr add $VIP/32 dev lo
    ipip_decap b$j 10.2.0.1$j b0
    in_ns b$j python3 tests/netns/stream_backend.py b$j 9000 > /dev/null 2>&1 &
    in_ns b$j python3 tests/netns/lb_backend.py b$j 8080 > /dev/null 2>&1 &
  done
  log "backends decapsulate with ${decap_dev/nmdp-decap/tests/netns/ipip_decap.py (no ipip driver in this kernel)}"

  router_bird r 10.1.0.1 10.1.0
  for k in $(seq "$n"); do
    to_router r i$k nmdp-f r-f$k br-f
    to_router r i$k nmdp-b r-b$k br-b
    to_router r s$k s0 r-s$k br-f
    in_ns s$k ip addr add 10.1.0.2$k/24 dev s0
    sed -e "s|10\.1\.0\.11/24|10.1.0.1$k/24|" -e "s|10\.2\.0\.1/24|10.2.0.$k/24|" \
      -e "s|02:6e:6d:64:01:|02:6e:6d:64:0$k:|" \
      configs/scale-out/lb-instance.toml > "$work/lb-$k.toml"
    sed -e "s/10\.1\.0\.21/10.1.0.2$k/g" -e "s/10\.1\.0\.11/10.1.0.1$k/g" \
      configs/scale-out/bird-instance.conf > "$work/speaker-$k.conf"
    start_instance $k "$work/lb-$k.toml" "$work/speaker-$k.conf"
  done
  log "started $n instances (configs/scale-out/lb-instance.toml), their $speaker speakers and health checks"

  nexthops() { in_ns r ip route show $VIP | grep -o 'via 10\.1\.0\.1[0-9]' | sort -u | wc -l; }
  victim_gone() { ! in_ns r ip route show $VIP | grep -q "via 10\.1\.0\.1$victim "; }
  for _ in $(seq 600); do [ "$(nexthops)" = "$n" ] && break; sleep 0.1; done
  [ "$(nexthops)" = "$n" ] || { birdc_at r show protocols; cat "$work"/agent-*.log; fail "the router never had $n next hops for $VIP"; }
  log "the router learned $VIP from all $n instances over BGP:"
  echo "\$ birdc show route $VIP/32   (router)"
  birdc_at r show route $VIP/32 | sed 1d
  echo "\$ ip route show $VIP   (router)"
  in_ns r ip route show $VIP

  wait_until 100 in_ns c curl -s -m 1 -o /dev/null http://$VIP:8080/ || true
  rm -f "$work/mark"
  log "opening $conns long-lived connections to $VIP:9000 for ${seconds} s (a line every 0.2 s each)"
  in_ns c python3 tests/netns/stream_clients.py $VIP 9000 "$conns" "$seconds" "$work/mark" \
    > "$work/clients.json" 2> "$work/clients.log" &
  local clients=$!
  sleep $((seconds / 3))

  new_flows() { "$bin" ctl --prefix so-lb$1 --json nf lb | py \
    'import json,sys; v=json.load(sys.stdin)["/nmdp/nf"]; print(v["new_flows"], v["midflow_fallback"])'; }
  echo "ECMP before the event (per instance: new flows, of them mid-flow fallbacks):"
  local -A before_flows
  local nf mf
  for k in $(seq "$n"); do
    read -r nf mf < <(new_flows $k)
    before_flows[$k]=$nf
    echo "  instance $k (10.1.0.1$k): new_flows $nf, midflow_fallback $mf"
    [ "$nf" -gt 0 ] || fail "instance $k received no flow: ECMP did not spread"
  done

  the_event
  wait_withdrawn victim_gone
  log "the router withdrew instance $victim's route after $withdraw_s s:"
  in_ns r ip route show $VIP
  grep -iE 'withdraw:|DOWN state' "$work/agent-$victim.log" | tail -2 | sed 's/^/  agent: /' || true
  [ $host = 0 ] || birdc_at r show protocols instance$victim | sed -n '2,3p'

  echo "\$ python3 tests/netns/lb_client.py $VIP 8080 30   (new connections, client)"
  local newc
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
  local kept total changed opened errors
  read -r _ kept total changed opened errors < "$work/report.txt"
  sed 1d "$work/report.txt"

  status=0
  if [ $drain = 1 ]; then
    wait_until 300 test -s "$work/ended" || true
    local ended stopped
    ended=$(cat "$work/ended")
    if wait "${dp_pid[$victim]}"; then
      stopped=$(py 'import json,sys; print(json.load(open(sys.argv[1]))["stopped_by"])' "$work/summary-$victim.json")
      echo "instance $victim stopped by: $stopped (exit status 0)," \
        "$(py "print(f'{$ended - $t0 - $withdraw_s:.1f}')") s after its route was withdrawn"
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

  local pct new_failed
  pct=$(py "print(f'{100 * $kept / $total:.1f}')")
  new_failed=$(py 'import json,sys; print(json.loads(sys.argv[1])["failed"])' "$newc")
  echo
  echo "summary: $n instances, $what_s instance $victim;" \
    "$kept of $total connections kept transferring ($pct %), $changed changed backend," \
    "$errors reset or failed;" \
    "route withdrawn after $withdraw_s s by $by_what;" \
    "new connections after the event: $((30 - new_failed)) of 30 answered"
  [ "$opened" = "$total" ] || { echo "FAILED: only $opened of $total connections opened" >&2; status=1; }
  py "import sys; sys.exit(0 if $kept * 100 >= 95 * $total else 1)" ||
    { echo "FAILED: fewer than 95 % kept transferring" >&2; status=1; }
  py "import sys; sys.exit(0 if $withdraw_s <= $limit_s else 1)" ||
    { echo "FAILED: withdrawn after more than $limit_s s" >&2; status=1; }
  [ "$new_failed" = 0 ] || { echo "FAILED: $new_failed new connections failed" >&2; status=1; }
}

nat_demo() {
  local SERVER=10.4.0.2 SUBSCRIBERS=32 j k
  add_hosts c ri ro srv
  for k in $(seq "$n"); do add_hosts i$k s$k; done
  # The inside router hashes by address only: a subscriber's flows all take one instance, so
  # it keeps one outside address (RFC 4787 REQ-2 across instances).
  router ri br-i 10.1.0.1/24 0
  to_router ri c c0 r-c
  in_ns ri ip addr add 10.0.0.1/24 dev r-c
  local sources=()
  for j in $(seq 0 $((SUBSCRIBERS - 1))); do
    in_ns c ip addr add 10.0.0.$((10 + j))/24 dev c0
    sources+=("10.0.0.$((10 + j))")
  done
  sources=$(IFS=,; echo "${sources[*]}")
  in_ns c ip route add default via 10.0.0.1
  # The outside router and the server: neither has a route to the subscribers.
  router ro br-o 10.3.0.1/24 1
  to_router ro srv srv0 r-srv
  in_ns ro ip addr add 10.4.0.1/24 dev r-srv
  in_ns srv ip addr add $SERVER/24 dev srv0
  in_ns srv ip route add default via 10.4.0.1
  # It answers each line with the address and port the connection came from.
  in_ns srv python3 tests/netns/stream_backend.py - 9000 > /dev/null 2>&1 &

  router_bird ri 10.1.0.1 10.1.0
  router_bird ro 10.3.0.1 10.3.0
  # The pool: one /28 per instance; instance K translates into the K-th.
  local pool=() share
  for k in $(seq "$n"); do pool+=("\"10.8.0.$((16 * (k - 1)))/28\""); done
  pool="[$(IFS=,; echo "${pool[*]}")]"
  for k in $(seq "$n"); do
    share=10.8.0.$((16 * (k - 1)))/28
    to_router ri i$k nmdp-i r-i$k br-i
    to_router ro i$k nmdp-o r-o$k br-o
    to_router ri s$k s0 r-s$k br-i
    to_router ro s$k s1 r-t$k br-o
    in_ns s$k ip addr add 10.1.0.2$k/24 dev s0
    in_ns s$k ip addr add 10.3.0.2$k/24 dev s1
    sed -e "s|10\.1\.0\.11/24|10.1.0.1$k/24|" -e "s|10\.3\.0\.11/24|10.3.0.1$k/24|" \
      -e "s|02:6e:6d:65:01:|02:6e:6d:65:0$k:|" \
      configs/scale-out/nat-instance.toml > "$work/nat-$k.toml"
    sed -e "s/10\.1\.0\.21/10.1.0.2$k/g" -e "s/10\.1\.0\.11/10.1.0.1$k/g" \
      -e "s/10\.3\.0\.21/10.3.0.2$k/g" -e "s/10\.3\.0\.11/10.3.0.1$k/g" \
      -e "s|10\.8\.0\.0/28|$share|" \
      configs/scale-out/bird-nat-instance.conf > "$work/speaker-$k.conf"
    start_instance $k "$work/nat-$k.toml" "$work/speaker-$k.conf" \
      --set "pipeline.nat.nat_ips=$pool" --set "pipeline.nat.instances=$n" \
      --set "pipeline.nat.instance=$((k - 1))"
  done
  log "started $n NAT instances sharing the pool $pool (configs/scale-out/nat-instance.toml), their BIRD speakers and health agents"

  inside_hops() { in_ns ri ip route show default | grep -o 'via 10\.1\.0\.1[0-9]' | sort -u | wc -l; }
  shares() { in_ns ro ip route show proto bird | grep -c '^10\.8\.0\.'; }
  victim_gone() {
    ! in_ns ri ip route show default | grep -q "via 10\.1\.0\.1$victim " &&
      ! in_ns ro ip route show proto bird | grep -q "via 10\.3\.0\.1$victim "
  }
  for _ in $(seq 600); do [ "$(inside_hops)" = "$n" ] && [ "$(shares)" = "$n" ] && break; sleep 0.1; done
  [ "$(inside_hops)" = "$n" ] && [ "$(shares)" = "$n" ] ||
    { birdc_at ri show protocols; birdc_at ro show protocols; cat "$work"/agent-*.log; fail "the routers never learned all $n instances"; }
  log "the routers learned all $n instances over BGP:"
  echo "\$ ip route show default   (inside router: ECMP over the instances' inside ports)"
  in_ns ri ip route show default
  echo "\$ ip route show proto bird   (outside router: each instance's pool share)"
  in_ns ro ip route show proto bird
  # Instance K's pool as its NAT reports it: "addresses first last sessions states".
  pool_of() { "$bin" ctl --prefix so-nat$1 --json nat pool | py '
import json, sys
v = json.load(sys.stdin)["/nmdp/nat/pool"]
print(len(v["address"]), v["address"][0], v["address"][-1], sum(v["sessions"]), ",".join(sorted(set(v["state"]))))'; }
  local addrs first last sessions states
  for k in $(seq "$n"); do
    read -r addrs first last sessions states < <(pool_of $k)
    echo "instance $k translates into $addrs addresses, $first .. $last ($states) (dataplane ctl nat pool)"
  done

  rm -f "$work/mark"
  wait_until 100 in_ns c python3 -c "import socket; socket.create_connection(('$SERVER', 9000), 1, ('10.0.0.10', 0))" || true
  log "opening $conns long-lived connections from $SUBSCRIBERS subscribers to $SERVER:9000 for ${seconds} s (a line every 0.2 s each)"
  in_ns c python3 tests/netns/stream_clients.py $SERVER 9000 "$conns" "$seconds" "$work/mark" 0.2 "$sources" \
    > "$work/clients.json" 2> "$work/clients.log" &
  local clients=$!
  sleep $((seconds / 3))
  echo "sessions per instance before the event (dataplane ctl nat pool, closing ones included):"
  for k in $(seq "$n"); do
    read -r addrs first last sessions states < <(pool_of $k)
    echo "  instance $k: $sessions"
  done

  the_event
  wait_withdrawn victim_gone
  log "both routers withdrew instance $victim after $withdraw_s s:"
  in_ns ri ip route show default
  in_ns ro ip route show proto bird
  grep -iE 'withdraw:' "$work/agent-$victim.log" | tail -1 | sed 's/^/  agent: /' || true
  [ $host = 0 ] || birdc_at ri show protocols instance$victim | sed -n '2,3p'

  echo "\$ python3 tests/netns/stream_clients.py $SERVER 9000 30 3 ...   (30 new connections, every subscriber)"
  in_ns c python3 tests/netns/stream_clients.py $SERVER 9000 30 3 "$work/none" 0.2 "$sources" > "$work/new.json"
  wait $clients || true
  python3 - "$work/clients.json" "$work/new.json" "$n" "$victim" <<'PY' > "$work/report.txt"
import collections, json, sys
r, new = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
n, victim = int(sys.argv[3]), int(sys.argv[4])
inst = lambda a: int(a.split(".")[3]) // 16 + 1 if a else None
per = r["per_connection"]
before = collections.Counter(inst(c["before"]) for c in per if c["before"])
kept = collections.Counter(inst(c["before"]) for c in per if c["before"] and c["kept_transferring"])
survivors_lost = sum(before[k] - kept[k] for k in before if k != victim)
new_per = collections.Counter(inst(c["before"]) for c in new["per_connection"] if c["before"])
new_ok = sum(c["kept_transferring"] for c in new["per_connection"])
print(sum(before.values()), before[victim], kept[victim], survivors_lost, new_ok, new["connections"],
      r["opened"], r["connections"])
for k in range(1, n + 1):
    print("  instance %d: %d connections before, %d kept transferring%s" % (
        k, before[k], kept[k], " (killed)" if k == victim else ""))
print("new connections per instance:", dict(sorted(new_per.items())))
if r["errors"]:
    print("errors:", r["errors"])
PY
  local total lost_of kept_of survivors_lost new_ok new_total opened all
  read -r total lost_of kept_of survivors_lost new_ok new_total opened all < "$work/report.txt"
  echo "connections per instance (by the outside address the server saw):"
  sed 1d "$work/report.txt"
  echo "survivors after the event (sessions: dataplane ctl nat pool, the new connections'" \
    "included; tcp_not_syn: segments of sessions they never saw, the dead instance's):"
  for k in $(seq "$n"); do
    [ "$k" = "$victim" ] && continue
    read -r addrs first last sessions states < <(pool_of $k)
    echo "  instance $k: sessions $sessions, tcp_not_syn $("$bin" ctl --prefix so-nat$k --json nf nat | py \
      'import json,sys; print(json.load(sys.stdin)["/nmdp/nf"]["tcp_not_syn"])')"
  done

  status=0
  echo
  echo "summary: $n NAT instances, $what_s instance $victim;" \
    "$((total - lost_of - survivors_lost)) of $((total - lost_of)) connections through the" \
    "survivors kept transferring, $((lost_of - kept_of)) of $lost_of through instance $victim lost;" \
    "routes withdrawn after $withdraw_s s by $by_what;" \
    "new connections after the event: $new_ok of $new_total transferred"
  [ "$opened" = "$all" ] || { echo "FAILED: only $opened of $all connections opened" >&2; status=1; }
  [ "$lost_of" -gt 0 ] || { echo "FAILED: no connection went through instance $victim" >&2; status=1; }
  if [ "$survivors_lost" != 0 ]; then
    if [ "$n" = 2 ]; then echo "FAILED: $survivors_lost connections through the survivor were lost" >&2; status=1
    else echo "note: with $n instances Linux's hash-threshold ECMP moves some subscribers between survivors too (resilient hashing would not)"
    fi
  fi
  py "import sys; sys.exit(0 if $withdraw_s <= $limit_s else 1)" ||
    { echo "FAILED: withdrawn after more than $limit_s s" >&2; status=1; }
  [ "$new_ok" = "$new_total" ] || { echo "FAILED: $((new_total - new_ok)) new connections failed" >&2; status=1; }
}

status=1
${what}_demo
exit $status
