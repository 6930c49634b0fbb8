//! The nicmem paper's figures (ASPLOS'22, Figs. 3, 8, 9, 10, 11 and 13) as sweeps of
//! `configs/paper/`, and the claims the paper makes about each in words, checked against what a
//! sweep measured.
//!
//! Why a module of its own: a reader who has the paper wants one command per figure
//! (`pktgen paper fig8-nat`) that runs its setup, draws nmdp's curves beside the paper's reported
//! points and says, claim by claim, whether nmdp reproduces it. The sweeps themselves are plain
//! sweep specs (any of them runs alone with `pktgen sweep`); this module knows which specs make up
//! the paper, what the paper says about them (transcribed with the section each number comes
//! from, `docs/reference/pcie-nic-model.md` §8 lists them) and how to check each statement.
//! `docs/paper-figures.md` shows the results and says where and why nmdp disagrees.

use crate::plot::{LinePlot, Marker, Series, XScale};
use crate::sweep::{SweepResult, SweepRow, value_text};
use serde_json::Value;

/// One figure: the sweep spec that runs it and how its claims are checked.
pub struct Figure {
    /// The name (`fig8-nat`), also the spec's file stem under `configs/paper/`.
    pub name: &'static str,
    /// What the figure shows, for the printed table's heading.
    pub title: &'static str,
    /// The axis the figure's table and plots run along.
    pub x: &'static str,
    /// The claims the paper makes about the figure, checked against the rows.
    check: fn(&Rows) -> Result<Vec<Claim>, String>,
    /// The paper's reported throughput points `(series, x, Gb/s)` drawn beside nmdp's.
    reference: &'static [(&'static str, f64, f64)],
}

/// The figures in the order `all` runs them.
pub const FIGURES: [Figure; 7] = [
    Figure {
        name: "fig3-l3fwd",
        title: "Fig. 3: l3fwd at 100 Gb/s, 1500 B, vs cores",
        x: "cores",
        check: fig3,
        reference: &[("host", 2.0, 100.0)],
    },
    Figure {
        name: "fig8-nat",
        title: "Fig. 8 (NAT): 200 Gb/s, 1500 B, vs cores",
        x: "cores",
        check: |r| fig8(r, "NAT", 14, 12),
        reference: &[("nic-inline", 14.0, 200.0)],
    },
    Figure {
        name: "fig8-lb",
        title: "Fig. 8 (LB): 200 Gb/s, 1500 B, vs cores",
        x: "cores",
        check: |r| fig8(r, "LB", 12, 10),
        reference: &[("nic-inline", 12.0, 200.0)],
    },
    Figure {
        name: "fig9-nat",
        title: "Fig. 9 (NAT): 200 Gb/s, 1500 B, 14 cores, vs Rx ring size",
        x: "rx_ring",
        check: fig9,
        reference: &[],
    },
    Figure {
        name: "fig10-nat",
        title: "Fig. 10 (NAT): 200 Gb/s, 14 cores, vs frame size",
        x: "frame_size",
        check: fig10,
        reference: &[],
    },
    Figure {
        name: "fig11-nat",
        title: "Fig. 11 (NAT): 200 Gb/s, 1500 B, 14 cores, vs DDIO ways",
        x: "host.ddio_ways",
        check: fig11,
        reference: &[
            ("nic-inline", 0.0, 197.0),
            ("host", 9.0, 200.0),
            ("host", 11.0, 195.0),
        ],
    },
    Figure {
        name: "fig13-queues",
        title: "Fig. 13: l3fwd at 100 Gb/s, 1500 B, 7 cores, vs queues on nicmem",
        x: "vnic.nicmem_queues",
        check: fig13,
        reference: &[("", 1.0, 100.0)],
    },
];

