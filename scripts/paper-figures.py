#!/usr/bin/env python3
"""The nicmem paper's figures on nmdp's virtual NIC: runs the sweeps of configs/paper/ (pktgen
sweep, virtual time), prints each figure's numbers and one verdict line per claim the paper makes
in words, and leaves JSON, CSV and SVG/PNG plots under target/sweeps/<figure>/.

    scripts/paper-figures.py                 # every figure (builds pktgen --release first)
    scripts/paper-figures.py fig8-nat fig11  # some (a prefix of the sweep's name)
    scripts/paper-figures.py --no-run        # only read the JSON of earlier runs

The paper's values are transcribed from its text (docs/reference/pcie-nic-model.md section 8
lists them with their sections); docs/paper-figures.md discusses where nmdp differs and why.
Exits 1 if a claim fails, so a change to the model that moves a figure shows.
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGS = ["fig3-l3fwd", "fig8-nat", "fig8-lb", "fig9-nat", "fig10-nat", "fig11-nat", "fig13-queues"]


def run(name):
    cmd = [os.path.join(ROOT, "target/release/pktgen"), "sweep", f"configs/paper/{name}.toml", "-q"]
    r = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")


def rows(name):
    path = os.path.join(ROOT, "target/sweeps", name, f"{name}.json")
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        sys.exit(f"{path}: {e} (run without --no-run first)")
    out = []
    for r in data["rows"]:
        dut = r["detail"].get("dut", {})
        out.append({
            **r["point"],
            "gbps": r["ndr_gbps"] or 0.0,
            "line": 100.0 * (r["ndr_gbps"] or 0.0) * 1e9 / (r["line_rate_pps"] * 8 * (r["frame_size"] + 20)),
            "p50_us": (r["latency_p50_ns"] or 0) / 1000.0,
            "pcie_up": dut.get("pcie", {}).get("upstream_util", 0.0),
            "ddio_hit": dut.get("hostmem", {}).get("ddio_hit_rate", 1.0),
            "dram_util": dut.get("hostmem", {}).get("util", 0.0),
        })
    return out


def pick(rs, **kw):
    for r in rs:
        if all(r.get(k) == v for k, v in kw.items()):
            return r
    sys.exit(f"no point {kw}")


def table(name, rs, x):
    print(f"\n{name}: {x} | mode | Gb/s | % of line | p50 us | PCIe up | DDIO hit | DRAM util")
    for r in rs:
        print(f"  {r[x]!s:>6} {r.get('mode', '-'):>11} {r['gbps']:8.1f} {r['line']:7.1f} % "
              f"{r['p50_us']:9.1f} {100 * r['pcie_up']:6.1f} % {r['ddio_hit']:6.2f} "
              f"{100 * r['dram_util']:6.1f} %")


CLAIMS = []


def claim(fig, text, paper, nmdp, ok):
    CLAIMS.append((fig, text, paper, nmdp, ok))


def fig3(rs):
    h, n = pick(rs, cores=2, mode="host"), pick(rs, cores=2, mode="nic-inline")
    claim("Fig. 3", "host, 2 cores, 100 Gb/s: PCIe upstream saturated", "99.8 % [§3.3]",
          f"{100 * h['pcie_up']:.1f} %", h["pcie_up"] >= 0.95)
    claim("Fig. 3", "nmNFV needs ~10 % of PCIe", "~10 % [reference §4]",
          f"{100 * n['pcie_up']:.1f} %", n["pcie_up"] <= 0.15)


def fig8(rs, nf, cores_line, cores_not):
    n14 = pick(rs, cores=cores_line, mode="nic-inline")
    nlo = pick(rs, cores=cores_not, mode="nic-inline")
    h14, s14 = pick(rs, cores=14, mode="host"), pick(rs, cores=14, mode="split")
    claim("Fig. 8", f"{nf}: nmNFV at line rate with {cores_line} cores, not {cores_not}",
          f"line rate at {cores_line} [§6.2]",
          f"{n14['line']:.1f} % / {nlo['line']:.1f} %", n14["line"] >= 99.5 and nlo["line"] < 99.5)
    claim("Fig. 8", f"{nf}: host below line rate with 14 cores", "below line rate [§6.2]",
          f"{h14['line']:.1f} %", h14["line"] < 99.0)
    claim("Fig. 8", f"{nf}: split trails host (14 cores)", "split <= host [§6.2]",
          f"{s14['gbps']:.1f} vs {h14['gbps']:.1f} Gb/s", s14["gbps"] <= h14["gbps"] + 0.5)
    gain = pick(rs, cores=14, mode="nic-inline")["gbps"] / h14["gbps"] - 1
    claim("Fig. 8", f"{nf}: nmNFV throughput gain over host (14 cores)", "up to +19 % [abstract]",
          f"{100 * gain:+.1f} %", gain >= 0.10)


def fig9(rs):
    lo, hi = pick(rs, rx_ring=256, mode="host"), pick(rs, rx_ring=4096, mode="host")
    nlo, nhi = pick(rs, rx_ring=256, mode="nic-inline"), pick(rs, rx_ring=4096, mode="nic-inline")
    claim("Fig. 9", "NAT host: throughput falls as rings grow 256 -> 4096", "-20 % [reference §8]",
          f"{100 * (hi['gbps'] / lo['gbps'] - 1):+.1f} %", hi["gbps"] < 0.97 * lo["gbps"])
    claim("Fig. 9", "NAT nmNFV: insensitive to ring size", "flat [reference §8]",
          f"{100 * (nhi['gbps'] / nlo['gbps'] - 1):+.1f} %", abs(nhi["gbps"] / nlo["gbps"] - 1) < 0.01)


def fig10(rs):
    s64 = [r["gbps"] for r in rs if r["frame_size"] == 64]
    claim("Fig. 10", "64 B is CPU-bound: every mode within 2 %", "CPU-bound [reference §8]",
          f"{min(s64):.1f}..{max(s64):.1f} Gb/s", max(s64) <= 1.02 * min(s64))
    h, n = pick(rs, frame_size=1024, mode="host"), pick(rs, frame_size=1024, mode="nic-inline")
    claim("Fig. 10", "nmNFV ahead of host from 1024 B", "ahead above 1024 B [reference §8]",
          f"{n['gbps']:.1f} vs {h['gbps']:.1f} Gb/s", n["gbps"] > h["gbps"])
    worse = [r[ "frame_size"] for r in rs if r["mode"] == "nic-inline"
             and r["gbps"] < pick(rs, frame_size=r["frame_size"], mode="host")["gbps"] - 0.5]
    claim("Fig. 10", "nmNFV >= host at every size", ">= everywhere [reference §8]",
          "sizes below host: " + (", ".join(map(str, worse)) or "none"), not worse)


def fig11(rs):
    n0 = pick(rs, **{"host.ddio_ways": 0, "mode": "nic-inline"})
    h11 = pick(rs, **{"host.ddio_ways": 11, "mode": "host"})
    claim("Fig. 11", "NAT: nmNFV with DDIO off vs host with all ways, throughput",
          "197 vs 195 Gb/s [reference §8]", f"{n0['gbps']:.1f} vs {h11['gbps']:.1f} Gb/s",
          n0["gbps"] >= h11["gbps"])
    claim("Fig. 11", "NAT: nmNFV with DDIO off vs host with all ways, latency",
          "22 vs 84 us [reference §8]", f"{n0['p50_us']:.1f} vs {h11['p50_us']:.1f} us p50",
          n0["p50_us"] < h11["p50_us"])
    ways = sorted({r["host.ddio_ways"] for r in rs})
    first = next((w for w in ways if pick(rs, **{"host.ddio_ways": w, "mode": "host"})["line"] >= 99.5), None)
    claim("Fig. 11", "NAT host reaches line rate at 9 DDIO ways", "9 ways [reference §8]",
          f"{first} ways" if first is not None else "never", first is not None and first <= 9)


def fig13(rs):
    one, none = pick(rs, **{"vnic.nicmem_queues": 1}), pick(rs, **{"vnic.nicmem_queues": 0})
    claim("Fig. 13", "1 of 7 nicmem queues removes the PCIe bottleneck", "line rate [reference §8]",
          f"{one['line']:.1f} % of line, PCIe up {100 * one['pcie_up']:.1f} % "
          f"(0 queues: {none['line']:.1f} %, {100 * none['pcie_up']:.1f} %)",
          one["line"] >= 99.5)


CHECKS = {
    "fig3-l3fwd": ("cores", fig3),
    "fig8-nat": ("cores", lambda rs: fig8(rs, "NAT", 14, 12)),
    "fig8-lb": ("cores", lambda rs: fig8(rs, "LB", 12, 10)),
    "fig9-nat": ("rx_ring", fig9),
    "fig10-nat": ("frame_size", fig10),
    "fig11-nat": ("host.ddio_ways", fig11),
    "fig13-queues": ("vnic.nicmem_queues", fig13),
}


def main():
    args = sys.argv[1:]
    no_run = "--no-run" in args
    wanted = [a for a in args if a != "--no-run"]
    figs = [f for f in FIGS if not wanted or any(f.startswith(w) for w in wanted)]
    if not figs:
        sys.exit(f"no figure matches {wanted}; figures: {', '.join(FIGS)}")
    if not no_run:
        subprocess.run(["cargo", "build", "-q", "--release", "--bin", "pktgen"], cwd=ROOT, check=True)
    for f in figs:
        if not no_run:
            print(f"running configs/paper/{f}.toml ...", file=sys.stderr)
            run(f)
        x, check = CHECKS[f]
        rs = rows(f)
        table(f, rs, x)
        check(rs)
    print("\nclaim | paper | nmdp | verdict")
    for fig, text, paper, nmdp, ok in CLAIMS:
        print(f"{fig} {text} | {paper} | {nmdp} | {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if all(c[4] for c in CLAIMS) else 1)


if __name__ == "__main__":
    main()
