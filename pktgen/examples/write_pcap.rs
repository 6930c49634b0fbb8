//! Writes generated frames to a pcap file (for Wireshark/tcpdump, or as a replay trace), then
//! replays the file through the checking sink to confirm it round-trips.
//!
//! ```text
//! cargo run -p pktgen --example write_pcap -- out.pcap [count] [frame_size] [flows] [udp|tcp]
//! ```

use dataplane::link::{FrameSink, FrameSource, MAX_WIRE_FRAME};
use dataplane::pcap::{PcapSink, PcapSource};
use pktgen::{CheckingSink, Generator, GeneratorConfig, L4Proto, report};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: write_pcap <out.pcap> [count] [frame_size] [flows] [udp|tcp]")?;
    let num = |i: usize, d: u64| -> Result<u64, Box<dyn std::error::Error>> {
        Ok(args.get(i).map(|a| a.parse()).transpose()?.unwrap_or(d))
    };
    let cfg = GeneratorConfig {
        count: Some(num(2, 10)?),
        frame_size: num(3, 64)? as u32,
        flows: num(4, 4)? as u32,
        proto: match args.get(5).map(String::as_str) {
            None | Some("udp") => L4Proto::Udp,
            Some("tcp") => L4Proto::Tcp,
            Some(other) => return Err(format!("unknown protocol `{other}` (udp or tcp)").into()),
        },
        udp_checksum: true,
        ..Default::default()
    };
    let mut generator = Generator::new(cfg.clone())?;
    let gc = generator.counters();
    let mut sink = PcapSink::create(path)?;
    let mut buf = vec![0u8; MAX_WIRE_FRAME];
    while let Some(n) = generator.next_frame(&mut buf) {
        sink.deliver(&buf[..n]);
    }
    let written = sink.close()?;

    let mut source = PcapSource::open(path)?;
    let mut check = CheckingSink::for_generator(&cfg);
    let sc = check.counters();
    while let Some(n) = source.next_frame(&mut buf) {
        check.deliver(&buf[..n]);
    }
    check.finish();
    let r = report(&gc, &sc);
    println!(
        "wrote {} frames ({} bytes) to {path}; replay: {r:?}",
        written.frames, written.bytes
    );
    if !r.clean() {
        return Err("replayed frames did not check clean".into());
    }
    Ok(())
}
