//! The nicmem dataplane: a split-first packet model, bursts and verdicts, the network-function
//! interface, datapath modes, the port abstraction, the per-core run loop, and the drivers.
//!
//! The module docs say what each part holds and why; the facts the models rest on, with their
//! sources, are in `docs/reference/`.

pub mod arena;
pub mod burst;
pub mod control;
pub mod driver;
pub mod link;
pub mod mode;
pub mod net;
pub mod nf;
pub mod packet;
pub mod pcap;
pub mod pcie_model;
pub mod port;
pub mod rss;
pub mod runloop;
pub mod steer;
pub mod telemetry;
pub mod testkit;
pub mod textfile;
pub mod unix;
pub mod verdict;

pub use burst::{
    Burst, DEFAULT_BURST, Describe, DescribeOut, HandleLayout, MAX_BURST, PREFETCH_AHEAD,
    PacketMut, PacketsMut, RxPacket, RxWriter, TxView,
};
pub use mode::DatapathMode;
pub use nf::{CounterValue, Counters, NetworkFunction, NfChain, NfCommand, NfContext};
pub use packet::{NicPayload, PacketOwner, PayloadLoc, PayloadRef, PayloadRing};
pub use port::{Capabilities, FaultCounts, Port, Queue, QueueStats};
pub use verdict::{Action, DropCounts, DropReason, Verdict};
