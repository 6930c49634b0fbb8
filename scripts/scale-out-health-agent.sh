#!/usr/bin/env bash
# Announces an nmdp instance through BIRD 2 while it is healthy (docs/scale-out.md): every
# INTERVAL seconds it runs `dataplane ctl --prefix PREFIX health` and, after RISE successes in a
# row, enables BIRD's announcing protocol (`birdc enable PROTOCOL`; configs/scale-out/
# bird-instance.conf names it `service`), after FALL failures in a row disables it, which
# withdraws the instance's VIPs or NAT pool prefix from the router while the BGP session stays
# up. `health` fails when the run is draining (`dataplane ctl drain`), unhealthy, stopping or
# gone, so a drain withdraws the route first and a dead instance is withdrawn within
# INTERVAL * FALL seconds (a dead host: the router's BGP hold time).
#
#   scripts/scale-out-health-agent.sh --prefix lb1 --birdc-socket /run/bird/bird.ctl \
#       [--protocol service] [--interval 0.5] [--rise 2] [--fall 1] [--dataplane PATH]
#
# Logs each change with a timestamp on stdout ("announce" / "withdraw" and why). Needs birdc.
set -uo pipefail

prefix=nmdp sock=/run/bird/bird.ctl proto=service interval=0.5 rise=2 fall=1
dataplane=$(command -v dataplane || echo "$(dirname "$0")/../target/debug/dataplane")
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) prefix=$2; shift ;;
    --birdc-socket) sock=$2; shift ;;
    --protocol) proto=$2; shift ;;
    --interval) interval=$2; shift ;;
    --rise) rise=$2; shift ;;
    --fall) fall=$2; shift ;;
    --dataplane) dataplane=$2; shift ;;
    *) sed -n '2,14p' "$0" >&2; exit 2 ;;
  esac
  shift
done
command -v birdc >/dev/null || { echo "needs birdc (apt-get install bird2)" >&2; exit 1; }
[ -x "$dataplane" ] || { echo "no dataplane binary at $dataplane (--dataplane PATH)" >&2; exit 1; }

stamp() { date +%H:%M:%S.%3N; }
bird() { birdc -s "$sock" "$@" >/dev/null 2>&1; }

# switch VERB STATE MESSAGE: `birdc VERB PROTOCOL`; when BIRD did it, the announcement is
# STATE (1 announced, 0 withdrawn) and MESSAGE is logged.
switch() {
  if bird "$1" "$proto"; then
    announced=$2
    echo "$(stamp) $3"
  else
    echo "$(stamp) birdc $1 $proto failed (is BIRD running on $sock?)"
  fi
}

# Nothing is announced until the run has been seen healthy RISE times.
announced=0 ups=0 downs=0
bird disable "$proto"
echo "$(stamp) start: $proto disabled until $prefix is healthy $rise times"
while true; do
  if why=$("$dataplane" ctl --prefix "$prefix" health 2>&1 >/dev/null); then
    ups=$((ups + 1)) downs=0
    if [ $announced = 0 ] && [ $ups -ge "$rise" ]; then switch enable 1 "announce: $prefix healthy"; fi
  else
    downs=$((downs + 1)) ups=0
    if [ $announced = 1 ] && [ $downs -ge "$fall" ]; then switch disable 0 "withdraw: ${why#error: }"; fi
  fi
  sleep "$interval"
done