/// The figures `names` select: `all`, or each a prefix of one or more figure names (`fig8`
/// selects both Fig. 8 sweeps); an unknown name is an error listing the figures.
pub fn select(names: &[String]) -> Result<Vec<&'static Figure>, String> {
    let all: Vec<&str> = FIGURES.iter().map(|f| f.name).collect();
    if names.is_empty() || names.iter().any(|n| n == "all") {
        return Ok(FIGURES.iter().collect());
    }
    let mut out: Vec<&'static Figure> = Vec::new();
    for n in names {
        let hits: Vec<&'static Figure> = FIGURES
            .iter()
            .filter(|f| f.name.starts_with(n.as_str()))
            .collect();
        if hits.is_empty() {
            return Err(format!(
                "no figure `{n}`; allowed: all, {} (or a prefix, e.g. fig8)",
                all.join(", ")
            ));
        }
        for h in hits {
            if !out.iter().any(|f| f.name == h.name) {
                out.push(h);
            }
        }
    }
    Ok(out)
}

/// A claim of the paper about a figure, with nmdp's number and whether it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    /// The figure (`Fig. 8`).
    pub figure: &'static str,
    /// The claim in words.
    pub text: String,
    /// The paper's value, with its source.
    pub paper: String,
    /// nmdp's value.
    pub nmdp: String,
    /// Whether nmdp reproduces the claim.
    pub holds: bool,
}

/// What the claims read from one sweep row.
#[derive(Clone, Debug, PartialEq)]
pub struct PaperRow {
    /// The point's parameters, as text (`mode` -> `host`).
    pub point: Vec<(String, String)>,
    /// Forwarded throughput, L1 Gb/s.
    pub gbps: f64,
    /// Forwarded throughput, percent of line rate.
    pub line_pct: f64,
    /// Median latency, us.
    pub p50_us: f64,
    /// PCIe upstream utilisation of the whole link, 0..1 (the run summary's
    /// `pcie.upstream_util`: upstream bytes against the link's capacity).
    pub pcie_up: f64,
    /// DDIO hit fraction, 0..1.
    pub ddio_hit: f64,
    /// DRAM utilisation, 0..1.
    pub dram_util: f64,
}

impl PaperRow {
    /// The figures of a sweep row (a single trial's detail holds the DUT's PCIe and host-memory
    /// statistics).
    pub fn of(r: &SweepRow) -> Self {
        let gbps = r.ndr_gbps.unwrap_or(0.0);
        let line_gbps = r.line_rate_pps * 8.0 * (r.frame_size + 20.0) / 1e9;
        let dut = r.detail.get("dut");
        let num = |path: &[&str], default: f64| {
            let mut v = dut;
            for p in path {
                v = v.and_then(|x| x.get(*p));
            }
            v.and_then(Value::as_f64).unwrap_or(default)
        };
        PaperRow {
            point: r
                .point
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().map_or(v.to_string(), str::to_string)))
                .collect(),
            gbps,
            line_pct: if line_gbps > 0.0 {
                100.0 * gbps / line_gbps
            } else {
                0.0
            },
            p50_us: r.latency_p50_ns.unwrap_or(0) as f64 / 1000.0,
            pcie_up: num(&["pcie", "upstream_util"], 0.0),
            ddio_hit: num(&["hostmem", "ddio_hit_rate"], 1.0),
            dram_util: num(&["hostmem", "util"], 0.0),
        }
    }

    /// The value of axis `key` at this point, as text.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.point
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A figure's rows.
pub struct Rows(pub Vec<PaperRow>);

impl Rows {
    /// The rows of a sweep.
    pub fn of(r: &SweepResult) -> Self {
        Rows(r.rows.iter().map(PaperRow::of).collect())
    }

    /// The row whose axes have the values `kv` (each `(key, value as text)`); an error names
    /// the point when the sweep did not run it.
    pub fn pick(&self, kv: &[(&str, &str)]) -> Result<&PaperRow, String> {
        self.0
            .iter()
            .find(|r| kv.iter().all(|(k, v)| r.get(k) == Some(*v)))
            .ok_or_else(|| {
                let p: Vec<String> = kv.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("the sweep has no point {}", p.join(" "))
            })
    }
}

