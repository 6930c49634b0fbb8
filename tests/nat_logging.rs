//! NAT event logging over IPFIX end to end: `dataplane run` with `log_ipfix` pointing at a UDP
//! collector in the test. The messages are decoded here (RFC 7011 framing, the templates they
//! announce) and every session's create and delete record is checked against the NAT's own
//! counters; then, when `tshark` is installed, a capture of the same messages is decoded with
//! `tshark -d udp.port==4739,cflow` and must give the same records.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Run, run_to_end, tmp_dir};
use serde_json::Value;

/// A UDP collector on an ephemeral port that keeps every datagram until stopped.
struct Collector {
    port: u16,
    got: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Collector {
    fn start() -> Self {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let port = s.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (g, st) = (got.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut b = vec![0u8; 65536];
            loop {
                match s.recv(&mut b) {
                    Ok(n) => g.lock().unwrap().push(b[..n].to_vec()),
                    Err(_) if st.load(Ordering::Relaxed) => return,
                    Err(_) => {}
                }
            }
        });
        Self {
            port,
            got,
            stop,
            thread,
        }
    }

    /// What it has received so far.
    fn received(&self) -> Vec<Vec<u8>> {
        self.got.lock().unwrap().clone()
    }

    /// Everything received; the sender has finished when this is called (the run ended), so
    /// a quiet socket after the stop flag means nothing more is coming.
    fn finish(self) -> Vec<Vec<u8>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        std::mem::take(&mut self.got.lock().unwrap())
    }
}

fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}

fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes(b[o..o + 4].try_into().unwrap())
}

/// A session's inside 5-tuple as logged: source, source port, destination, destination port,
/// protocol.
type Session = (u64, u64, u64, u64, u64);

/// One decoded data record: information element -> value (big-endian integer).
type Record = BTreeMap<u16, u64>;

