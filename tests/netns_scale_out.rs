//! Scale-out on real daemons (issue 20, docs/scale-out.md): runs `scripts/scale-out-demo.sh lb 2`
//! (two nmdp LB instances behind a router with ECMP, announced by BIRD 2 through the health
//! agent, 64 long-lived connections) killing an instance's dataplane (its health agent
//! withdraws the route), killing its whole host (the router's BGP hold time does), and draining
//! one. The script
//! checks and exits non-zero when fewer than 95 % of the connections kept transferring, the
//! route was not withdrawn within the BGP hold time, a new connection failed, or the drained
//! instance did not stop cleanly; this test also reads its summary line. Needs root, the tools
//! of `netns::skip_reason` and BIRD 2 (`bird`, `birdc`: apt-get install bird2); says why it
//! skips otherwise.

mod netns;

use std::process::Command;

use netns::{SERIAL, skip_reason};

fn why_not() -> Option<String> {
    if let Some(why) = skip_reason() {
        return Some(why);
    }
    for tool in ["bird", "birdc"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("no `{tool}` (apt-get install bird2)"));
        }
    }
    None
}

fn demo(extra: &[&str]) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = why_not() {
        eprintln!("skipped: {why}");
        return;
    }
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/scale-out-demo.sh"
    ))
    .args(["lb", "2", "--seconds", "20"])
    .args(extra)
    .env("NMDP_DATAPLANE", env!("CARGO_BIN_EXE_dataplane"))
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scale-out-demo.sh {extra:?} failed:\n{stdout}\n{stderr}"
    );
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("summary: "))
        .unwrap_or_else(|| panic!("no summary line:\n{stdout}"));
    eprintln!("{summary}");
    // "... instance 2; K of N connections kept transferring ..."
    let kept: Vec<u64> = summary
        .split("; ")
        .nth(1)
        .and_then(|s| s.split(" connections").next())
        .map(|s| s.split(" of ").filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default();
    assert_eq!(kept.len(), 2, "{summary}");
    assert!(kept[1] >= 60 && kept[0] * 100 >= kept[1] * 95, "{summary}");
    assert!(summary.contains(", 0 reset or failed;"), "{summary}");
    assert!(summary.contains("30 of 30 answered"), "{summary}");
}

#[test]
fn killing_one_of_two_lb_instances_keeps_the_connections() {
    demo(&[]);
}

#[test]
fn losing_the_host_of_one_of_two_lb_instances_keeps_the_connections() {
    demo(&["--host"]);
}

#[test]
fn draining_one_of_two_lb_instances_withdraws_it_and_keeps_the_connections() {
    demo(&["--drain"]);
}