fn claim(figure: &'static str, text: String, paper: &str, nmdp: String, holds: bool) -> Claim {
    Claim {
        figure,
        text,
        paper: paper.to_string(),
        nmdp,
        holds,
    }
}

fn fig3(rs: &Rows) -> Result<Vec<Claim>, String> {
    let h = rs.pick(&[("cores", "2"), ("mode", "host")])?;
    let n = rs.pick(&[("cores", "2"), ("mode", "nic-inline")])?;
    Ok(vec![
        claim(
            "Fig. 3",
            "host, 2 cores, 100 Gb/s: PCIe upstream saturated".into(),
            "99.8 % [§3.3]",
            format!("{:.1} %", 100.0 * h.pcie_up),
            h.pcie_up >= 0.95,
        ),
        claim(
            "Fig. 3",
            "nmNFV needs ~10 % of PCIe".into(),
            "~10 % [reference §4]",
            format!("{:.1} %", 100.0 * n.pcie_up),
            n.pcie_up <= 0.15,
        ),
    ])
}

fn fig8(rs: &Rows, nf: &str, at: u32, below: u32) -> Result<Vec<Claim>, String> {
    let (at_s, below_s) = (at.to_string(), below.to_string());
    let n_at = rs.pick(&[("cores", &at_s), ("mode", "nic-inline")])?;
    let n_below = rs.pick(&[("cores", &below_s), ("mode", "nic-inline")])?;
    let n14 = rs.pick(&[("cores", "14"), ("mode", "nic-inline")])?;
    let h14 = rs.pick(&[("cores", "14"), ("mode", "host")])?;
    let s14 = rs.pick(&[("cores", "14"), ("mode", "split")])?;
    let gain = n14.gbps / h14.gbps.max(1e-9) - 1.0;
    Ok(vec![
        claim(
            "Fig. 8",
            format!("{nf}: nmNFV at line rate with {at} cores, not {below}"),
            &format!("line rate at {at} [§6.2]"),
            format!("{:.1} % / {:.1} %", n_at.line_pct, n_below.line_pct),
            n_at.line_pct >= 99.5 && n_below.line_pct < 99.5,
        ),
        claim(
            "Fig. 8",
            format!("{nf}: host below line rate with 14 cores"),
            "below line rate [§6.2]",
            format!("{:.1} %", h14.line_pct),
            h14.line_pct < 99.0,
        ),
        claim(
            "Fig. 8",
            format!("{nf}: split trails host (14 cores)"),
            "split <= host [§6.2]",
            format!("{:.1} vs {:.1} Gb/s", s14.gbps, h14.gbps),
            s14.gbps <= h14.gbps + 0.5,
        ),
        claim(
            "Fig. 8",
            format!("{nf}: nmNFV throughput gain over host (14 cores)"),
            "up to +19 % [abstract]",
            format!("{:+.1} %", 100.0 * gain),
            gain >= 0.10,
        ),
    ])
}

fn fig9(rs: &Rows) -> Result<Vec<Claim>, String> {
    let lo = rs.pick(&[("rx_ring", "256"), ("mode", "host")])?;
    let hi = rs.pick(&[("rx_ring", "4096"), ("mode", "host")])?;
    let nlo = rs.pick(&[("rx_ring", "256"), ("mode", "nic-inline")])?;
    let nhi = rs.pick(&[("rx_ring", "4096"), ("mode", "nic-inline")])?;
    let nrel = nhi.gbps / nlo.gbps.max(1e-9) - 1.0;
    Ok(vec![
        claim(
            "Fig. 9",
            "NAT host: throughput falls as rings grow 256 -> 4096".into(),
            "-20 % [reference §8]",
            format!("{:+.1} %", 100.0 * (hi.gbps / lo.gbps.max(1e-9) - 1.0)),
            hi.gbps < 0.97 * lo.gbps,
        ),
        claim(
            "Fig. 9",
            "NAT nmNFV: insensitive to ring size".into(),
            "flat [reference §8]",
            format!("{:+.1} %", 100.0 * nrel),
            nrel.abs() < 0.01,
        ),
    ])
}

