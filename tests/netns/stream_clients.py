"""Long-lived connections to a VIP (scripts/scale-out-demo.sh): opens N TCP connections to
VIP:PORT, and on each sends a line every INTERVAL seconds and waits for its answer (the
backend's name and the line) until SECONDS have passed. The demo writes the time of the event
it tests (an instance killed or drained) into MARK as seconds since the epoch. Prints JSON:
per connection the backend that answered before the mark, the one after, whether it was still
transferring at the end (an answer in the last 3 s, no error), and the longest gap between
answers; and the totals. With SOURCES (addresses separated by commas), connection i is opened
from the (i mod len)-th of them (the subscribers behind a NAT).

Usage: python3 stream_clients.py VIP PORT N SECONDS MARK [INTERVAL [SOURCES]]
"""
import json
import os
import socket
import sys
import threading
import time

VIP, PORT, N, SECONDS, MARK = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(
    sys.argv[4]), sys.argv[5]
INTERVAL = float(sys.argv[6]) if len(sys.argv) > 6 else 0.2
SOURCES = sys.argv[7].split(",") if len(sys.argv) > 7 else [""]
start = time.time()
end = start + SECONDS
conns = [{"answers": [], "error": None, "opened": False} for _ in range(N)]


def run(i):
    c = conns[i]
    try:
        s = socket.create_connection((VIP, PORT), timeout=10,
                                     source_address=(SOURCES[i % len(SOURCES)], 0))
        c["opened"] = True
        f = s.makefile("rb")
        seq = 0
        while time.time() < end:
            seq += 1
            s.sendall(b"%d %d\n" % (i, seq))
            line = f.readline()
            if not line:
                raise ConnectionError("closed by the peer")
            name, _, rest = line.decode().partition(" ")
            if rest.split() != [str(i), str(seq)]:
                raise ValueError("answer out of order: %r" % line)
            c["answers"].append((time.time(), name))
            time.sleep(INTERVAL)
        s.close()
    except Exception as e:
        c["error"] = "%s at %.1f s" % (repr(e), time.time() - start)


threads = [threading.Thread(target=run, args=(i,)) for i in range(N)]
for t in threads:
    t.start()
    time.sleep(0.01)
for t in threads:
    t.join()
mark = float(open(MARK).read()) if os.path.exists(MARK) else end
report = []
for c in conns:
    before = [n for t, n in c["answers"] if t < mark]
    after = [n for t, n in c["answers"] if t >= mark]
    times = [start] + [t for t, _ in c["answers"]]
    report.append({
        "before": before[-1] if before else None,
        "after": after[-1] if after else None,
        "backends": sorted(set(n for _, n in c["answers"])),
        "kept_transferring": c["error"] is None and bool(c["answers"])
        and c["answers"][-1][0] >= end - 3,
        "longest_gap_s": round(max(b - a for a, b in zip(times, times[1:])), 2)
        if len(times) > 1 else None,
        "error": c["error"],
    })
kept = sum(r["kept_transferring"] for r in report)
print(json.dumps({
    "connections": N,
    "opened": sum(c["opened"] for c in conns),
    "kept_transferring": kept,
    "changed_backend": sum(len(r["backends"]) > 1 for r in report),
    "errors": [r["error"] for r in report if r["error"]][:5],
    "per_connection": report,
}))
