//! The route stage and the ports' slow path on a two-port virtual NIC, without a kernel: frames
//! go in through one port's link and the test reads what leaves by each port. ARP for a port's
//! address and for an address an NF owns is answered; a packet to a host whose MAC is unknown
//! waits while an ARP request goes out, and leaves (TTL decremented, MACs rewritten) once a host
//! answers; TTL 1 gets ICMP time exceeded; a next hop that never answers is retried and its
//! packets dropped as `arp_unresolved`. Frames are built and read with etherparse.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dataplane::driver::vnic::{VnicConfig, VnicPort};
use dataplane::link::{CollectSink, FrameSource, Link};
use dataplane::net::{ArpConfig, MacAddr, Network, SlowPath};
use dataplane::runloop::{RunControl, WorkerSetup, WorkerShared, run_worker};
use dataplane::{DatapathMode, DropReason, NfChain, Port};
use etherparse::{ArpOperation, ArpPacketSlice, Icmpv4Type, NetSlice, PacketBuilder, SlicedPacket};

const HOST: [u8; 6] = [2, 0, 0, 0, 0, 0x0c];
const SERVER: [u8; 6] = [2, 0, 0, 0, 0, 0x5e];

/// A source the test feeds while the worker runs; exhausted once closed and drained.
#[derive(Clone, Default)]
struct Feed(Arc<Mutex<(std::collections::VecDeque<Vec<u8>>, bool)>>);

impl Feed {
    fn push(&self, f: Vec<u8>) {
        self.0.lock().unwrap().0.push_back(f);
    }
    fn close(&self) {
        self.0.lock().unwrap().1 = true;
    }
}

impl FrameSource for Feed {
    fn next_frame(&mut self, buf: &mut [u8]) -> Option<usize> {
        let f = self.0.lock().unwrap().0.pop_front()?;
        buf[..f.len()].copy_from_slice(&f);
        Some(f.len())
    }
    fn exhausted(&self) -> bool {
        let g = self.0.lock().unwrap();
        g.1 && g.0.is_empty()
    }
}

fn ip(s: &str) -> [u8; 4] {
    s.parse::<std::net::Ipv4Addr>().unwrap().octets()
}

fn arp_frame(
    op: ArpOperation,
    from: ([u8; 6], &str),
    to: ([u8; 6], &str),
    dst: [u8; 6],
) -> Vec<u8> {
    let p = etherparse::ArpEthIpv4Packet {
        operation: op,
        sender_mac: from.0,
        sender_ipv4: ip(from.1),
        target_mac: to.0,
        target_ipv4: ip(to.1),
    };
    let mut v = Vec::new();
    PacketBuilder::ethernet2(from.0, dst)
        .arp(p.into())
        .write(&mut v)
        .unwrap();
    v
}

fn udp_frame(dst: &str, ttl: u8) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2(HOST, MacAddr::local_for_port(0).0)
        .ipv4(ip("10.0.1.2"), ip(dst), ttl)
        .udp(4000, 53)
        .write(&mut v, &[7u8; 100])
        .unwrap();
    v
}