fn fig10(rs: &Rows) -> Result<Vec<Claim>, String> {
    let s64: Vec<f64> =
        rs.0.iter()
            .filter(|r| r.get("frame_size") == Some("64"))
            .map(|r| r.gbps)
            .collect();
    let (lo, hi) = s64
        .iter()
        .fold((f64::INFINITY, 0.0f64), |a, &g| (a.0.min(g), a.1.max(g)));
    let h = rs.pick(&[("frame_size", "1024"), ("mode", "host")])?;
    let n = rs.pick(&[("frame_size", "1024"), ("mode", "nic-inline")])?;
    let mut worse = Vec::new();
    for r in rs.0.iter().filter(|r| r.get("mode") == Some("nic-inline")) {
        let size = r.get("frame_size").unwrap_or("?");
        if r.gbps < rs.pick(&[("frame_size", size), ("mode", "host")])?.gbps - 0.5 {
            worse.push(size.to_string());
        }
    }
    Ok(vec![
        claim(
            "Fig. 10",
            "64 B is CPU-bound: every mode within 2 %".into(),
            "CPU-bound [reference §8]",
            format!("{lo:.1}..{hi:.1} Gb/s"),
            !s64.is_empty() && hi <= 1.02 * lo,
        ),
        claim(
            "Fig. 10",
            "nmNFV ahead of host from 1024 B".into(),
            "ahead above 1024 B [reference §8]",
            format!("{:.1} vs {:.1} Gb/s", n.gbps, h.gbps),
            n.gbps > h.gbps,
        ),
        claim(
            "Fig. 10",
            "nmNFV >= host at every size".into(),
            ">= everywhere [reference §8]",
            format!(
                "sizes below host: {}",
                if worse.is_empty() {
                    "none".to_string()
                } else {
                    worse.join(", ")
                }
            ),
            worse.is_empty(),
        ),
    ])
}

fn fig11(rs: &Rows) -> Result<Vec<Claim>, String> {
    let ways = "host.ddio_ways";
    let n0 = rs.pick(&[(ways, "0"), ("mode", "nic-inline")])?;
    let h11 = rs.pick(&[(ways, "11"), ("mode", "host")])?;
    let mut host: Vec<(u32, f64)> =
        rs.0.iter()
            .filter(|r| r.get("mode") == Some("host"))
            .filter_map(|r| Some((r.get(ways)?.parse().ok()?, r.line_pct)))
            .collect();
    host.sort_by_key(|h| h.0);
    let first = host.iter().find(|h| h.1 >= 99.5).map(|h| h.0);
    Ok(vec![
        claim(
            "Fig. 11",
            "NAT: nmNFV with DDIO off vs host with all ways, throughput".into(),
            "197 vs 195 Gb/s [reference §8]",
            format!("{:.1} vs {:.1} Gb/s", n0.gbps, h11.gbps),
            n0.gbps >= h11.gbps,
        ),
        claim(
            "Fig. 11",
            "NAT: nmNFV with DDIO off vs host with all ways, latency".into(),
            "22 vs 84 us [reference §8]",
            format!("{:.1} vs {:.1} us p50", n0.p50_us, h11.p50_us),
            n0.p50_us < h11.p50_us,
        ),
        claim(
            "Fig. 11",
            "NAT host reaches line rate at 9 DDIO ways".into(),
            "9 ways [reference §8]",
            first.map_or("never".into(), |w| format!("{w} ways")),
            first.is_some_and(|w| w <= 9),
        ),
    ])
}

