//! The endpoint's counters, read from C by name (`rdm4_counters`).
//!
//! The table is append-only: a counter keeps its index and its meaning
//! from the release that added it on, and new ones come at the end, so a
//! program that reads the counters it knows by name keeps working. The
//! udp device's counters read 0 on other devices. After the fixed ones
//! come the traffic counters (`engine::Traffic`): `tx_<TYPE>` then
//! `rx_<TYPE>` for every packet type of protocol v4 in type order, then
//! `ops_<protocol>` and `bytes_<protocol>` in `engine::Proto` order;
//! counters added later go after them.

use std::ffi::{c_char, CStr, CString};
use std::sync::OnceLock;

use super::{ep_call, rdm4_ep};
use crate::device::udp::UdpStats;
use crate::engine::{Proto, Stats, Traffic};
use crate::wire::PacketType;

/// One counter: its name and how to read it from the engine's and the
/// udp device's statistics.
struct Counter {
    name: &'static CStr,
    read: fn(&Stats, &UdpStats) -> u64,
}

/// Every counter, in its stable order.
const COUNTERS: &[Counter] = &[
    Counter { name: c"rx_packets", read: |s, _| s.rx_packets },
    Counter { name: c"tx_packets", read: |s, _| s.tx_packets },
    Counter { name: c"drop_malformed", read: |s, _| s.malformed },
    Counter { name: c"drop_stale_connid", read: |s, _| s.stale_connid },
    Counter { name: c"drop_unknown_sender", read: |s, _| s.unknown_sender },
    Counter { name: c"protocol_errors", read: |s, _| s.protocol_errors },
    Counter { name: c"access_errors", read: |s, _| s.access_errors },
    Counter { name: c"deferred", read: |s, _| s.deferred },
    Counter { name: c"udp_datagrams_sent", read: |_, u| u.datagrams_sent },
    Counter { name: c"udp_send_calls", read: |_, u| u.send_calls },
    Counter { name: c"udp_recv_calls", read: |_, u| u.recv_calls },
    Counter { name: c"udp_retransmits", read: |_, u| u.retransmits },
    Counter { name: c"udp_duplicates", read: |_, u| u.duplicates },
    Counter { name: c"udp_drop_malformed", read: |_, u| u.malformed },
    Counter { name: c"udp_drop_stale_connid", read: |_, u| u.stale },
    Counter { name: c"udp_drop_too_far", read: |_, u| u.too_far },
    Counter { name: c"udp_rdma_refused", read: |_, u| u.rdma_refused },
    Counter { name: c"udp_injected_drops", read: |_, u| u.injected_drops },
    Counter { name: c"request_timeouts", read: |s, _| s.timeouts },
    Counter { name: c"udp_timeouts", read: |_, u| u.timeouts },
    Counter { name: c"udp_peers_given_up", read: |_, u| u.peers_given_up },
];

/// Counters added after the traffic counters, in their stable order.
const LATER: &[Counter] = &[
    Counter { name: c"udp_peers_refused", read: |_, u| u.peers_refused },
    Counter { name: c"udp_probes", read: |_, u| u.probes },
    Counter { name: c"udp_kept", read: |_, u| u.kept },
    Counter { name: c"drop_peer_limit", read: |s, _| s.refused_peers },
    Counter { name: c"udp_drop_rdma_malformed", read: |_, u| u.rdma_malformed },
    Counter { name: c"udp_drop_rdma_unmatched", read: |_, u| u.rdma_unmatched },
    Counter { name: c"udp_drop_unknown_control", read: |_, u| u.unknown_control },
    Counter { name: c"udp_drop_strangers", read: |_, u| u.strangers_over },
    Counter { name: c"udp_drop_from_lost", read: |_, u| u.from_lost },
    Counter { name: c"udp_spurious_retransmits", read: |_, u| u.spurious },
    Counter { name: c"udp_tail_probes", read: |_, u| u.tail_probes },
];