/// Decodes IPFIX messages (RFC 7011): checks the framing and the sequence numbers per
/// observation domain, learns templates, and returns every data record with its template ID.
fn decode(msgs: &[Vec<u8>]) -> Vec<(u16, Record)> {
    let mut templates: HashMap<(u32, u16), Vec<(u16, usize)>> = HashMap::new();
    let mut next_seq: HashMap<u32, u32> = HashMap::new();
    let mut out = Vec::new();
    for m in msgs {
        assert_eq!(be16(m, 0), 10, "IPFIX version 10");
        assert_eq!(be16(m, 2) as usize, m.len(), "message length field");
        let domain = be32(m, 12);
        let seq = be32(m, 8);
        let expect = next_seq.entry(domain).or_insert(0);
        assert_eq!(seq, *expect, "sequence number of domain {domain}");
        let mut o = 16;
        while o < m.len() {
            let (id, len) = (be16(m, o), be16(m, o + 2) as usize);
            assert!(len >= 4 && o + len <= m.len(), "set length {len} at {o}");
            let body = &m[o + 4..o + len];
            if id == 2 {
                let mut t = 0;
                while t + 4 <= body.len() {
                    let (tid, count) = (be16(body, t), be16(body, t + 2) as usize);
                    let fields = (0..count)
                        .map(|i| {
                            let f = t + 4 + 4 * i;
                            (be16(body, f), be16(body, f + 2) as usize)
                        })
                        .collect();
                    templates.insert((domain, tid), fields);
                    t += 4 + 4 * count;
                }
            } else {
                assert!(id >= 256, "set ID {id}");
                let fields = templates
                    .get(&(domain, id))
                    .unwrap_or_else(|| panic!("data set {id} before its template"));
                let rlen: usize = fields.iter().map(|f| f.1).sum();
                assert_eq!(body.len() % rlen, 0, "set {id} holds whole records");
                for r in body.chunks(rlen) {
                    let mut rec = Record::new();
                    let mut at = 0;
                    for &(ie, l) in fields {
                        let v = r[at..at + l]
                            .iter()
                            .fold(0u64, |a, &b| a << 8 | u64::from(b));
                        rec.insert(ie, v);
                        at += l;
                    }
                    out.push((id, rec));
                    *expect = expect.wrapping_add(1);
                }
            }
            o += len;
        }
    }
    out
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

const NAT_EVENT: u16 = 230;
const SRC_ADDR: u16 = 8;
const POST_NAT_SRC_ADDR: u16 = 225;
const SRC_PORT: u16 = 7;
const POST_NAPT_SRC_PORT: u16 = 227;
const DST_ADDR: u16 = 12;
const DST_PORT: u16 = 11;
const PROTO: u16 = 4;
const TIME_MS: u16 = 323;
const PORT_RANGE_START: u16 = 361;
const PORT_RANGE_END: u16 = 362;
const PORT_RANGE_STEP: u16 = 363;
const PORT_RANGE_PORTS: u16 = 364;

/// Runs `dataplane run` on a small NAT config logging to a collector; returns the JSON summary
/// and the messages received.
fn run_logged(tag: &str, traffic: &str, nat: &str) -> (Value, Vec<Vec<u8>>) {
    let c = Collector::start();
    let cfg = format!(
        "[run]\nworkers = 1\npackets = 4000\n\n\
         [datapath]\nmode = \"nic-inline\"\nsplit_offset = 64\ntx_inline = 64\nburst = 32\n\n\
         [vnic]\nrx_ring = 1024\ntx_ring = 1024\nnicmem = \"256KiB\"\n\n\
         [traffic]\nframe_size = 128\n{traffic}\n\n\
         [[pipeline]]\nname = \"nat\"\nnat_ip = \"10.0.0.1\"\nflows = 8192\n\
         log_ipfix = \"127.0.0.1:{}\"\n{nat}\n",
        c.port
    );
    let path = tmp_dir(&format!("nat-log-{tag}")).join("nat-log.toml");
    std::fs::write(&path, cfg).unwrap();
    let summary = run_to_end(&[&path]);
    (summary, c.finish())
}

fn count(v: &Value, path: &str) -> u64 {
    path.split('.')
        .fold(v, |v, k| &v[k])
        .as_u64()
        .unwrap_or_else(|| panic!("{path} missing in {v}"))
}

/// Every session the NAT creates and ends is logged once, with the inside and outside
/// endpoints it translated between: 4000 packets of 1000 flows paced over ~4.7 s of wall-clock
/// time (the NAT's clock), each flow seen every ~1.2 s with a 1 s UDP timeout, so sessions end
/// and start again during the run.
#[test]
fn every_session_create_and_delete_is_logged_and_decodes() {
    let t0 = now_ms();
    let (s, msgs) = run_logged(
        "sessions",
        "rate_gbps = 0.001\nflows = 1000\ndst_ip_count = 2",
        "udp_timeout_s = 1",
    );
    let t1 = now_ms();
    let nat = &s["nfs"]["nat"];
    let created = count(nat, "new_mappings");
    let ended = count(nat, "expired") + count(nat, "evicted");
    assert!(
        created > 1000,
        "flows were seen again after expiring: {created}"
    );
    assert!(ended > 0, "sessions expired during the run");
    assert_eq!(count(nat, "log.lost"), 0);
    assert_eq!(count(nat, "log.send_failed"), 0);
    assert_eq!(count(nat, "log.messages"), msgs.len() as u64);
    let recs = decode(&msgs);
    assert_eq!(count(nat, "log.records"), recs.len() as u64);

    // Replay the events: a session is created once, deleted once, after its creation.
    let mut live: HashMap<Session, (u64, u64)> = HashMap::new();
    let (mut creates, mut deletes) = (0, 0);
    for (tpl, r) in &recs {
        assert_eq!(*tpl, 256, "only session records in this run: {r:?}");
        let key = (
            r[&SRC_ADDR],
            r[&SRC_PORT],
            r[&DST_ADDR],
            r[&DST_PORT],
            r[&PROTO],
        );
        let outside = (r[&POST_NAT_SRC_ADDR], r[&POST_NAPT_SRC_PORT]);
        assert_eq!(outside.0, u64::from(u32::from(Ipv4Addr::new(10, 0, 0, 1))));
        assert!((1024..=65535).contains(&outside.1), "{r:?}");
        assert_eq!(r[&PROTO], 17);
        let src = Ipv4Addr::from(r[&SRC_ADDR] as u32);
        let dst = Ipv4Addr::from(r[&DST_ADDR] as u32);
        assert_eq!(src.octets()[0], 16, "inside sources are 16.x: {src}");
        assert!(
            dst == Ipv4Addr::new(48, 1, 1, 1) || dst == Ipv4Addr::new(48, 1, 1, 2),
            "{dst}"
        );
        assert!(
            r[&TIME_MS] + 1000 >= t0 && r[&TIME_MS] <= t1 + 1000,
            "time {} outside {t0}..{t1}",
            r[&TIME_MS]
        );
        match r[&NAT_EVENT] {
            4 => {
                creates += 1;
                assert!(live.insert(key, outside).is_none(), "created twice: {r:?}");
            }
            5 => {
                deletes += 1;
                let was = live.remove(&key);
                assert_eq!(was, Some(outside), "deleted without a create: {r:?}");
            }
            e => panic!("natEvent {e}"),
        }
    }
    assert_eq!(creates, created, "one create record per session");
    assert_eq!(deletes, ended, "one delete record per ended session");
    assert_eq!(live.len() as u64, count(nat, "active_mappings"));
    // Endpoint-independent mapping: an outside endpoint belongs to one inside endpoint.
    let mut owner = HashMap::new();
    for (k, o) in &live {
        let inside = (k.0, k.1);
        assert_eq!(*owner.entry(*o).or_insert(inside), inside, "{o:?} shared");
    }

    // tshark's cflow dissector reads the same session records.
    tshark_agrees(
        &msgs,
        &tmp_dir("nat-log-sessions-tshark").join("export.pcap"),
        &[
            "cflow.nat_event",
            "cflow.srcaddr",
            "cflow.srcport",
            "cflow.post_natsource_ipv4_address",
            "cflow.post_naptsource_transport_port",
            "cflow.dstaddr",
            "cflow.dstport",
            "cflow.protocol",
        ],
        recs.iter()
            .map(|(_, r)| {
                vec![
                    r[&NAT_EVENT].to_string(),
                    ip(r[&SRC_ADDR]),
                    r[&SRC_PORT].to_string(),
                    ip(r[&POST_NAT_SRC_ADDR]),
                    r[&POST_NAPT_SRC_PORT].to_string(),
                    ip(r[&DST_ADDR]),
                    r[&DST_PORT].to_string(),
                    r[&PROTO].to_string(),
                ]
            })
            .collect(),
    );
}

/// Writes the messages as UDP datagrams to port 4739 in a pcap (raw IPv4 link type).
fn write_pcap(msgs: &[Vec<u8>], path: &Path) {
    let mut f = Vec::new();
    f.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    f.extend_from_slice(&2u16.to_le_bytes());
    f.extend_from_slice(&4u16.to_le_bytes());
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&65535u32.to_le_bytes());
    f.extend_from_slice(&101u32.to_le_bytes()); // LINKTYPE_RAW
    for (i, m) in msgs.iter().enumerate() {
        let total = 20 + 8 + m.len();
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[127, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[127, 0, 0, 1]);
        let sum = ip
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum::<u32>();
        let sum = !((sum & 0xffff) + (sum >> 16)) as u16;
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        let mut udp = [0u8; 8];
        udp[0..2].copy_from_slice(&40000u16.to_be_bytes());
        udp[2..4].copy_from_slice(&4739u16.to_be_bytes());
        udp[4..6].copy_from_slice(&((8 + m.len()) as u16).to_be_bytes());
        f.extend_from_slice(&(i as u32).to_le_bytes());
        f.extend_from_slice(&0u32.to_le_bytes());
        f.extend_from_slice(&(total as u32).to_le_bytes());
        f.extend_from_slice(&(total as u32).to_le_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&udp);
        f.extend_from_slice(m);
    }
    std::fs::write(path, f).unwrap();
}

