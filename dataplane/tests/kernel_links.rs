//! The links to the Linux kernel against a real kernel, in a network namespace of their own:
//! AF_PACKET on both ends of a veth pair, and a TAP device whose kernel side answers ARP. These
//! need root (CAP_NET_ADMIN), `ip` and `/dev/net/tun`; without them each test says why it skips.

use std::process::Command;
use std::time::{Duration, Instant};

use dataplane::link::kernel::KernelLinkSpec;
use dataplane::link::{Link, MAX_WIRE_FRAME};

/// Why the tests cannot run here, if they cannot.
fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (needs CAP_NET_ADMIN for network namespaces)".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("no `ip` command (apt-get install iproute2)".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    None
}

/// A network namespace deleted when dropped.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("nmdp-lt-{tag}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).status();
        sh(&["ip", "netns", "add", &name]);
        Netns(name)
    }

    fn ip(&self, args: &str) {
        let mut v = vec!["ip", "-n", &self.0];
        v.extend(args.split_whitespace());
        sh(&v);
    }

    /// Runs `f` on a thread that entered this namespace (sockets it opens stay there).
    fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/var/run/netns/{}", self.0);
        std::thread::scope(|s| {
            s.spawn(|| {
                let file = std::fs::File::open(&path).expect("netns file");
                use std::os::fd::AsRawFd;
                // SAFETY: a valid namespace descriptor; only this thread changes namespace.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .expect("namespace thread")
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits up to 3 s for a frame on `link` that `want` accepts.
fn wait_for(link: &mut Link, want: impl Fn(&[u8]) -> bool) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; MAX_WIRE_FRAME];
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(3) {
        match link.rx.next_frame(&mut buf) {
            Some(n) if want(&buf[..n]) => return Some(buf[..n].to_vec()),
            Some(_) => {}
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    None
}

#[test]
fn afpacket_carries_frames_across_a_veth_pair() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let ns = Netns::new("af");
    ns.ip("link add va type veth peer name vb");
    ns.ip("link set va up");
    ns.ip("link set vb up");
    ns.run(|| {
        let (mut a, ca) = KernelLinkSpec::parse("afpacket:va")
            .unwrap()
            .open()
            .unwrap();
        let (mut b, cb) = KernelLinkSpec::parse("afpacket:vb")
            .unwrap()
            .open()
            .unwrap();
        let mut frame = vec![0u8; 200];
        frame[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xb]);
        frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xa]);
        frame[12..14].copy_from_slice(&[0x88, 0xb5]);
        for (i, x) in frame[14..].iter_mut().enumerate() {
            *x = i as u8;
        }
        a.tx.deliver(&frame);
        let got = wait_for(&mut b, |f| f[12..14] == [0x88, 0xb5]).expect("frame crossed");
        assert_eq!(
            got, frame,
            "byte for byte, to a MAC that is not the interface's"
        );
        let tx = ca.snapshot();
        assert!(tx.contains(&("tx_frames", 1)), "{tx:?}");
        assert!(
            cb.snapshot()
                .iter()
                .any(|&(k, v)| k == "rx_frames" && v >= 1)
        );
        assert!(
            KernelLinkSpec::parse("afpacket:nosuchif0")
                .unwrap()
                .open()
                .is_err(),
            "a missing interface is an error"
        );
    });
}

#[test]
fn a_tap_device_reaches_the_kernel_stack() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let ns = Netns::new("tap");
    ns.run(|| {
        let (mut t, _c) = KernelLinkSpec::parse("tap:nmdptap0")
            .unwrap()
            .open()
            .unwrap();
        sh(&["ip", "addr", "add", "10.77.0.1/24", "dev", "nmdptap0"]);
        // An ARP request from 10.77.0.2 (us, on the wire side) for the kernel's 10.77.0.1.
        let me = dataplane::net::MacAddr([2, 0, 0, 0, 0, 0x22]);
        let mut req = vec![0xffu8; 6];
        req.extend_from_slice(&me.0);
        req.extend_from_slice(&[0x08, 0x06]);
        let mut arp = [0u8; 28];
        wire::arp::ArpView::new_checked(&mut arp[..]).unwrap().fill(
            wire::arp::ARP_OP_REQUEST,
            (me.0, 0x0a4d_0002),
            ([0; 6], 0x0a4d_0001),
        );
        req.extend_from_slice(&arp);
        req.resize(60, 0);
        t.tx.deliver(&req);
        let reply = wait_for(&mut t, |f| {
            f.len() >= 42 && f[12..14] == [0x08, 0x06] && f[21] == 2
        })
        .expect("the kernel answered ARP through the TAP device");
        let v = wire::arp::ArpView::new_checked(&reply[14..42]).unwrap();
        assert_eq!((v.sender_ip(), v.target_mac()), (0x0a4d_0001, me.0));
    });
}
