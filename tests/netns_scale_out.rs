//! Scale-out on real daemons (issue 20, docs/scale-out.md): runs `scripts/scale-out-demo.sh lb 2`
//! (two nmdp LB instances behind a router with ECMP, announced by BIRD 2 through the health
//! agent, 64 long-lived connections) killing an instance's dataplane (its health agent
//! withdraws the route), killing its whole host (the router's BGP hold time does), and draining
//! one; and `scripts/scale-out-demo.sh nat 2` (two NAT instances sharing one pool, 64
//! connections from 32 subscribers) killing an instance's dataplane, and its host with BFD on
//! the BGP sessions. The script checks and exits non-zero when (lb) fewer than 95 % of the
//! connections kept transferring or the drained instance did not stop cleanly, (nat) a
//! connection through the surviving instance was lost, or (both) the routes were not withdrawn
//! within the BGP hold time plus 1 s (with BFD: 1.3 s) or a new connection failed; this test
//! also reads its summary line. Needs root, the tools of `netns::skip_reason` and BIRD 2
//! (`bird`, `birdc`: apt-get install bird2); says why it skips otherwise, and fails instead
//! where `NMDP_REQUIRE_TOOLS=1` (as `.ci/run` sets where it can install them).

mod netns;

use std::process::Command;

use netns::{SERIAL, skip_reason};

fn why_not() -> Option<String> {
    if let Some(why) = skip_reason() {
        return Some(why);
    }
    let required = std::env::var("NMDP_REQUIRE_TOOLS").as_deref() == Ok("1");
    for tool in ["bird", "birdc"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            found || !required,
            "no `{tool}` (apt-get install bird2; NMDP_REQUIRE_TOOLS=1)"
        );
        if !found {
            return Some(format!("no `{tool}` (apt-get install bird2)"));
        }
    }
    None
}

/// Runs `scripts/scale-out-demo.sh WHAT 2 --seconds 20 EXTRA...`, which must succeed, and
/// returns its summary line; `None` when the test cannot run here (it says why).
fn demo(what: &str, extra: &[&str]) -> Option<String> {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = why_not() {
        eprintln!("skipped: {why}");
        return None;
    }
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/scale-out-demo.sh"
    ))
    .args([what, "2", "--seconds", "20"])
    .args(extra)
    .env("NMDP_DATAPLANE", env!("CARGO_BIN_EXE_dataplane"))
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scale-out-demo.sh {what} {extra:?} failed:\n{stdout}\n{stderr}"
    );
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("summary: "))
        .unwrap_or_else(|| panic!("no summary line:\n{stdout}"))
        .to_string();
    eprintln!("{summary}");
    Some(summary)
}

/// The `K of N` pairs of the `;`-separated part `part` of a summary, in order.
fn counts(summary: &str, part: usize) -> Vec<u64> {
    let text = summary.split("; ").nth(part).unwrap_or_default();
    let words: Vec<&str> = text.split([' ', ',']).collect();
    let mut pairs = Vec::new();
    for w in words.windows(3) {
        if w[1] == "of"
            && let (Ok(a), Ok(b)) = (w[0].parse(), w[2].parse())
        {
            pairs.push(a);
            pairs.push(b);
        }
    }
    pairs
}

fn lb(extra: &[&str]) {
    let Some(summary) = demo("lb", extra) else {
        return;
    };
    // "... instance 2; K of N connections kept transferring ..."
    let kept = counts(&summary, 1);
    assert_eq!(kept.len(), 2, "{summary}");
    assert!(kept[1] >= 60 && kept[0] * 100 >= kept[1] * 95, "{summary}");
    assert!(summary.contains(", 0 reset or failed;"), "{summary}");
    assert!(summary.contains("30 of 30 answered"), "{summary}");
}

fn nat(extra: &[&str]) {
    let Some(summary) = demo("nat", extra) else {
        return;
    };
    // "...; A of B connections through the survivors kept transferring, C of D through
    // instance 2 lost; ...; new connections after the event: E of F transferred"
    let c = counts(&summary, 1);
    assert_eq!(c.len(), 4, "{summary}");
    assert!(
        c[1] > 0 && c[3] > 0,
        "both instances carried connections: {summary}"
    );
    assert_eq!(c[1] + c[3], 64, "{summary}");
    assert_eq!(c[0], c[1], "a survivor's connection was lost: {summary}");
    assert_eq!(
        c[2], c[3],
        "the dead instance's connections were lost: {summary}"
    );
    assert_eq!(counts(&summary, 3), [30, 30], "{summary}");
}

#[test]
fn killing_one_of_two_lb_instances_keeps_the_connections() {
    lb(&[]);
}

#[test]
fn losing_the_host_of_one_of_two_lb_instances_keeps_the_connections() {
    lb(&["--host"]);
}

#[test]
fn draining_one_of_two_lb_instances_withdraws_it_and_keeps_the_connections() {
    lb(&["--drain"]);
}

#[test]
fn killing_one_of_two_nat_instances_loses_only_its_sessions() {
    nat(&[]);
}

#[test]
fn losing_the_host_of_one_of_two_nat_instances_with_bfd_loses_only_its_sessions() {
    nat(&["--host", "--bfd"]);
}