fn fig13(rs: &Rows) -> Result<Vec<Claim>, String> {
    let q = "vnic.nicmem_queues";
    let one = rs.pick(&[(q, "1")])?;
    let none = rs.pick(&[(q, "0")])?;
    Ok(vec![claim(
        "Fig. 13",
        "1 of 7 nicmem queues removes the PCIe bottleneck".into(),
        "line rate [reference §8]",
        format!(
            "{:.1} % of line, PCIe up {:.1} % (0 queues: {:.1} %, {:.1} %)",
            one.line_pct,
            100.0 * one.pcie_up,
            none.line_pct,
            100.0 * none.pcie_up
        ),
        one.line_pct >= 99.5,
    )])
}

impl Figure {
    /// The claims of this figure checked against a sweep's result.
    pub fn claims(&self, r: &SweepResult) -> Result<Vec<Claim>, String> {
        (self.check)(&Rows::of(r)).map_err(|e| format!("{}: {e}", self.name))
    }

    /// The sweep's throughput plot with the paper's reported points beside nmdp's curves (one
    /// unconnected marker each, in the colour of the series it belongs to), and a note saying
    /// where they come from.
    pub fn throughput_plot(&self, r: &SweepResult) -> Option<LinePlot> {
        let mut plot = r
            .plots()
            .into_iter()
            .find(|(what, _)| what == "throughput")?
            .1;
        let x_of = |x: f64| match &plot.x_scale {
            XScale::Categories(c) => c
                .iter()
                .position(|v| v == &value_text_f64(x))
                .map(|i| i as f64),
            _ => Some(x),
        };
        let mut extra = Vec::new();
        for &(series, x, gbps) in self.reference {
            let Some(px) = x_of(x) else { continue };
            let color = plot
                .series
                .iter()
                .find(|s| series.is_empty() || s.name.ends_with(&format!("={series}")))
                .map_or(6, |s| s.color);
            let name = if series.is_empty() {
                "paper".to_string()
            } else {
                format!("paper: {series}")
            };
            match extra.iter_mut().find(|s: &&mut Series| s.name == name) {
                Some(s) => s.points.push((px, gbps)),
                None => extra.push(Series {
                    name,
                    points: vec![(px, gbps)],
                    dashed: true,
                    color,
                    marker: Marker::Cross,
                }),
            }
        }
        if !extra.is_empty() {
            plot.series.extend(extra);
            plot.notes.push(
                "paper: points the paper reports (nicmem §6, docs/reference/pcie-nic-model.md §8)"
                    .into(),
            );
        }
        Some(plot)
    }

    /// The figure's table: one line per point with throughput, share of line rate, p50
    /// latency, PCIe upstream, DDIO hit fraction and DRAM utilisation.
    pub fn table(&self, r: &SweepResult) -> Vec<String> {
        let mut out = vec![
            format!("{} ({})", self.title, self.name),
            format!(
                "  {:>8} {:>11} {:>8} {:>8} {:>9} {:>8} {:>6} {:>6}",
                short(self.x),
                "mode",
                "Gb/s",
                "% line",
                "p50 us",
                "PCIe up",
                "DDIO",
                "DRAM"
            ),
        ];
        for row in Rows::of(r).0 {
            out.push(format!(
                "  {:>8} {:>11} {:>8.1} {:>7.1}% {:>9.1} {:>7.1}% {:>6.2} {:>5.1}%",
                row.get(self.x).unwrap_or("-"),
                row.get("mode").unwrap_or("-"),
                row.gbps,
                row.line_pct,
                row.p50_us,
                100.0 * row.pcie_up,
                row.ddio_hit,
                100.0 * row.dram_util
            ));
        }
        out
    }
}

/// The last part of a dotted key (`host.ddio_ways` -> `ddio_ways`), for narrow table headings.
fn short(key: &str) -> &str {
    key.rsplit('.').next().unwrap_or(key)
}

/// An x value as the category text a sweep axis would show (`4.0` -> `4`).
fn value_text_f64(x: f64) -> String {
    if x.fract() == 0.0 {
        value_text(&toml::Value::Integer(x as i64))
    } else {
        value_text(&toml::Value::Float(x))
    }
}