/// Waits until `sink` holds a frame `want` accepts; returns it.
fn wait_for(sink: &CollectSink, want: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let t = Instant::now();
    loop {
        if let Some(f) = sink.frames.lock().unwrap().iter().find(|f| want(f)) {
            return f.clone();
        }
        assert!(t.elapsed() < Duration::from_secs(10), "no such frame left");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn arp_of(f: &[u8]) -> Option<etherparse::ArpEthIpv4Packet> {
    ArpPacketSlice::from_slice(f.get(14..)?)
        .ok()?
        .to_packet()
        .try_eth_ipv4()
        .ok()
}

#[test]
fn arp_resolution_ttl_and_owned_addresses_on_the_slow_path() {
    let ports = dataplane::testkit::inside_outside_ports("10.0.1.1/24", "10.0.2.1/24");
    let arp = ArpConfig {
        retry_ms: 50,
        retries: 2,
        ..ArpConfig::default()
    };
    let net = Arc::new(Network::new(ports, &[], &[], arp).unwrap());
    let unanswered = net.set_owned(&[("10.0.1.100".parse().unwrap(), None)]);
    assert!(unanswered.is_empty());
    let (feed0, feed1) = (Feed::default(), Feed::default());
    let (out0, out1) = (CollectSink::default(), CollectSink::default());
    let links = vec![
        (
            "in".to_string(),
            Link {
                rx: Box::new(feed0.clone()),
                tx: Box::new(out0.clone()),
            },
        ),
        (
            "out".to_string(),
            Link {
                rx: Box::new(feed1.clone()),
                tx: Box::new(out1.clone()),
            },
        ),
    ];
    let cfg = VnicConfig {
        mode: DatapathMode::NicInline,
        ..VnicConfig::default()
    };
    let mut nic = VnicPort::new_ports(links, 0, cfg).unwrap();
    let queues = nic.iter_mut().map(|p| p.take_queues().remove(0)).collect();
    let mut chain = NfChain::new();
    chain.push(Box::new(nfs::route::Route::new(net.clone()).unwrap()));
    let setup = WorkerSetup {
        queues,
        chain,
        egress: None,
        burst: 32,
        slow: Some(SlowPath::new(net.clone(), 0).unwrap()),
    };
    let control = RunControl::default();
    let report = std::thread::scope(|s| {
        let w = s.spawn(|| run_worker(0, 1, setup, &control, &WorkerShared::new(2)));
        // Gratuitous ARP for every owned address at start.
        let garp = wait_for(&out0, |f| {
            arp_of(f).is_some_and(|a| a.target_ipv4 == ip("10.0.1.100"))
        });
        assert_eq!(&garp[0..6], &[0xff; 6]);
        // An address put into service while it runs (a NAT's `pool add`) is announced too.
        assert!(net.own("10.0.1.101".parse().unwrap(), None));
        wait_for(&out0, |f| {
            arp_of(f).is_some_and(|a| {
                a.operation == ArpOperation::REQUEST
                    && a.sender_ipv4 == ip("10.0.1.101")
                    && a.target_ipv4 == ip("10.0.1.101")
            })
        });
        // ARP for the port's address and for the VIP an NF owns: answered from port 0's MAC.
        for (target, tag) in [("10.0.1.1", 1u8), ("10.0.1.100", 2)] {
            let mut me = HOST;
            me[4] = tag;
            feed0.push(arp_frame(
                ArpOperation::REQUEST,
                (me, "10.0.1.2"),
                ([0; 6], target),
                [0xff; 6],
            ));
            let r = wait_for(&out0, |f| {
                arp_of(f).is_some_and(|a| {
                    a.operation == ArpOperation::REPLY
                        && a.sender_ipv4 == ip(target)
                        && a.target_mac == me
                })
            });
            assert_eq!(
                &r[6..12],
                &MacAddr::local_for_port(0).0,
                "from the port's MAC"
            );
        }
        // A packet to a host not resolved yet: a request goes out of port 1, the packet waits.
        feed0.push(udp_frame("10.0.2.9", 64));
        let req = wait_for(&out1, |f| {
            arp_of(f).is_some_and(|a| a.target_ipv4 == ip("10.0.2.9"))
        });
        let a = arp_of(&req).unwrap();
        assert_eq!(
            (a.operation, a.sender_ipv4),
            (ArpOperation::REQUEST, ip("10.0.2.1"))
        );
        feed1.push(arp_frame(
            ArpOperation::REPLY,
            (SERVER, "10.0.2.9"),
            (MacAddr::local_for_port(1).0, "10.0.2.1"),
            MacAddr::local_for_port(1).0,
        ));
        let fwd = wait_for(&out1, |f| f.len() > 100 && f[12..14] == [8, 0]);
        assert_eq!(
            (&fwd[0..6], &fwd[6..12]),
            (&SERVER[..], &MacAddr::local_for_port(1).0[..])
        );
        let p = SlicedPacket::from_ethernet(&fwd).unwrap();
        let Some(NetSlice::Ipv4(v4)) = &p.net else {
            panic!("ipv4")
        };
        assert_eq!(v4.header().ttl(), 63);
        let h = v4.header().to_header();
        assert_eq!(h.calc_header_checksum(), h.header_checksum);
        // TTL 1: ICMP time exceeded back to the sender, from port 0's address.
        feed0.push(udp_frame("10.0.2.9", 1));
        let te = wait_for(&out0, |f| {
            SlicedPacket::from_ethernet(f).is_ok_and(|p| {
                matches!(&p.transport, Some(etherparse::TransportSlice::Icmpv4(i))
                    if matches!(i.icmp_type(), Icmpv4Type::TimeExceeded(_)))
            })
        });
        assert_eq!(&te[0..6], &HOST, "to the previous hop");
        // A host that never answers: two requests, then its packets are dropped.
        feed0.push(udp_frame("10.0.2.77", 64));
        let t = Instant::now();
        while net.counters().snapshot().arp_unresolved_drops == 0 {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "resolution never failed"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        feed0.close();
        feed1.close();
        w.join().unwrap()
    });
    for p in &mut nic {
        p.join();
    }
    let s = net.counters().snapshot();
    assert_eq!(s.arp_replies_sent, 2);
    assert_eq!(s.arp_resolved, 1);
    assert_eq!(s.icmp_time_exceeded_sent, 1);
    assert!(s.arp_requests_sent >= 3, "{s:?}");
    assert_eq!(
        s.arp_gratuitous_sent, 4,
        "10.0.1.1, 10.0.2.1, the VIP and the address put in service at run time"
    );
    assert_eq!(report.drops.get(DropReason::TTL_EXPIRED), 1);
    assert_eq!(
        report
            .drops
            .get(DropReason::by_name("arp_unresolved").unwrap()),
        1
    );
    let to_unknown = out1
        .frames
        .lock()
        .unwrap()
        .iter()
        .filter(|f| arp_of(f).is_some_and(|a| a.target_ipv4 == ip("10.0.2.77")))
        .count();
    assert_eq!(to_unknown, 2, "retried once, then given up");
}
