//! Traffic profiles: several streams per port, each a generator configuration (or a pcap file
//! to replay) with its own rate, merged on one port in order of intended departure time.
//!
//! A profile is TOML (see `configs/traffic/`):
//!
//! ```toml
//! line_gbps = 100                 # the port's line rate, for "%" rates
//!
//! [[stream]]
//! rate = "95%"                    # pps, bps (L1), bps-l2, % of line, or "max"
//! [stream.traffic]                # a pktgen GeneratorConfig
//! size_mix = "imix"
//! flows = 4130000
//! stream = 0
//!
//! [[stream]]                      # a low-rate latency stream, as TRex/CSIT use
//! rate = "1000pps"
//! [stream.traffic]
//! frame_size = 64
//! stream = 1
//! timestamps = true
//!
//! [[stream]]                      # replay a capture at a rate, 3 times
//! rate = "10Gbps"
//! pcap = "trace.pcap"
//! loops = 3
//! ```
//!
//! Streams without a rate share the port round robin (one frame each in turn). Replayed pcap
//! frames are preloaded into one buffer (no allocation or file I/O per frame) and paced by the
//! stream's rate with exact mixed-size arithmetic ([`crate::rate::Pacer`]); they carry no
//! signature, so the sink counts them as `not_ours`.

use crate::generator::{Generator, GeneratorConfig};
use crate::rate::{Pacer, Rate};
use crate::signature::L4Proto;
use dataplane::link::FrameSource;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One stream of a profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamProfile {
    /// Rate of this stream (`None`: share the port with the other unpaced streams).
    #[serde(default)]
    pub rate: Option<Rate>,
    /// The generated traffic (ignored for pcap streams).
    #[serde(default)]
    pub traffic: GeneratorConfig,
    /// Replay this capture instead of generating.
    #[serde(default)]
    pub pcap: Option<PathBuf>,
    /// Passes over the capture (0 = until stopped).
    #[serde(default = "one")]
    pub loops: u32,
}

fn one() -> u32 {
    1
}

/// A port's traffic: its line rate and streams.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficProfile {
    /// Line rate of the port, Gb/s.
    #[serde(default = "default_line")]
    pub line_gbps: f64,
    /// The streams.
    pub stream: Vec<StreamProfile>,
}

fn default_line() -> f64 {
    100.0
}

impl TrafficProfile {
    /// A profile of one unpaced stream.
    pub fn single(traffic: GeneratorConfig) -> Self {
        Self {
            line_gbps: default_line(),
            stream: vec![StreamProfile {
                rate: None,
                traffic,
                pcap: None,
                loops: 1,
            }],
        }
    }

