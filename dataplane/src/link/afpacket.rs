//! `link = "afpacket:IFNAME"`: the port's wire is an existing Linux interface (one end of a veth
//! pair, a physical NIC) through an AF_PACKET socket: every frame arriving at the interface
//! reaches the port, every frame the port transmits leaves by the interface.
//!
//! The socket is bound to the interface, non-blocking, puts the interface in promiscuous mode
//! (the port has its own MAC address, which the interface's filter would otherwise drop), does
//! not see the frames the host itself sends out of the interface, and asks the kernel for each
//! frame's status. A veth delivers what its peer's stack handed it, which may be a frame whose
//! TCP/UDP checksum was left to offload: the link finishes those (a wire carries finished
//! checksums) and counts them. A TSO/GRO super-frame longer than a link carries cannot be
//! delivered and is counted as `rx_oversize`: turn segmentation offload off on the sending side
//! (`ethtool -K IF tx off`, which also turns TSO off).
//!
//! The `unsafe` here is FFI (`libc` system calls), each call with its `// SAFETY:` comment.

use std::sync::Arc;

use super::fd::{Fd, KernelLinkCounters, complete_l4_checksum, os_error};
use super::{FrameSink, FrameSource, Link};

/// `ETH_P_ALL` in network byte order, as AF_PACKET takes protocols.
fn all_protocols() -> u16 {
    (libc::ETH_P_ALL as u16).to_be()
}

/// Opens an AF_PACKET socket on interface `name` (in this network namespace) and returns it as
/// a link with its counters. Errors say what failed and what the machine needs.
pub fn open(name: &str) -> Result<(Link, Arc<KernelLinkCounters>), String> {
    let cname = std::ffi::CString::new(name)
        .map_err(|_| format!("afpacket:{name}: the name contains a NUL byte"))?;
    // SAFETY: a valid NUL-terminated string.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        return Err(format!(
            "afpacket:{name}: no interface `{name}` in this network namespace (`ip link` lists \
             them; run the dataplane in the namespace that holds it, e.g. `ip netns exec NS`)"
        ));
    }
    // SAFETY: plain socket creation; the result is checked.
    let s = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::c_int::from(all_protocols()),
        )
    };
    if s < 0 {
        return Err(os_error(&format!(
            "afpacket:{name}: cannot open an AF_PACKET socket (needs CAP_NET_RAW)"
        )));
    }
    let fd = Fd::new(s);
    let on: libc::c_int = 1;
    for (opt, what) in [
        (libc::PACKET_AUXDATA, "PACKET_AUXDATA"),
        (libc::PACKET_IGNORE_OUTGOING, "PACKET_IGNORE_OUTGOING"),
    ] {
        // SAFETY: valid descriptor, option and an int value of the size given.
        let rc = unsafe {
            libc::setsockopt(
                fd.raw(),
                libc::SOL_PACKET,
                opt,
                (&on as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(os_error(&format!("afpacket:{name}: {what}")));
        }
    }
    let rcvbuf: libc::c_int = 4 << 20;
    // SAFETY: as above; a larger receive buffer absorbs bursts (the kernel caps it at rmem_max).
    unsafe {
        libc::setsockopt(
            fd.raw(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&rcvbuf as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    // SAFETY: `sockaddr_ll` is plain old data; all zero is valid before the fields are set.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = all_protocols();
    sll.sll_ifindex = ifindex as libc::c_int;
    // SAFETY: a valid sockaddr_ll of the size given.
    let rc = unsafe {
        libc::bind(
            fd.raw(),
            (&sll as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(os_error(&format!("afpacket:{name}: bind")));
    }
    // SAFETY: `packet_mreq` is plain old data.
    let mut mreq: libc::packet_mreq = unsafe { std::mem::zeroed() };
    mreq.mr_ifindex = ifindex as libc::c_int;
    mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
    // SAFETY: a valid packet_mreq of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd.raw(),
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            (&mreq as *const libc::packet_mreq).cast(),
            size_of::<libc::packet_mreq>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(os_error(&format!("afpacket:{name}: promiscuous mode")));
    }
    let counters = Arc::new(KernelLinkCounters::default());
    Ok((
        Link {
            rx: Box::new(PacketRx {
                fd: fd.clone(),
                counters: counters.clone(),
            }),
            tx: Box::new(PacketTx {
                fd,
                counters: counters.clone(),
            }),
        },
        counters,
    ))
}

struct PacketRx {
    fd: Arc<Fd>,
    counters: Arc<KernelLinkCounters>,
}

/// Room for one control message holding a `tpacket_auxdata`.
const CMSG_SPACE: usize = 64;

impl FrameSource for PacketRx {
    fn next_frame(&mut self, buf: &mut [u8]) -> Option<usize> {
        loop {
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            let mut cbuf = [0u64; CMSG_SPACE / 8];
            // SAFETY: `msghdr` is plain old data; the pointers set below stay valid for the call.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = CMSG_SPACE as _;
            // SAFETY: `msg` names a buffer and a control buffer valid for writes of their lengths.
            let n = unsafe { libc::recvmsg(self.fd.raw(), &mut msg, libc::MSG_TRUNC) };
            if n < 0 {
                let e = std::io::Error::last_os_error().raw_os_error();
                if !matches!(e, Some(libc::EAGAIN) | Some(libc::EINTR)) {
                    KernelLinkCounters::inc(&self.counters.rx_errors);
                }
                return None;
            }
            let n = n as usize;
            if n > buf.len() {
                KernelLinkCounters::inc(&self.counters.rx_oversize);
                continue;
            }
            if csum_not_ready(&msg) && complete_l4_checksum(&mut buf[..n]) {
                KernelLinkCounters::inc(&self.counters.rx_checksums_completed);
            }
            KernelLinkCounters::inc(&self.counters.rx_frames);
            return Some(n);
        }
    }

    fn exhausted(&self) -> bool {
        false
    }
}

/// True when the frame's auxiliary data says its checksum was left to offload.
fn csum_not_ready(msg: &libc::msghdr) -> bool {
    // SAFETY: `msg` was filled by recvmsg; the CMSG macros walk its control buffer within
    // `msg_controllen`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == libc::PACKET_AUXDATA {
                let aux = libc::CMSG_DATA(c)
                    .cast::<libc::tpacket_auxdata>()
                    .read_unaligned();
                return aux.tp_status & libc::TP_STATUS_CSUMNOTREADY != 0;
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    false
}

struct PacketTx {
    fd: Arc<Fd>,
    counters: Arc<KernelLinkCounters>,
}

impl FrameSink for PacketTx {
    fn deliver(&mut self, frame: &[u8]) {
        // SAFETY: `frame` is valid for reads of its length; the socket is bound to the
        // interface, so no address is needed.
        let n = unsafe { libc::send(self.fd.raw(), frame.as_ptr().cast(), frame.len(), 0) };
        if n == frame.len() as isize {
            KernelLinkCounters::inc(&self.counters.tx_frames);
        } else {
            KernelLinkCounters::inc(&self.counters.tx_errors);
        }
    }
}
