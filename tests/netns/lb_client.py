"""The client side of the load-balancer namespace tests: opens N TCP connections to the VIP,
asks twice on each (keep-alive), and prints JSON: how many connections each backend answered,
how many failed, and how many were answered by two different backends.

Usage: python3 lb_client.py VIP PORT N
"""
import collections
import http.client
import json
import sys

VIP, PORT, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per_backend = collections.Counter()
failed, mixed, errors = 0, 0, []
for i in range(N):
    try:
        conn = http.client.HTTPConnection(VIP, PORT, timeout=5)
        names = []
        for _ in range(2):
            conn.request("GET", "/who")
            names.append(conn.getresponse().read().decode())
        conn.close()
        if names[0] != names[1]:
            mixed += 1
        per_backend[names[0]] += 1
    except Exception as e:
        failed += 1
        errors.append(repr(e))
print(json.dumps({"backends": per_backend, "failed": failed, "mixed": mixed,
                  "errors": errors[:3]}))