    /// Loads a profile; errors name the file and the key.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("profile {}: cannot read: {e}", path.display()))?;
        let mut p: Self = toml::from_str(&text)
            .map_err(|e| format!("profile {}: {}", path.display(), e.message()))?;
        // Relative pcap paths are relative to the profile.
        for s in &mut p.stream {
            if let Some(f) = &mut s.pcap
                && f.is_relative()
                && let Some(dir) = path.parent()
            {
                *f = dir.join(&*f);
            }
        }
        p.validate()
            .map_err(|e| format!("profile {}: {e}", path.display()))?;
        Ok(p)
    }

    /// Checks the streams: valid traffic, distinct stream ids, valid rates.
    pub fn validate(&self) -> Result<(), String> {
        if self.stream.is_empty() {
            return Err("key `stream`: at least one [[stream]]".into());
        }
        let mut ids = std::collections::HashSet::new();
        for (i, s) in self.stream.iter().enumerate() {
            if let Some(r) = s.rate {
                r.validate().map_err(|e| format!("stream[{i}].rate: {e}"))?;
            }
            if s.pcap.is_none() {
                s.traffic
                    .validate()
                    .map_err(|e| format!("stream[{i}].traffic: {e}"))?;
                if !ids.insert(s.traffic.stream) {
                    return Err(format!(
                        "stream[{i}].traffic.stream: id {} is used twice; each stream needs its own id",
                        s.traffic.stream
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Frames of a capture, preloaded.
struct Replay {
    data: Vec<u8>,
    /// `(offset, len)` of each frame.
    frames: Vec<(usize, usize)>,
    next: usize,
    loops: u32,
    passes: u32,
}

impl Replay {
    fn open(path: &Path, loops: u32) -> Result<Self, String> {
        let all = dataplane::pcap::read_all(path).map_err(|e| e.to_string())?;
        if all.is_empty() {
            return Err(format!("{}: no frames", path.display()));
        }
        let mut data = Vec::with_capacity(all.iter().map(Vec::len).sum());
        let mut frames = Vec::with_capacity(all.len());
        for f in &all {
            frames.push((data.len(), f.len()));
            data.extend_from_slice(f);
        }
        Ok(Self {
            data,
            frames,
            next: 0,
            loops,
            passes: 0,
        })
    }

    fn done(&self) -> bool {
        self.loops != 0 && self.passes >= self.loops
    }

    fn next_len(&self) -> usize {
        self.frames[self.next].1
    }

    fn produce(&mut self, buf: &mut [u8]) -> Option<usize> {
        if self.done() {
            return None;
        }
        let (off, len) = self.frames[self.next];
        let out = buf.get_mut(..len)?;
        out.copy_from_slice(&self.data[off..off + len]);
        self.next += 1;
        if self.next == self.frames.len() {
            self.next = 0;
            self.passes += 1;
        }
        Some(len)
    }
}

enum Source {
    Gen(Box<Generator>),
    Pcap(Replay),
}

struct Stream {
    source: Source,
    pacer: Option<Pacer>,
}

impl Stream {
    fn done(&self) -> bool {
        match &self.source {
            Source::Gen(g) => g.done(),
            Source::Pcap(r) => r.done(),
        }
    }

    /// Size (FCS included) of the next frame.
    fn next_size(&self) -> u32 {
        match &self.source {
            Source::Gen(g) => g.next_frame_size(),
            Source::Pcap(r) => r.next_len() as u32 + crate::generator::FCS_LEN,
        }
    }
}

/// The merged traffic of a profile: a [`FrameSource`] that emits, at each call, the frame of the
/// stream whose next intended departure is earliest (unpaced streams take turns, after the
/// paced ones that are due).
pub struct PortTraffic {
    streams: Vec<Stream>,
    rr: usize,
}

impl PortTraffic {
    /// Builds the streams of `profile`.
    pub fn new(profile: &TrafficProfile) -> Result<Self, String> {
        profile.validate()?;
        let line = profile.line_gbps * 1e9;
        let mut streams = Vec::new();
        for (i, s) in profile.stream.iter().enumerate() {
            let source = match &s.pcap {
                Some(p) => Source::Pcap(
                    Replay::open(p, s.loops).map_err(|e| format!("stream[{i}].pcap: {e}"))?,
                ),
                None => Source::Gen(Box::new(
                    Generator::new(s.traffic.clone()).map_err(|e| format!("stream[{i}]: {e}"))?,
                )),
            };
            streams.push(Stream {
                source,
                pacer: s.rate.map(|r| Pacer::new(r, line)),
            });
        }
        Ok(Self { streams, rr: 0 })
    }

    /// The generators (e.g. for their counters), in stream order; `None` for pcap streams.
    pub fn generator(&self, i: usize) -> Option<&Generator> {
        match &self.streams.get(i)?.source {
            Source::Gen(g) => Some(g),
            Source::Pcap(_) => None,
        }
    }

    /// Writes the next frame and returns its length and intended departure time (ps from the
    /// start; unpaced frames get the time of the latest paced frame so far).
    pub fn next_timed(&mut self, buf: &mut [u8]) -> Option<(usize, u64)> {
        // Earliest paced stream.
        let mut best: Option<(usize, u64)> = None;
        for (i, s) in self.streams.iter().enumerate() {
            if let Some(p) = &s.pacer
                && !s.done()
            {
                let t = p.next_ps();
                if best.is_none_or(|(_, bt)| t < bt) {
                    best = Some((i, t));
                }
            }
        }
        let n = self.streams.len();
        let idx = match best {
            Some((i, _)) => {
                // Unpaced streams go between paced frames, taking turns.
                let mut pick = i;
                for k in 0..n {
                    let j = (self.rr + k) % n;
                    let s = &self.streams[j];
                    if s.pacer.is_none() && !s.done() {
                        pick = j;
                        self.rr = j + 1;
                        break;
                    }
                }
                pick
            }
            None => {
                let mut pick = None;
                for k in 0..n {
                    let j = (self.rr + k) % n;
                    if !self.streams[j].done() {
                        pick = Some(j);
                        self.rr = j + 1;
                        break;
                    }
                }
                pick?
            }
        };
        let now = best.map_or(0, |(_, t)| t);
        let s = &mut self.streams[idx];
        let size = s.next_size();
        let t = s.pacer.as_ref().map_or(now, Pacer::next_ps);
        let len = match &mut s.source {
            Source::Gen(g) => g.produce_at(buf, t / 1000)?,
            Source::Pcap(r) => r.produce(buf)?,
        };
        if let Some(p) = &mut s.pacer {
            p.advance(size);
        }
        Some((len, t))
    }
}

impl FrameSource for PortTraffic {
    fn next_frame(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.next_timed(buf).map(|(len, _)| len)
    }

    fn exhausted(&self) -> bool {
        self.streams.iter().all(Stream::done)
    }
}

/// Command-line changes to a generator configuration (`pktgen gen`, `pktgen dpdk-gen`): each
/// flag given replaces that key of every stream's `[traffic]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrafficOverrides {
    /// Frame size, FCS included (replaces a size mix).
    pub frame_size: Option<u32>,
    /// Size mix (`imix`, `64:7,594:4,1518:1`, ...).
    pub size_mix: Option<String>,
    /// Flows.
    pub flows: Option<u32>,
    /// `udp` or `tcp`.
    pub proto: Option<String>,
    /// `round-robin`, `uniform` or `zipf:<s>`.
    pub flow_dist: Option<String>,
    /// Carry departure timestamps (v2 signatures).
    pub timestamps: bool,
}

impl TrafficOverrides {
    /// Applies the overrides; errors name the flag and what is allowed.
    pub fn apply(&self, t: &mut GeneratorConfig) -> Result<(), String> {
        if let Some(v) = self.frame_size {
            t.frame_size = v;
            t.size_mix = None;
        }
        if let Some(v) = &self.size_mix {
            t.size_mix = Some(v.parse().map_err(|e| format!("--size-mix: {e}"))?);
        }
        if let Some(v) = self.flows {
            t.flows = v;
        }
        if let Some(v) = &self.proto {
            t.proto = match v.as_str() {
                "udp" => L4Proto::Udp,
                "tcp" => L4Proto::Tcp,
                o => return Err(format!("--proto: `{o}`; allowed udp, tcp")),
            };
        }
        if let Some(v) = &self.flow_dist {
            t.flow_dist = v.parse().map_err(|e| format!("--flow-dist: {e}"))?;
        }
        if self.timestamps {
            t.timestamps = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::CheckingSink;
    use dataplane::link::{FrameSink, MAX_WIRE_FRAME};

    #[test]
    fn overrides_replace_the_keys_given_and_name_the_flag_on_errors() {
        let mut t = GeneratorConfig {
            size_mix: Some("imix".parse().unwrap()),
            ..GeneratorConfig::default()
        };
        let o = TrafficOverrides {
            frame_size: Some(128),
            flows: Some(7),
            proto: Some("tcp".into()),
            timestamps: true,
            ..TrafficOverrides::default()
        };
        o.apply(&mut t).unwrap();
        assert_eq!((t.frame_size, t.flows, t.proto), (128, 7, L4Proto::Tcp));
        assert!(t.size_mix.is_none(), "a frame size replaces the size mix");
        assert!(t.timestamps);
        for (bad, flag) in [
            (
                TrafficOverrides {
                    proto: Some("sctp".into()),
                    ..TrafficOverrides::default()
                },
                "--proto",
            ),
            (
                TrafficOverrides {
                    size_mix: Some("64:x".into()),
                    ..TrafficOverrides::default()
                },
                "--size-mix",
            ),
            (
                TrafficOverrides {
                    flow_dist: Some("zipf:-1".into()),
                    ..TrafficOverrides::default()
                },
                "--flow-dist",
            ),
        ] {
            let e = bad.apply(&mut t).unwrap_err();
            assert!(e.starts_with(flag), "{e}");
        }
    }

    #[test]
    fn two_paced_streams_interleave_by_time_and_keep_their_own_sequences() {
        let p: TrafficProfile = toml::from_str(
            r#"
            line_gbps = 1
            [[stream]]
            rate = "3Mpps"
            [stream.traffic]
            frame_size = 64
            count = 300
            stream = 0
            [[stream]]
            rate = "1Mpps"
            [stream.traffic]
            size_mix = "imix"
            count = 100
            stream = 5
            timestamps = true
            "#,
        )
        .unwrap();
        let mut port = PortTraffic::new(&p).unwrap();
        let mut buf = vec![0u8; MAX_WIRE_FRAME];
        let mut sink = CheckingSink::new(None);
        let mut times = Vec::new();
        while let Some((len, t)) = port.next_timed(&mut buf) {
            sink.check_at(&buf[..len], t / 1000 + 500);
            times.push(t);
        }
        sink.finish();
        assert!(port.exhausted());
        assert_eq!(times.len(), 400);
        assert!(
            times.windows(2).all(|w| w[0] <= w[1]),
            "departures in time order"
        );
        // 100 µs of traffic: both streams end together.
        assert!(*times.last().unwrap() < 100_000_000);
        let c = sink.counters();
        assert_eq!((c.stream(0).unique, c.stream(5).unique), (300, 100));
        assert_eq!(c.stream(0).reordered + c.stream(5).reordered, 0);
        // Only stream 5 is timestamped: exactly 500 ns each.
        let l = c.latency(5).unwrap();
        assert_eq!((l.count, l.min_ns, l.max_ns), (100, 500, 500));
        assert!(c.latency(0).is_none());
    }

    #[test]
    fn pcap_replay_loops_at_a_rate() {
        let dir = std::env::temp_dir().join(format!("pktgen-prof-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pcap = dir.join("in.pcap");
        // Three frames of 60, 100 and 1514 bytes.
        let frames: Vec<Vec<u8>> = [60usize, 100, 1514]
            .iter()
            .map(|&n| vec![0xab; n])
            .collect();
        dataplane::pcap::write_all(&pcap, &frames).unwrap();
        let prof = dir.join("p.toml");
        std::fs::write(
            &prof,
            "[[stream]]\nrate = \"1Gbps\"\npcap = \"in.pcap\"\nloops = 2\n",
        )
        .unwrap();
        let p = TrafficProfile::load(&prof).unwrap();
        let mut port = PortTraffic::new(&p).unwrap();
        let mut buf = vec![0u8; MAX_WIRE_FRAME];
        let mut out = Vec::new();
        while let Some((len, t)) = port.next_timed(&mut buf) {
            out.push((len, t));
        }
        assert_eq!(
            out.iter().map(|o| o.0).collect::<Vec<_>>(),
            vec![60, 100, 1514, 60, 100, 1514]
        );
        // Exact mixed-size pacing at 1 Gb/s L1: frame k starts after the wire bits of 0..k.
        let wire = |len: u64| (len + 4 + 20) * 8 * 1000; // ps at 1 Gb/s
        assert_eq!(out[1].1, wire(60));
        assert_eq!(out[3].1, wire(60) + wire(100) + wire(1514));
        let _ = std::fs::remove_dir_all(&dir);
        let mut sink = CheckingSink::new(None);
        sink.deliver(&frames[0]);
        sink.finish();
        assert_eq!(sink.counters().snapshot().not_ours, 1);
    }

    #[test]
    fn profiles_are_validated() {
        let bad: TrafficProfile = toml::from_str(
            "[[stream]]\n[stream.traffic]\nstream = 1\n[[stream]]\n[stream.traffic]\nstream = 1\n",
        )
        .unwrap();
        assert!(bad.validate().unwrap_err().contains("used twice"));
        let e = toml::from_str::<TrafficProfile>("[[stream]]\nrate = \"fast\"\n").unwrap_err();
        assert!(e.to_string().contains("not a rate"), "{e}");
    }
}
