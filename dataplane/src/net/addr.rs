//! Addresses as a config writes them and the network layer keeps them: an IPv4 prefix
//! (`192.168.1.1/24`, an interface address with its subnet), a MAC address (`02:00:00:00:00:01`),
//! and a port's addresses.

use std::net::Ipv4Addr;

/// An IPv4 address with a prefix length: an interface address with its subnet
/// (`192.168.1.1/24`) or a route's destination (`0.0.0.0/0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Prefix {
    /// The address as written (host bits kept: an interface address).
    pub addr: u32,
    /// Prefix length, 0..=32.
    pub len: u8,
}

impl Ipv4Prefix {
    /// The netmask of the prefix length.
    pub fn mask(&self) -> u32 {
        if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.len))
        }
    }

    /// The network address (host bits cleared).
    pub fn network(&self) -> u32 {
        self.addr & self.mask()
    }

    /// True when `ip` is inside the prefix.
    pub fn contains(&self, ip: u32) -> bool {
        ip & self.mask() == self.network()
    }

    /// The address as an [`Ipv4Addr`].
    pub fn ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.addr)
    }
}

impl std::str::FromStr for Ipv4Prefix {
    type Err = String;

    /// `a.b.c.d/len` (len 0..=32); a bare address is a /32.
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: Ipv4Addr = a.trim().parse().map_err(|_| {
            format!("`{s}` is not an IPv4 address with a prefix length (e.g. \"192.168.1.1/24\")")
        })?;
        let len = match l {
            None => 32,
            Some(l) => match l.trim().parse::<u8>() {
                Ok(n) if n <= 32 => n,
                _ => return Err(format!("`{s}`: prefix length `{l}` is not 0..=32")),
            },
        };
        Ok(Self {
            addr: u32::from(addr),
            len,
        })
    }
}

impl std::fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.ip(), self.len)
    }
}

/// An Ethernet MAC address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// The broadcast address.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// True for a multicast (or broadcast) address: the I/G bit of the first byte.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }

    /// The locally administered unicast address the virtual NIC gives port `port` when the
    /// config names none: `02:6e:6d:64:70:NN` (`nmdp` in ASCII, then the port index).
    pub fn local_for_port(port: u16) -> MacAddr {
        MacAddr([0x02, 0x6e, 0x6d, 0x64, 0x70, port as u8])
    }
}

impl std::str::FromStr for MacAddr {
    type Err = String;

    /// Six hexadecimal bytes separated by `:` or `-`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a MAC address (e.g. \"02:00:00:00:00:01\")");
        let parts: Vec<&str> = s.split([':', '-']).collect();
        if parts.len() != 6 {
            return Err(bad());
        }
        let mut m = [0u8; 6];
        for (b, p) in m.iter_mut().zip(&parts) {
            if p.len() != 2 {
                return Err(bad());
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        Ok(MacAddr(m))
    }
}

impl std::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// A port's addresses: its MAC, and optionally an IPv4 address with its subnet (which makes the
/// subnet a connected route and the address one the port answers ARP for).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortAddr {
    /// The port's name (for messages and the summary).
    pub name: String,
    /// The port's MAC address: the source of every frame the route stage and the slow path send.
    pub mac: MacAddr,
    /// The port's IPv4 address and subnet.
    pub ip: Option<Ipv4Prefix>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_and_match() {
        let p: Ipv4Prefix = "192.168.1.7/24".parse().unwrap();
        assert_eq!((p.addr, p.len), (0xc0a8_0107, 24));
        assert_eq!(p.network(), 0xc0a8_0100);
        assert!(p.contains(0xc0a8_01ff) && !p.contains(0xc0a8_0201));
        let all: Ipv4Prefix = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(0xdead_beef) && all.mask() == 0);
        assert_eq!("10.0.0.1".parse::<Ipv4Prefix>().unwrap().len, 32);
        assert_eq!(p.to_string(), "192.168.1.7/24");
        for bad in ["10.0.0.1/33", "10.0.0/8", "x/1", "10.0.0.1/"] {
            assert!(bad.parse::<Ipv4Prefix>().is_err(), "{bad}");
        }
    }

    #[test]
    fn macs_parse_and_print() {
        let m: MacAddr = "02:6E:6d:64:70:01".parse().unwrap();
        assert_eq!(m, MacAddr::local_for_port(1));
        assert_eq!(m.to_string(), "02:6e:6d:64:70:01");
        assert!(!m.is_multicast() && MacAddr::BROADCAST.is_multicast());
        for bad in [
            "02:00:00:00:00",
            "02:00:00:00:00:1",
            "zz:00:00:00:00:01",
            "",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
    }
}