/// Reads the endpoint's counters from index `first` on: up to `max` of
/// them, each counter's name into `names[i]` (a static string: never
/// freed, valid for the life of the process) and its value into
/// `values[i]`; either array may be NULL to skip it. Names never change
/// meaning, and a new release adds counters only after the old ones, so
/// a program that looks its counters up by name keeps working; call with
/// increasing `first` until it returns 0 to read them all. The counters
/// (packets received and sent, packets dropped by reason — malformed,
/// stale connection id, unknown sender —, protocol and remote-access
/// errors, packets deferred past the unexpected limit, the udp device's
/// datagrams, system calls, retransmissions, duplicates, drops and
/// refusals, 0 on other devices, requests ended by their timeout, the udp
/// device's retransmission timeouts and peers given up; then
/// packets sent and received by type, `tx_<TYPE>` and `rx_<TYPE>` for
/// every packet type of protocol v4, e.g. `tx_EAGER_TAGRTM`, `rx_CTS`;
/// then operations and their bytes by the protocol they took,
/// `ops_<protocol>` and `bytes_<protocol>`: `msg_eager`, `msg_medium`,
/// `msg_longcts`, `msg_longread`, `msg_runtread`, `write_direct`,
/// `write_eager`, `write_longcts`, `write_longread`, `read_direct`,
/// `read_short`, `read_longcts`, `atomic`, `atomic_direct`; then the udp
/// device's peers given up because their host reported their port closed
/// (`udp_peers_refused`), probes sent to silent peers (`udp_probes`) and
/// packets its responder kept while the application was away
/// (`udp_kept`), packets from new senders dropped at the peer limit
/// (`drop_peer_limit`, see `rdm4_ep_attr.max_peers`), and the udp
/// device's further drops by reason: RDMA datagrams malformed or out of
/// bounds (`udp_drop_rdma_malformed`) or for no operation of ours
/// (`udp_drop_rdma_unmatched`), acknowledgements, closes and probes from
/// senders it keeps no state for (`udp_drop_unknown_control`), datagrams
/// of new senders past the 4096 it keeps uninserted
/// (`udp_drop_strangers`) and of peers given up or closed
/// (`udp_drop_from_lost`); `udp_drop_malformed` counts bad headers; and
/// the retransmissions peers reported they already had
/// (`udp_spurious_retransmits`), and the datagrams sent again to probe a
/// silent flight while the retransmission timeout's floor is raised
/// (`udp_tail_probes`, also counted in `udp_retransmits`)) count from the
/// endpoint's open.
///
/// Returns how many it wrote (0 when `first` is past the last);
/// `RDM4_EBADHANDLE`. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn rdm4_counters(
    ep: *mut rdm4_ep,
    first: usize,
    names: *mut *const c_char,
    values: *mut u64,
    max: usize,
) -> i32 {
    ep_call(ep, |g| {
        let stats = g.ep.stats();
        let udp = g.ep.udp_stats();
        let traffic = g.ep.traffic();
        let traffic_names = traffic_names();
        let total = COUNTERS.len() + traffic_names.len() + LATER.len();
        let n = total.saturating_sub(first).min(max).min(i32::MAX as usize);
        for i in 0..n {
            let at = first + i;
            let (name, value) = match traffic_names.get(at.wrapping_sub(COUNTERS.len())) {
                _ if at < COUNTERS.len() => (COUNTERS[at].name, (COUNTERS[at].read)(&stats, &udp)),
                Some((name, source)) => (name.as_c_str(), source.read(traffic)),
                None => {
                    let c = &LATER[at - COUNTERS.len() - traffic_names.len()];
                    (c.name, (c.read)(&stats, &udp))
                }
            };
            // SAFETY: the caller's arrays hold `max` entries; i < n <= max.
            unsafe {
                if !names.is_null() {
                    names.add(i).write(name.as_ptr());
                }
                if !values.is_null() {
                    values.add(i).write(value);
                }
            }
        }
        Ok(n as i32)
    })
}

/// Where a traffic counter's value comes from.
enum Source {
    Tx(u8),
    Rx(u8),
    Ops(Proto),
    Bytes(Proto),
}

impl Source {
    fn read(&self, t: &Traffic) -> u64 {
        match *self {
            Source::Tx(b) => t.tx[usize::from(b)],
            Source::Rx(b) => t.rx[usize::from(b)],
            Source::Ops(p) => t.ops(p),
            Source::Bytes(p) => t.bytes[p as usize],
        }
    }
}

/// The traffic counters' names (made once, kept for the process's life)
/// and sources, in their stable order.
fn traffic_names() -> &'static [(CString, Source)] {
    static NAMES: OnceLock<Vec<(CString, Source)>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let types: Vec<PacketType> = (0..=u8::MAX).filter_map(PacketType::from_u8).collect();
        let name = |s: String| CString::new(s).unwrap_or_default();
        let mut v = Vec::new();
        v.extend(types.iter().map(|t| (name(format!("tx_{}", t.name())), Source::Tx(*t as u8))));
        v.extend(types.iter().map(|t| (name(format!("rx_{}", t.name())), Source::Rx(*t as u8))));
        v.extend(Proto::ALL.iter().map(|p| (name(format!("ops_{}", p.name())), Source::Ops(*p))));
        v.extend(Proto::ALL.iter().map(|p| (name(format!("bytes_{}", p.name())), Source::Bytes(*p))));
        v
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_names_are_unique() {
        let mut names: Vec<&CStr> = COUNTERS.iter().chain(LATER).map(|c| c.name).collect();
        names.extend(traffic_names().iter().map(|(n, _)| n.as_c_str()));
        let all = names.len();
        assert!(all > COUNTERS.len() + 100, "the traffic counters: {all}");
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all);
    }
}