/// The claims table as Markdown: claim, paper, nmdp, verdict.
pub fn claims_markdown(claims: &[Claim]) -> String {
    let mut s = String::from("| Figure: claim | Paper | nmdp | Holds |\n|---|---|---|---|\n");
    for c in claims {
        s.push_str(&format!(
            "| {}: {} | {} | {} | {} |\n",
            c.figure,
            c.text,
            c.paper,
            c.nmdp,
            if c.holds { "yes" } else { "no" }
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(point: &[(&str, &str)], gbps: f64, line_pct: f64) -> PaperRow {
        PaperRow {
            point: point
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            gbps,
            line_pct,
            p50_us: 10.0,
            pcie_up: 0.5,
            ddio_hit: 1.0,
            dram_util: 0.0,
        }
    }

    #[test]
    fn figures_are_selected_by_prefix_and_unknown_names_are_refused() {
        let names = |v: &[&str]| -> Vec<&str> {
            select(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap()
                .iter()
                .map(|f| f.name)
                .collect()
        };
        assert_eq!(names(&["fig8"]), ["fig8-nat", "fig8-lb"]);
        assert_eq!(names(&["all"]).len(), FIGURES.len());
        assert_eq!(names(&["fig3", "fig3-l3fwd"]), ["fig3-l3fwd"]);
        let e = select(&["fig7".to_string()]).err().unwrap();
        assert!(e.contains("fig7") && e.contains("fig13-queues"), "{e}");
    }

    #[test]
    fn every_figure_has_a_spec_in_configs_paper() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/paper");
        for f in &FIGURES {
            let spec = crate::sweep::load_spec(&dir.join(format!("{}.toml", f.name))).unwrap();
            assert!(
                spec.axis.iter().any(|a| a.key == f.x),
                "{}: no axis {}",
                f.name,
                f.x
            );
        }
    }

    #[test]
    fn fig8_claims_hold_or_fail_on_the_numbers() {
        let mut rows = Vec::new();
        for cores in ["10", "12", "14"] {
            for mode in ["host", "split", "nic-inline"] {
                let line = match (mode, cores) {
                    ("nic-inline", "12" | "14") => 100.0,
                    ("nic-inline", _) => 90.0,
                    _ => 85.0,
                };
                rows.push(row(&[("cores", cores), ("mode", mode)], 2.0 * line, line));
            }
        }
        let c = fig8(&Rows(rows), "LB", 12, 10).unwrap();
        assert_eq!(c.len(), 4);
        assert!(c.iter().all(|c| c.holds), "{c:?}");
        assert_eq!(c[3].nmdp, "+17.6 %");
        // nmNFV already at line rate with 10 cores: the first claim fails.
        let mut rows = Vec::new();
        for cores in ["10", "12", "14"] {
            for mode in ["host", "split", "nic-inline"] {
                rows.push(row(&[("cores", cores), ("mode", mode)], 200.0, 100.0));
            }
        }
        let c = fig8(&Rows(rows), "LB", 12, 10).unwrap();
        assert!(!c[0].holds && !c[1].holds && c[2].holds && !c[3].holds);
        let e = fig8(&Rows(Vec::new()), "LB", 12, 10).unwrap_err();
        assert!(e.contains("cores=12"), "{e}");
    }

    #[test]
    fn claims_print_as_a_markdown_table() {
        let c = fig13(&Rows(vec![
            row(&[("vnic.nicmem_queues", "0")], 96.8, 96.8),
            row(&[("vnic.nicmem_queues", "1")], 100.0, 100.0),
        ]))
        .unwrap();
        let md = claims_markdown(&c);
        assert!(md.contains("| Fig. 13: 1 of 7 nicmem queues"), "{md}");
        assert!(md.trim_end().ends_with("| yes |"), "{md}");
    }
}
