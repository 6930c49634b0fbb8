# Network namespaces for the demos that run nmdp between real Linux hosts
# (scripts/netns-demo.sh, scripts/scale-out-demo.sh): sourced, not run, so both name, build
# and remove their hosts the same way. The caller sets P (its namespace prefix, every host is
# "$P-<name>") and work (its scratch directory) before it calls these.

# ns HOST: HOST's namespace.
ns() { echo "$P-$1"; }

# in_ns HOST CMD...: runs CMD in HOST's namespace.
in_ns() {
  local h=$1
  shift
  ip netns exec "$(ns "$h")" "$@"
}

# need_tools TOOL...: exits 1 naming the first TOOL that is not installed.
need_tools() {
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null || { echo "needs $t" >&2; exit 1; }
  done
}

# netns_cleanup: kills every process left in the caller's namespaces, deletes the namespaces
# and the scratch directory. Run at the start (a run that was interrupted) and on exit.
netns_cleanup() {
  local h
  for h in $(ip netns list | awk '{print $1}' | grep "^$P-" || true); do
    ip netns pids "$h" | xargs -r kill -9 2>/dev/null || true
    ip netns del "$h"
  done
  rm -rf "$work"
}

# add_hosts HOST...: a namespace per HOST with loopback up and IPv6 off (the demos are IPv4
# only, and the counters then show only what they send).
add_hosts() {
  local h
  for h in "$@"; do
    ip netns add "$(ns "$h")"
    in_ns "$h" ip link set lo up
    in_ns "$h" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  done
}

# wait_until TRIES CMD...: runs CMD every 0.1 s until it succeeds, at most TRIES times; the
# status of the last try.
wait_until() {
  local tries=$1
  shift
  local i
  for i in $(seq "$tries"); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

# ipip_decap HOST LOCAL UPLINK: IP-in-IP decapsulation on HOST for tunnels to LOCAL (an LB's
# `return = "ipip"` backends), with reverse-path filtering off so the inner packet (from a
# client, to the VIP) is accepted on the tunnel and answered through UPLINK. Linux's `ipip`
# device, or tests/netns/ipip_decap.py where the kernel has no ipip driver; sets decap_dev to
# the device's name.
ipip_decap() {
  local h=$1 local_ip=$2 uplink=$3 k
  if in_ns "$h" ip link add nmdp-ipip type ipip local "$local_ip" 2>/dev/null; then
    decap_dev=nmdp-ipip
  else
    in_ns "$h" python3 tests/netns/ipip_decap.py nmdp-decap > /dev/null 2>&1 &
    wait_until 50 in_ns "$h" ip link show nmdp-decap
    decap_dev=nmdp-decap
  fi
  in_ns "$h" ip link set $decap_dev up
  for k in all default $decap_dev "$uplink"; do in_ns "$h" sysctl -qw net.ipv4.conf.$k.rp_filter=0; done
}
