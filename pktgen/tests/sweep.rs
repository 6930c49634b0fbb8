//! Sweeps against the test DUT: the product of the axes, traffic keys routed to the generator
//! and the rest to the DUT factory, JSON/CSV/SVG/PNG output.

use pktgen::sweep::{NoProgress, Point, SweepSpec, load_spec, points, run_sweep, value_text};
use pktgen::testdut::{SimDut, SimDutConfig};
use pktgen::trial::{Dut, DutError};

const SPEC: &str = r#"
dut = "sim"
test = "ndr-pdr"
sets = ["queue=4"]

[[axis]]
key = "frame_size"
values = [64, 512, 1518]

[[axis]]
key = "mode"
values = ["slow", "fast"]

[plot]
x = "frame_size"
series = "mode"

[search]
preset = "quick"
pdr = 0.01
initial_trial_duration_s = 0.002
final_trial_duration_s = 0.008
duration_sum_s = 0.008
min_load_percent = 1.0

[traffic]
flows = 32
"#;

/// "slow" forwards 250 Mb/s, "fast" 800 Mb/s, of a 1 Gb/s link.
fn factory(dut: &str, sets: &[String], params: &Point) -> Result<Box<dyn Dut>, DutError> {
    assert_eq!(dut, "sim");
    assert_eq!(sets, ["queue=4"]);
    assert!(params.iter().all(|(k, _)| k == "mode"), "{params:?}");
    let mode = params
        .iter()
        .find(|(k, _)| k == "mode")
        .map(|(_, v)| value_text(v))
        .unwrap();
    let cap = match mode.as_str() {
        "slow" => 250e6,
        "fast" => 800e6,
        m => return Err(DutError(format!("mode {m}"))),
    };
    Ok(Box::new(SimDut::new(SimDutConfig {
        line_bps: 1e9,
        capacity_bps: Some(cap),
        queue_frames: 4,
        ..Default::default()
    })))
}

#[test]
fn product_of_axes_gives_rows_csv_json_and_plots() {
    let spec: SweepSpec = toml::from_str(SPEC).unwrap();
    assert_eq!(points(&spec.axis).len(), 6);
    let r = run_sweep(&spec, &mut factory, &mut NoProgress).unwrap();
    assert_eq!(r.rows.len(), 6);
    for row in &r.rows {
        let want = if row.point["mode"] == "slow" {
            0.25
        } else {
            0.8
        };
        let got = row.ndr_gbps.unwrap();
        assert!(
            (want * 0.995..=want * 1.03).contains(&got),
            "{:?}: {got} vs {want}",
            row.point
        );
        assert!(row.pdr_gbps.unwrap() >= got);
        assert_eq!(row.bounded_by.as_deref(), Some("queue_full"));
        assert!(row.loss_at_max.unwrap() > 0.1);
        assert!(row.deterministic);
        assert!(row.latency_p50_ns.unwrap() >= 1_000);
    }
    // Frame size went to the generator.
    assert_eq!(r.rows[4].frame_size, 1518.0);

    let csv = r.to_csv();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 7);
    assert!(
        lines[0].starts_with(
            "frame_size,mode,dut,dut_clock,dut_profile,dut_mode,dut_workers,dut_cpu_cost,preset,\
             mean_frame_size,flows,line_rate_pps,ndr_pps,ndr_gbps"
        ),
        "{}",
        lines[0]
    );
    // Every row states the clock, the preset and where the CPU cost came from.
    assert!(
        lines[1].contains(",virtual,") && lines[1].contains(",quick,"),
        "{}",
        lines[1]
    );
    assert!(lines[1].contains("test DUT model"), "{}", lines[1]);
    assert!(lines[1].starts_with("64,slow,"));
    assert!(lines[6].starts_with("1518,fast,"));

    let dir = std::env::temp_dir().join(format!("pktgen-sweep-{}", std::process::id()));
    let files = r.write(&dir, "t").unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "t.json",
        "t.csv",
        "t-throughput.svg",
        "t-throughput.png",
        "t-latency.svg",
        "t-latency.png",
        "t-loss.svg",
        "t-loss.png",
    ] {
        assert!(names.contains(&want.to_string()), "{names:?}");
    }
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("t.json")).unwrap()).unwrap();
    assert_eq!(j["rows"].as_array().unwrap().len(), 6);
    assert!(j["rows"][0]["detail"]["trials"].as_array().unwrap().len() > 3);
    let svg = std::fs::read_to_string(dir.join("t-throughput.svg")).unwrap();
    assert!(
        svg.contains("slow NDR") && svg.contains("fast PDR"),
        "legend"
    );

    // Same sweep again: identical JSON (virtual time).
    let again = run_sweep(&spec, &mut factory, &mut NoProgress).unwrap();
    assert_eq!(r.to_json(false), again.to_json(false));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_specs_are_rejected_with_the_key() {
    let dir = std::env::temp_dir().join(format!("pktgen-sweep-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("bad.toml");
    std::fs::write(&p, "dut = \"x\"\naxis = []\n").unwrap();
    let e = load_spec(&p).unwrap_err();
    assert!(e.contains("axis") && e.contains("bad.toml"), "{e}");
    std::fs::write(
        &p,
        "dut = \"x\"\ntest = \"ndr\"\n[[axis]]\nkey = \"a\"\nvalues = [1]\n",
    )
    .unwrap();
    let e = load_spec(&p).unwrap_err();
    assert!(e.contains("ndr-pdr"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);

    // A traffic value the generator rejects fails the point, naming it.
    let spec: SweepSpec = toml::from_str(&SPEC.replace("[64, 512, 1518]", "[63]")).unwrap();
    let e = run_sweep(&spec, &mut factory, &mut NoProgress).unwrap_err();
    assert!(e.0.contains("frame_size"), "{e}");
}