/// The values of `fields` in every data record tshark's cflow dissector reads from the
/// messages written as a capture, or `None` (said why) without tshark.
fn tshark_fields(msgs: &[Vec<u8>], pcap: &Path, fields: &[&str]) -> Option<Vec<Vec<String>>> {
    if Command::new("tshark").arg("--version").output().is_err() {
        println!("skipped the tshark decode: tshark is not installed (apt-get install tshark)");
        return None;
    }
    write_pcap(msgs, pcap);
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(pcap)
        .args(["-d", "udp.port==4739,cflow", "-T", "fields"])
        .args(["-E", "separator=/t", "-E", "aggregator=;"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut rows = Vec::new();
    for line in text.lines() {
        let cols: Vec<Vec<&str>> = line.split('\t').map(|c| c.split(';').collect()).collect();
        assert_eq!(cols.len(), fields.len(), "{line}");
        for i in 0..cols[0].len() {
            if cols[0][i].is_empty() {
                continue;
            }
            rows.push(cols.iter().map(|c| c[i].to_string()).collect::<Vec<_>>());
        }
    }
    Some(rows)
}

/// tshark's cflow dissector reads `fields` of the messages (written to `pcap`) as the in-test
/// decoder gives them (`rows`, one per record); nothing to check without tshark.
fn tshark_agrees(msgs: &[Vec<u8>], pcap: &Path, fields: &[&str], rows: Vec<Vec<String>>) {
    let Some(from_tshark) = tshark_fields(msgs, pcap, fields) else {
        return;
    };
    assert_eq!(from_tshark.len(), rows.len(), "records tshark decoded");
    assert_eq!(from_tshark, rows);
}

fn ip(v: u64) -> String {
    Ipv4Addr::from(v as u32).to_string()
}

/// A NAT with 7 outside ports and 200 flows runs out of ports: exhaustion is logged (natEvent
/// 12 with the outside address and protocol) at most `log_exhaustion_per_s` times a second, and
/// every refused mapping is either logged or counted as suppressed.
#[test]
fn port_exhaustion_is_logged_rate_limited_and_counted() {
    let t0 = now_ms();
    let (s, msgs) = run_logged(
        "exhausted",
        "flows = 200\ndst_ip_count = 1",
        "port_min = 1024\nport_max = 1030\nlog_exhaustion_per_s = 5",
    );
    let t1 = now_ms();
    let nat = &s["nfs"]["nat"];
    let exhausted = count(nat, "port_exhausted");
    assert!(exhausted > 100, "the 7 ports ran out: {exhausted}");
    let recs = decode(&msgs);
    let ex: Vec<&Record> = recs
        .iter()
        .filter(|(t, _)| *t == 257)
        .map(|(_, r)| r)
        .collect();
    assert!(!ex.is_empty());
    let seconds = (t1 / 1000 - t0 / 1000 + 1) as usize;
    assert!(
        ex.len() <= 5 * seconds,
        "{} records in {seconds} s",
        ex.len()
    );
    assert_eq!(
        ex.len() as u64 + count(nat, "log.exhaustion_suppressed"),
        exhausted
    );
    for r in ex {
        assert_eq!(r[&NAT_EVENT], 12);
        assert_eq!(
            r[&POST_NAT_SRC_ADDR],
            u64::from(u32::from(Ipv4Addr::new(10, 0, 0, 1)))
        );
        assert_eq!(r[&PROTO], 17);
    }
    let creates = recs
        .iter()
        .filter(|(t, r)| *t == 256 && r[&NAT_EVENT] == 4)
        .count() as u64;
    assert_eq!(creates, count(nat, "new_mappings"));
}

/// Port blocks: one allocation record per block (natEvent 16) and one release record when its
/// last mapping ends (17), no per-session records; blocks are aligned, owned by one subscriber
/// at a time, and the records agree with the NAT's counters. Paced like the session test, with
/// no port reuse hold, so blocks are released and allocated again during the run.
#[test]
fn port_blocks_are_logged_once_per_block() {
    let (s, msgs) = run_logged(
        "blocks",
        "rate_gbps = 0.001\nflows = 1000\ndst_ip_count = 2",
        "udp_timeout_s = 1\nport_reuse_hold_s = 0\nport_block = 64\nport_block_limit = 2",
    );
    let nat = &s["nfs"]["nat"];
    let allocated = count(nat, "port_blocks_allocated");
    let released = count(nat, "port_blocks_released");
    assert!(allocated > 1000 && released > 0, "{allocated} {released}");
    assert_eq!(count(nat, "log.lost"), 0);
    let recs = decode(&msgs);
    let mut owner: HashMap<u64, u64> = HashMap::new();
    let (mut allocs, mut frees) = (0, 0);
    for (tpl, r) in &recs {
        assert_eq!(*tpl, 258, "only port block records: {r:?}");
        let (first, last) = (r[&PORT_RANGE_START], r[&PORT_RANGE_END]);
        assert_eq!((first - 1024) % 64, 0, "aligned: {r:?}");
        assert_eq!(last, first + 63);
        assert_eq!((r[&PORT_RANGE_STEP], r[&PORT_RANGE_PORTS]), (1, 64));
        assert_eq!(
            r[&POST_NAT_SRC_ADDR],
            u64::from(u32::from(Ipv4Addr::new(10, 0, 0, 1)))
        );
        match r[&NAT_EVENT] {
            16 => {
                allocs += 1;
                let was = owner.insert(first, r[&SRC_ADDR]);
                assert_eq!(was, None, "block {first} allocated while owned");
            }
            17 => {
                frees += 1;
                assert_eq!(owner.remove(&first), Some(r[&SRC_ADDR]), "{r:?}");
            }
            e => panic!("natEvent {e}"),
        }
    }
    assert_eq!((allocs, frees), (allocated, released));
    assert_eq!(
        owner.len() as u64,
        allocated - released,
        "blocks held at the end"
    );
    // Each subscriber sends one flow: it never needs a second block.
    let mut subs: Vec<u64> = owner.values().copied().collect();
    subs.sort_unstable();
    subs.dedup();
    assert_eq!(subs.len(), owner.len());

    // tshark reads the same port block records.
    tshark_agrees(
        &msgs,
        &tmp_dir("nat-log-blocks-tshark").join("export.pcap"),
        &[
            "cflow.nat_event",
            "cflow.srcaddr",
            "cflow.post_natsource_ipv4_address",
            "cflow.port_range_start",
            "cflow.port_range_end",
            "cflow.port_range_num_ports",
        ],
        recs.iter()
            .map(|(_, r)| {
                vec![
                    r[&NAT_EVENT].to_string(),
                    ip(r[&SRC_ADDR]),
                    ip(r[&POST_NAT_SRC_ADDR]),
                    r[&PORT_RANGE_START].to_string(),
                    r[&PORT_RANGE_END].to_string(),
                    r[&PORT_RANGE_PORTS].to_string(),
                ]
            })
            .collect(),
    );
}

/// A worker whose traffic has stopped still sends its last records within `log_flush_ms`: the
/// run goes on idle (no more packets), and every create reaches the collector while it runs,
/// not only when it ends. (Without the idle flush the last records wait for the run's end and
/// this test times out.)
#[test]
fn an_idle_worker_sends_its_last_records_while_the_run_goes_on() {
    let c = Collector::start();
    let cfg = format!(
        "[run]\nworkers = 1\npackets = 300\nclock = \"wall\"\nstop_when_idle = false\n\n\
         [datapath]\nmode = \"nic-inline\"\nsplit_offset = 64\ntx_inline = 64\nburst = 32\n\n\
         [vnic]\nrx_ring = 1024\ntx_ring = 1024\nnicmem = \"256KiB\"\n\n\
         [traffic]\nframe_size = 128\nrate_gbps = 0.01\nflows = 300\ndst_ip_count = 1\n\n\
         [[pipeline]]\nname = \"nat\"\nnat_ip = \"10.0.0.1\"\nflows = 8192\n\
         log_ipfix = \"127.0.0.1:{}\"\nlog_flush_ms = 50\n",
        c.port
    );
    let path = tmp_dir("nat-log-idle").join("nat-idle.toml");
    std::fs::write(&path, cfg).unwrap();
    let mut run = Run::start("nat-log-idle", &[path.to_str().unwrap(), "-q"]);
    // Every create arrives while the run is still going (it never ends by itself).
    let creates = || {
        decode(&c.received())
            .iter()
            .filter(|(id, r)| *id == 256 && r[&NAT_EVENT] == 4)
            .count()
    };
    run.wait_for("/nmdp/summary", |_| creates() >= 300);
    run.signal("INT");
    let (st, _, err) = run.finish();
    assert_eq!(st.code(), Some(0), "{err}");
    assert_eq!(creates(), 300, "every create sent by the idle worker");
    c.finish();
}
