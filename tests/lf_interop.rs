//! rdm4 against a libfabric-behaviour peer of each release (issue 42):
//! every protocol and fallback both ways, RMA with one and several
//! `rma_iov`, every atomic op, delivery complete, failed reads. The tests
//! that pin a defect named by issue 42 say so; they fail until the engine
//! is fixed. The peer's reactions and the libfabric functions they come
//! from: `tests/common_lf/mod.rs`, `docs/libfabric-interop.md`.

#[path = "common_lf/mod.rs"]
mod lf;

use lf::{Outcome, Pair, Profile};
use rdm4::atomic_ops::{datatype, op};
use rdm4::device::sim::SimConfig;
use rdm4::device::Access;
use rdm4::engine::{Config, RecvOpts, RemoteBuf, SendFlags, SendOpts};
use rdm4::mem::OwnedBuf;
use rdm4::wire::{extra, Packet, PacketType as T};
use rdm4::Status;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// rdm4's HANDSHAKE `extra_info[0]` as the peer received it.
fn advertised(sim: SimConfig, cfg: Config) -> u64 {
    let mut p = Pair::with_sim(Profile::Today, sim, cfg);
    p.peer.trigger_handshake();
    assert!(p.run_until(100, |p| p.peer.their_extra.is_some()), "no HANDSHAKE");
    p.peer.their_extra.unwrap()
}

/// No packet of a type the release has no handler for reached it.
fn no_unknown_types(p: &Pair) {
    let bad: Vec<_> = p.peer.errors.iter().filter(|e| e.contains("invalid packet type")).collect();
    assert!(bad.is_empty(), "{:?}: rdm4 sent types the release does not know: {bad:?}", p.peer.profile);
}

// ----- extra_info[0] per configuration --------------------------------

#[test]
fn rdm4_advertises_the_extra_bits_of_its_configuration() {
    use extra::*;
    let rdma = SimConfig { rdma: true, ..SimConfig::default() };
    let full = RDMA_READ | DELIVERY_COMPLETE | CONNID_HEADER | RUNT | RDMA_WRITE | READ_NACK | PEER_ERROR;
    assert_eq!(full, 0x27B, "libfabric main's bits on a device with RDMA read and write");
    let cases = [
        ("rdma device", rdma.clone(), Config::default(), full),
        ("no rdma", SimConfig::default(), Config::default(), DELIVERY_COMPLETE | CONNID_HEADER | PEER_ERROR),
        ("legacy", rdma.clone(), Config { legacy: true, ..Config::default() }, 0),
        (
            "constant header",
            rdma.clone(),
            Config { constant_header: true, ..Config::default() },
            full | CONSTANT_HEADER_LENGTH,
        ),
        ("read off", rdma, Config { features_off: RDMA_READ, ..Config::default() }, full & !RDMA_READ),
    ];
    for (name, sim, cfg, want) in cases {
        assert_eq!(advertised(sim, cfg), want, "{name}");
    }
}

/// Issue 42, "Also": extra feature 5 promises RDMA write with immediate
/// data (libfabric writes CQ data by it); a device without it must not
/// advertise the feature.
#[test]
fn rdm4_does_not_advertise_rdma_write_without_write_with_immediate_data() {
    let sim = SimConfig { rdma: true, write_imm: false, ..SimConfig::default() };
    let bits = advertised(sim, Config::default());
    assert_eq!(bits & extra::RDMA_WRITE, 0, "advertised {bits:#x}");
}

// ----- messages ----------------------------------------------------------

/// rdm4 → peer: eager, medium, long-CTS (not to a baseline peer: see the
/// CTSDATA test), long-read and runting read where both sides read,
/// tagged and not, and DC where the release has it.
#[test]
fn messages_of_every_protocol_from_rdm4_reach_every_release() {
    for profile in Profile::ALL {
        let configs = [
            ("runt", Config::default()),
            ("longread", Config { runt_size: 0, ..Config::default() }),
            ("longcts", Config { features_off: extra::RDMA_READ, ..Config::default() }),
        ];
        for (name, cfg) in configs {
            let mut p = Pair::connected(profile, cfg);
            let mut sizes = vec![100, 20_000];
            if profile != Profile::Baseline {
                sizes.push(300_000);
            }
            let mut bufs = Vec::new();
            for (i, &len) in sizes.iter().enumerate() {
                for (tag, dc) in [(None, false), (Some(7), false), (None, true)] {
                    if dc && profile == Profile::Baseline {
                        continue;
                    }
                    let mut b = OwnedBuf::from_slice(&pattern(len, i as u8));
                    let opts = SendOpts { tag, context: bufs.len() as u64, ..SendOpts::default() };
                    p.ep.send_flagged(p.to_peer, b.buf(), opts, SendFlags { dc, ..SendFlags::default() }).unwrap();
                    bufs.push(b);
                }
            }
            let n = bufs.len();
            let ok = p.run_until(20_000, |p| p.cq.len() == n && p.peer.msgs.len() == n);
            assert!(
                ok,
                "{profile:?}/{name}: {} of {n} sends done, {} received; {:?}",
                p.cq.len(),
                p.peer.msgs.len(),
                p.peer.errors
            );
            for e in &p.cq {
                assert_eq!(e.status, Status::Success, "{profile:?}/{name}: send {}", e.context);
            }
            for (m, b) in p.peer.msgs.iter().zip(&bufs) {
                assert!(
                    m.data == b.bytes(),
                    "{profile:?}/{name}: {} of {} bytes differ",
                    m.ptype.name(),
                    b.bytes().len()
                );
            }
            no_unknown_types(&p);
        }
    }
}

/// peer → rdm4: every RTM protocol the release sends (long-read with RDMA
/// read, runting read from 1.17, DC from 1.14), into posted receives.
#[test]
fn messages_of_every_protocol_from_every_release_reach_rdm4() {
    for profile in Profile::ALL {
        let mut p = Pair::connected(profile, Config::default());
        let has = |bit| profile.extra() & bit != 0;
        let mut kinds =
            vec![(T::EagerMsgRtm, 100), (T::EagerTagRtm, 100), (T::MediumMsgRtm, 30_000), (T::LongctsTagRtm, 200_000)];
        if has(extra::DELIVERY_COMPLETE) {
            kinds.extend([(T::DcEagerMsgRtm, 100), (T::DcMediumTagRtm, 30_000), (T::DcLongctsMsgRtm, 200_000)]);
        }
        if has(extra::RDMA_READ) {
            kinds.extend([(T::LongreadMsgRtm, 200_000), (T::LongreadTagRtm, 200_000)]);
        }
        if has(extra::RUNT) {
            kinds.push((T::RuntreadMsgRtm, 200_000));
        }
        let mut ids = Vec::new();
        let mut rbufs = Vec::new();
        for (i, &(t, len)) in kinds.iter().enumerate() {
            let mut r = OwnedBuf::zeroed(len);
            let tagged = t.req_info().unwrap().tagged;
            let opts = RecvOpts { tag: tagged.then_some((i as u64, 0)), context: i as u64, ..RecvOpts::default() };
            p.ep.recv(r.buf(), opts).unwrap();
            rbufs.push(r);
            ids.push(p.peer.send_msg(t, &pattern(len, i as u8), tagged.then_some(i as u64)));
        }
        let n = kinds.len();
        let ok = p.run_until(20_000, |p| p.cq.len() == n && ids.iter().all(|id| p.peer.done.contains_key(id)));
        assert!(ok, "{profile:?}: {} of {n} received; peer errors {:?}", p.cq.len(), p.peer.errors);
        for e in &p.cq {
            let (t, len) = kinds[e.context as usize];
            assert_eq!(e.status, Status::Success, "{profile:?}: {}", t.name());
            assert!(
                rbufs[e.context as usize].bytes() == pattern(len, e.context as u8),
                "{profile:?}: {} data",
                t.name()
            );
        }
        for id in &ids {
            assert_eq!(p.peer.done[id], Outcome::Ok(Vec::new()), "{profile:?}");
        }
    }
}

/// Issue 42, "Also": CTSDATA carries the connid block only for a peer
/// that asked for it (extra request 3, `efa_rdm_peer_need_connid` up to
/// 2.5); a peer without the connid header reads the block as payload.
#[test]
fn ctsdata_to_a_peer_that_did_not_request_connid_carries_no_connid_block() {
    let cfg = Config { features_off: extra::RDMA_READ, ..Config::default() };
    let mut p = Pair::connected(Profile::Baseline, cfg);
    let data = pattern(200_000, 3);
    let mut b = OwnedBuf::from_slice(&data);
    p.ep.send(p.to_peer, b.buf(), SendOpts::default()).unwrap();
    assert!(p.run_until(5000, |p| !p.peer.msgs.is_empty()), "not received");
    let with_block = p.to_peer_of(T::CtsData).iter().filter(|c| u16::from_le_bytes([c[2], c[3]]) & 0x8000 != 0).count();
    assert_eq!(with_block, 0, "CTSDATA with the connid block to a peer that did not request it");
    assert!(p.peer.msgs[0].data == data, "the baseline peer received other bytes");
}

// ----- READ_NACK ---------------------------------------------------------

/// rdm4's long-read (`runt` 0) or runting-read message nacked by a
/// release with READ_NACK: it goes on by long-CTS
/// (`efa_rdm_pke_handle_read_nack_recv` on the other side).
fn nacked_message_falls_back(runt: usize) {
    for profile in [Profile::V2_0, Profile::Today] {
        let mut p = Pair::connected(profile, Config { runt_size: runt, ..Config::default() });
        p.peer.knobs.cannot_read = true;
        let data = pattern(300_000, 9);
        let mut b = OwnedBuf::from_slice(&data);
        p.ep.send(p.to_peer, b.buf(), SendOpts::default()).unwrap();
        let ok = p.run_until(5000, |p| !p.cq.is_empty() && !p.peer.msgs.is_empty());
        let offs: Vec<u64> =
            p.to_peer_of(T::CtsData).iter().map(|c| u64::from_le_bytes(c[16..24].try_into().unwrap())).collect();
        assert!(
            ok,
            "{profile:?} runt {runt}: not done (cq {:?}, {} msgs); sent {:?}, CTSDATA at {offs:?}; peer errors {:?}",
            p.cq,
            p.peer.msgs.len(),
            p.types_to_peer(),
            p.peer.errors
        );
        assert_eq!(p.cq[0].status, Status::Success, "{profile:?} runt {runt}");
        assert!(p.peer.msgs[0].data == data, "{profile:?} runt {runt}: data differ");
        assert!(p.types_to_peer().contains(&"LONGCTS_MSGRTM"), "{profile:?}: {:?}", p.types_to_peer());
    }
}

#[test]
fn a_nacked_longread_message_from_rdm4_falls_back_to_longcts() {
    nacked_message_falls_back(0);
}

/// Not named by issue 42: after a nacked runting read, libfabric's
/// receiver keeps the runt (its rxe has `bytes_received` = runt) and the
/// sender's CTSDATA continue from the runt's end
/// (`efa_rdm_pke_init_longcts_msgrtm` with READ_NACK: "continue a runting
/// read transfer"). rdm4 sends from offset 0 again.
#[test]
fn a_nacked_runtread_message_from_rdm4_continues_after_the_runt() {
    nacked_message_falls_back(256 * 1024);
}

/// Issue 42 case 1: libfabric (2.0 on) nacks a LONGREAD_RTW it cannot
/// read and expects the writer to fall back to (DC_)LONGCTS_RTW.
#[test]
fn a_nacked_longread_rtw_from_rdm4_falls_back_to_longcts_rtw() {
    for profile in [Profile::V2_0, Profile::Today] {
        // No direct RDMA write: the write goes by LONGREAD_RTW.
        let cfg = Config { features_off: extra::RDMA_WRITE, request_timeout_ns: 0, ..Config::default() };
        let mut p = Pair::connected(profile, cfg);
        p.peer.knobs.cannot_read = true;
        let region = p.peer.region(&vec![0u8; 300_000]);
        let iov = p.peer.iov(region, 0, 300_000);
        let data = pattern(300_000, 4);
        let mut b = OwnedBuf::from_slice(&data);
        p.ep.write(p.to_peer, b.buf(), RemoteBuf { addr: iov.addr(), key: iov.key() }, None, 1).unwrap();
        let ok = p.run_until(5000, |p| !p.cq.is_empty());
        assert!(p.types_to_peer().contains(&"LONGREAD_RTW"), "{profile:?}: {:?}", p.types_to_peer());
        assert!(ok, "{profile:?}: the write never ended after READ_NACK (sent {:?})", p.types_to_peer());
        assert_eq!(p.cq[0].status, Status::Success, "{profile:?}");
        assert!(p.peer.bytes(region) == data, "{profile:?}: data");
    }
}

// ----- failed reads --------------------------------------------------------

/// Issue 42 case 2: a LONGREAD_RTW whose read fails at rdm4 is nacked to a
/// writer that has READ_NACK (it then writes by long-CTS): PEER_ERROR is a
/// type a 2.0–2.6 writer does not know.
#[test]
fn a_failed_read_of_a_longread_rtw_is_nacked_to_a_writer_with_read_nack() {
    for profile in [Profile::V2_0, Profile::Today] {
        let mut p = Pair::connected(profile, Config::default());
        let mut region = OwnedBuf::zeroed(300_000);
        let key = p.ep.mr_reg(region.buf(), Access::REMOTE_WRITE).unwrap();
        let data = pattern(300_000, 5);
        let target = [rdm4::wire::RmaIov::new(region.buf().addr(), 300_000, key)];
        let id = p.peer.write(T::LongreadRtw, &data, &target, None);
        p.peer.withdraw(id);
        let ok = p.run_until(5000, |p| p.peer.done.contains_key(&id));
        no_unknown_types(&p);
        assert!(ok, "{profile:?}: the peer's write never ended; rdm4 sent {:?}", p.types_to_peer());
        if profile == Profile::V2_0 {
            assert_eq!(p.peer.done[&id], Outcome::Ok(Vec::new()), "{profile:?}");
            // A write without delivery complete ends at the writer once its
            // bytes are out: the target takes them in the steps after.
            p.settle(100);
            assert!(region.bytes() == data, "{profile:?}: data after the long-CTS fallback");
        }
    }
}

/// Issue 42 case 3: a sender with RDMA read but neither READ_NACK nor
/// PEER_ERROR (1.14–1.19) whose long-read or runting-read message rdm4
/// fails to read (its device refuses the RDMA read) waits for an EOR and
/// would wait for ever. rdm4 reads the bytes by emulated reads instead
/// (SHORT/LONGCTS_RTR on the sender's `read_iov`, baseline protocol,
/// served from the sender's registration): every byte arrives, the
/// receive succeeds and the EOR ends the send.
#[test]
fn a_failed_read_of_a_message_from_a_sender_without_nack_or_peer_error_goes_by_emulated_reads() {
    for profile in [Profile::V1_14, Profile::V1_17, Profile::V1_19] {
        let mut kinds = vec![T::LongreadMsgRtm];
        if profile >= Profile::V1_17 {
            kinds.push(T::RuntreadMsgRtm);
        }
        for t in kinds {
            let sim = SimConfig { rdma: true, copy_gathered: true, fail_reads: true, ..SimConfig::default() };
            let mut p = Pair::with_sim(profile, sim, Config::default());
            p.connect();
            let mut r = OwnedBuf::zeroed(200_000);
            p.ep.recv(r.buf(), RecvOpts::default()).unwrap();
            let data = pattern(200_000, 1);
            let id = p.peer.send_msg(t, &data, None);
            let ok = p.run_until(5000, |p| !p.cq.is_empty() && p.peer.done.contains_key(&id));
            no_unknown_types(&p);
            let sent = p.types_to_peer();
            assert!(ok, "{profile:?} {}: not done; rdm4 sent {sent:?}", t.name());
            assert_eq!(p.cq[0].status, Status::Success, "{profile:?} {}", t.name());
            assert!(r.bytes() == data, "{profile:?} {}: every byte", t.name());
            assert_eq!(p.peer.done[&id], Outcome::Ok(Vec::new()), "{profile:?} {}", t.name());
            assert!(sent.iter().any(|t| t.ends_with("_RTR")), "{profile:?}: emulated reads, sent {sent:?}");
        }
    }
}

/// Case 3 when the sender's memory cannot be read at all (its registration
/// is gone): the emulated reads fail too (such a sender answers nothing;
/// the reads time out), the receive fails, and nothing tells the sender
/// its message arrived (no EOR) — it is left waiting, as libfabric leaves
/// it, rather than told a lost message was delivered.
#[test]
fn a_message_whose_sender_memory_is_gone_fails_the_receive_and_never_claims_delivery() {
    for profile in [Profile::V1_14, Profile::V1_19] {
        let cfg = Config { request_timeout_ns: 100_000, ..Config::default() };
        let mut p = Pair::connected(profile, cfg);
        let mut r = OwnedBuf::zeroed(200_000);
        p.ep.recv(r.buf(), RecvOpts::default()).unwrap();
        let id = p.peer.send_msg(T::LongreadMsgRtm, &pattern(200_000, 1), None);
        p.peer.withdraw(id);
        let ok = p.run_until(5000, |p| !p.cq.is_empty());
        no_unknown_types(&p);
        assert!(ok, "{profile:?}: the receive never ended; rdm4 sent {:?}", p.types_to_peer());
        assert_ne!(p.cq[0].status, Status::Success, "{profile:?}");
        p.settle(200);
        assert!(!p.types_to_peer().contains(&"EOR"), "{profile:?}: an EOR for a message not received");
        assert!(!p.peer.done.contains_key(&id), "{profile:?}");
    }
}

/// Reads that fail at a release reading rdm4's long-read send: today's
/// main answers PEER_ERROR (rdm4 advertised it), older ones nothing; an
/// rdm4 send to them must not wait for ever.
#[test]
fn a_failed_read_at_todays_libfabric_fails_rdm4s_longread_send() {
    let sim = SimConfig { rdma: true, copy_gathered: true, fail_reads: true, ..SimConfig::default() };
    let mut p = Pair::with_sim(Profile::Today, sim, Config { runt_size: 0, ..Config::default() });
    p.connect();
    let mut b = OwnedBuf::from_slice(&pattern(300_000, 2));
    p.ep.send(p.to_peer, b.buf(), SendOpts::default()).unwrap();
    assert!(p.run_until(5000, |p| !p.cq.is_empty()), "the send never ended");
    assert_ne!(p.cq[0].status, Status::Success);
}

// ----- READ_NACK / PEER_ERROR before the handshake --------------------------

/// Issue 42, "Also": PEER_ERROR sent before the peer's HANDSHAKE arrived,
/// to a release that has no handler for it (an EQ error there).
#[test]
fn no_peer_error_goes_to_a_peer_whose_handshake_has_not_arrived() {
    for profile in [Profile::Baseline, Profile::V1_14, Profile::V1_19, Profile::V2_0] {
        let mut p = Pair::new(profile, Config::default());
        // The peer's first packet: a read of a key rdm4 does not have.
        let bad = [rdm4::wire::RmaIov::new(0x1000, 64, 0xdead)];
        p.peer.read(T::ShortRtr, &bad, 64);
        p.settle(200);
        no_unknown_types(&p);
    }
}

/// Issue 42, "Also": READ_NACK sent before the sender's HANDSHAKE arrived
/// (it was overtaken by the LONGREAD RTM), to a release without READ_NACK.
#[test]
fn no_read_nack_goes_to_a_sender_whose_handshake_has_not_arrived() {
    for profile in [Profile::V1_14, Profile::V1_17, Profile::V1_19] {
        let mut p = Pair::new(profile, Config::default());
        p.peer.knobs.hold_handshake = true;
        p.peer.trigger_handshake();
        assert!(p.run_until(100, |p| p.peer.their_extra.is_some()));
        let mut r = OwnedBuf::zeroed(200_000);
        p.ep.recv(r.buf(), RecvOpts::default()).unwrap();
        let id = p.peer.send_msg(T::LongreadMsgRtm, &pattern(200_000, 6), None);
        p.peer.withdraw(id);
        p.settle(50);
        p.peer.release_handshake();
        p.settle(200);
        no_unknown_types(&p);
    }
}

// ----- RMA ---------------------------------------------------------------------

/// rdm4 → peer: writes (eager, long-CTS or long-read, direct where both
/// write), reads (short, long-CTS or direct) into and from the peer's
/// memory, for every release.
#[test]
fn writes_and_reads_from_rdm4_are_served_by_every_release() {
    for profile in Profile::ALL {
        for (name, cfg) in [
            ("default", Config::default()),
            ("emulated", Config { features_off: extra::RDMA_WRITE | extra::RDMA_READ, ..Config::default() }),
        ] {
            let mut p = Pair::connected(profile, cfg);
            let mut sizes = vec![100usize, 5000];
            if profile != Profile::Baseline {
                sizes.push(300_000); // long-CTS (see the CTSDATA test)
            }
            for (i, &len) in sizes.iter().enumerate() {
                let data = pattern(len, i as u8);
                let region = p.peer.region(&vec![0u8; len]);
                let iov = p.peer.iov(region, 0, len as u64);
                let remote = RemoteBuf { addr: iov.addr(), key: iov.key() };
                let mut src = OwnedBuf::from_slice(&data);
                p.cq.clear();
                p.ep.write(p.to_peer, src.buf(), remote, None, 1).unwrap();
                assert!(p.run_until(5000, |p| !p.cq.is_empty()), "{profile:?}/{name}: write of {len} never ended");
                assert_eq!(p.cq[0].status, Status::Success, "{profile:?}/{name}: write of {len}");
                assert!(p.peer.bytes(region) == data, "{profile:?}/{name}: written bytes of {len}");
                let mut back = OwnedBuf::zeroed(len);
                p.cq.clear();
                p.ep.read(p.to_peer, back.buf(), remote, 2).unwrap();
                assert!(p.run_until(5000, |p| !p.cq.is_empty()), "{profile:?}/{name}: read of {len} never ended");
                assert_eq!(p.cq[0].status, Status::Success, "{profile:?}/{name}: read of {len}");
                assert!(back.bytes() == data, "{profile:?}/{name}: read bytes of {len}");
            }
            no_unknown_types(&p);
        }
    }
}

/// peer → rdm4 with one `rma_iov` entry: every RTW and RTR protocol the
/// release sends.
#[test]
fn writes_and_reads_from_every_release_are_served_by_rdm4() {
    for profile in Profile::ALL {
        let mut p = Pair::connected(profile, Config::default());
        let mut region = OwnedBuf::zeroed(400_000);
        let key = p.ep.mr_reg(region.buf(), Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
        let base = region.buf().addr();
        let at = |off: u64, len: u64| [rdm4::wire::RmaIov::new(base + off, len, key)];
        let mut writes = vec![(T::EagerRtw, 1000usize), (T::LongctsRtw, 100_000)];
        if profile.extra() & extra::DELIVERY_COMPLETE != 0 {
            writes.extend([(T::DcEagerRtw, 1000), (T::DcLongctsRtw, 100_000)]);
        }
        if profile.extra() & extra::RDMA_READ != 0 {
            writes.push((T::LongreadRtw, 100_000));
        }
        let mut off = 0u64;
        for (i, &(t, len)) in writes.iter().enumerate() {
            let data = pattern(len, i as u8);
            let id = p.peer.write(t, &data, &at(off, len as u64), None);
            assert!(p.run_until(5000, |p| p.peer.done.contains_key(&id)), "{profile:?}: {} never ended", t.name());
            p.settle(20); // a baseline write ends when sent
            assert!(region.bytes()[off as usize..off as usize + len] == data, "{profile:?}: {} data", t.name());
            off += len as u64;
        }
        // (No long-CTS read from a baseline peer: see the CTSDATA test.)
        let reads: &[(T, u64)] = if profile == Profile::Baseline {
            &[(T::ShortRtr, 1000)]
        } else {
            &[(T::ShortRtr, 1000), (T::LongctsRtr, 200_000)]
        };
        for &(t, len) in reads {
            let id = p.peer.read(t, &at(0, len), len);
            assert!(p.run_until(5000, |p| p.peer.done.contains_key(&id)), "{profile:?}: {} never ended", t.name());
            let want = Outcome::Ok(region.bytes()[..len as usize].to_vec());
            assert!(p.peer.done[&id] == want, "{profile:?}: {} bytes", t.name());
        }
    }
}

/// Issue 42 case 5: libfabric sends several `rma_iov` entries for
/// `fi_writemsg` / `fi_readmsg` / atomic msgs with iovs; rdm4 must serve
/// each REQ type with them.
#[test]
fn requests_with_several_rma_iov_entries_are_served() {
    let mut failed = Vec::new();
    for profile in [Profile::V1_19, Profile::Today] {
        let mut p = Pair::connected(profile, Config::default());
        let mut a = OwnedBuf::zeroed(150_000);
        let mut b = OwnedBuf::zeroed(150_000);
        let acc = Access::REMOTE_WRITE | Access::REMOTE_READ;
        let (ka, kb) = (p.ep.mr_reg(a.buf(), acc).unwrap(), p.ep.mr_reg(b.buf(), acc).unwrap());
        let (aa, ba) = (a.buf().addr(), b.buf().addr());
        let two = |len: u64| [rdm4::wire::RmaIov::new(aa, len / 2, ka), rdm4::wire::RmaIov::new(ba + 8, len / 2, kb)];
        let cases = [
            (T::EagerRtw, 1000usize),
            (T::DcEagerRtw, 1000),
            (T::LongctsRtw, 200_000),
            (T::DcLongctsRtw, 200_000),
            (T::LongreadRtw, 200_000),
        ];
        for (t, len) in cases {
            let data = pattern(len, 3);
            let id = p.peer.write(t, &data, &two(len as u64), None);
            let ended = p.run_until(3000, |p| p.peer.done.contains_key(&id));
            p.settle(20);
            let mut got = a.bytes()[..len / 2].to_vec();
            got.extend_from_slice(&b.bytes()[8..8 + len / 2]);
            if !ended || p.peer.done[&id] != Outcome::Ok(Vec::new()) || got != data {
                failed.push(format!("{profile:?} {}: {:?}", t.name(), p.peer.done.get(&id)));
            }
        }
        for (t, len) in [(T::ShortRtr, 1000u64), (T::LongctsRtr, 200_000)] {
            let mut want = a.bytes()[..len as usize / 2].to_vec();
            want.extend_from_slice(&b.bytes()[8..8 + len as usize / 2]);
            let id = p.peer.read(t, &two(len), len);
            let ended = p.run_until(3000, |p| p.peer.done.contains_key(&id));
            if !ended || p.peer.done[&id] != Outcome::Ok(want) {
                failed.push(format!(
                    "{profile:?} {}: {:?}",
                    t.name(),
                    p.peer.done.get(&id).map(|o| matches!(o, Outcome::Ok(_)))
                ));
            }
        }
        // Atomics: two u64 elements, one in each region.
        let pair = [rdm4::wire::RmaIov::new(aa, 8, ka), rdm4::wire::RmaIov::new(ba, 8, kb)];
        a.bytes_mut()[..8].copy_from_slice(&5u64.to_le_bytes());
        b.bytes_mut()[..8].copy_from_slice(&7u64.to_le_bytes());
        let ones = [1u64.to_le_bytes(), 1u64.to_le_bytes()].concat();
        for t in [T::WriteRta, T::DcWriteRta, T::FetchRta] {
            let before = [a.bytes()[..8].to_vec(), b.bytes()[..8].to_vec()].concat();
            let id = p.peer.atomic(t, datatype::UINT64, op::SUM, &pair, &ones, &[]);
            let ended = p.run_until(3000, |p| p.peer.done.contains_key(&id));
            p.settle(20);
            let after = [a.bytes()[..8].to_vec(), b.bytes()[..8].to_vec()].concat();
            let summed = u64::from_le_bytes(after[..8].try_into().unwrap())
                == u64::from_le_bytes(before[..8].try_into().unwrap()) + 1
                && u64::from_le_bytes(after[8..].try_into().unwrap())
                    == u64::from_le_bytes(before[8..].try_into().unwrap()) + 1;
            let answered = t == T::WriteRta
                || p.peer.done.get(&id) == Some(&Outcome::Ok(if t == T::FetchRta { before } else { Vec::new() }));
            if !ended || !summed || !answered {
                failed.push(format!("{profile:?} {}: {:?}", t.name(), p.peer.done.get(&id)));
            }
        }
    }
    assert!(failed.is_empty(), "not served with two rma_iov entries: {failed:#?}");
}

// ----- atomics ---------------------------------------------------------------

fn u64s(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// peer → rdm4: every op but FI_ATOMIC_READ (see below) by WRITE_RTA,
/// DC_WRITE_RTA, FETCH_RTA and COMPARE_RTA, checked against the values.
#[test]
fn every_atomic_op_from_every_release_is_applied_by_rdm4() {
    let write_ops = [
        op::MIN,
        op::MAX,
        op::SUM,
        op::PROD,
        op::LOR,
        op::LAND,
        op::BOR,
        op::BAND,
        op::LXOR,
        op::BXOR,
        op::ATOMIC_WRITE,
    ];
    let cmp_ops = [op::CSWAP, op::CSWAP_NE, op::CSWAP_LE, op::CSWAP_LT, op::CSWAP_GE, op::CSWAP_GT, op::MSWAP];
    for profile in Profile::ALL {
        let mut p = Pair::connected(profile, Config::default());
        let mut mem = OwnedBuf::zeroed(16);
        let key = p.ep.mr_reg(mem.buf(), Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
        let iov = [rdm4::wire::RmaIov::new(mem.buf().addr(), 16, key)];
        let mut types = vec![T::WriteRta, T::FetchRta];
        if profile.extra() & extra::DELIVERY_COMPLETE != 0 {
            types.push(T::DcWriteRta);
        }
        for t in types {
            for o in write_ops {
                mem.bytes_mut().copy_from_slice(&u64s(&[6, 0]));
                let id = p.peer.atomic(t, datatype::UINT64, o, &iov, &u64s(&[3, 1]), &[]);
                assert!(p.run_until(2000, |p| p.peer.done.contains_key(&id)), "{profile:?} {} op {o}", t.name());
                p.settle(10);
                let mut want = [0u8; 16];
                let mut old = [0u8; 16];
                let mut w = OwnedBuf::from_slice(&u64s(&[6, 0]));
                w.buf().atomic_apply(datatype::UINT64, o, &u64s(&[3, 1]), &[], &mut old).unwrap();
                want.copy_from_slice(w.bytes());
                assert_eq!(mem.bytes(), &want, "{profile:?} {} op {o}", t.name());
                if t == T::FetchRta {
                    assert_eq!(p.peer.done[&id], Outcome::Ok(u64s(&[6, 0])), "{profile:?} fetch op {o}");
                }
            }
        }
        for o in cmp_ops {
            mem.bytes_mut().copy_from_slice(&u64s(&[6, 9]));
            let id = p.peer.atomic(T::CompareRta, datatype::UINT64, o, &iov, &u64s(&[3, 4]), &u64s(&[6, 1]));
            assert!(p.run_until(2000, |p| p.peer.done.contains_key(&id)), "{profile:?} compare op {o}");
            let mut w = OwnedBuf::from_slice(&u64s(&[6, 9]));
            let mut old = [0u8; 16];
            w.buf().atomic_apply(datatype::UINT64, o, &u64s(&[3, 4]), &u64s(&[6, 1]), &mut old).unwrap();
            assert_eq!(mem.bytes(), w.bytes(), "{profile:?} compare op {o}");
            assert_eq!(p.peer.done[&id], Outcome::Ok(u64s(&[6, 9])), "{profile:?} compare op {o}");
        }
    }
}

/// Issue 42 case 4: libfabric's FETCH_RTA with FI_ATOMIC_READ carries
/// count × size operand bytes (`efa_rdm_pke_init_rta_common` copies the
/// operand iov for every op); rdm4 must answer it with the values.
#[test]
fn a_fetch_rta_atomic_read_with_operand_bytes_is_answered() {
    for profile in Profile::ALL {
        let mut p = Pair::connected(profile, Config::default());
        let mut mem = OwnedBuf::from_slice(&u64s(&[41, 42]));
        let key = p.ep.mr_reg(mem.buf(), Access::REMOTE_WRITE | Access::REMOTE_READ).unwrap();
        let iov = [rdm4::wire::RmaIov::new(mem.buf().addr(), 16, key)];
        let id = p.peer.atomic(T::FetchRta, datatype::UINT64, op::ATOMIC_READ, &iov, &[0xEE; 16], &[]);
        let ok = p.run_until(2000, |p| p.peer.done.contains_key(&id));
        assert!(ok, "{profile:?}: no answer; rdm4 sent {:?}", p.types_to_peer());
        assert_eq!(p.peer.done[&id], Outcome::Ok(u64s(&[41, 42])), "{profile:?}");
        assert_eq!(mem.bytes(), &u64s(&[41, 42])[..], "{profile:?}: read changed memory");
    }
}

/// Issue 42 case 4, the other way: rdm4's FETCH_RTA for FI_ATOMIC_READ
/// carries count × size operand bytes, as libfabric's do (the golden
/// FETCH_RTA vector with op 10 has 8).
#[test]
fn rdm4s_fetch_rta_atomic_read_carries_count_times_size_operand_bytes() {
    let mut p = Pair::connected(Profile::Today, Config::default());
    let region = p.peer.region(&u64s(&[11, 12]));
    let iov = p.peer.iov(region, 0, 16);
    let mut result = OwnedBuf::zeroed(16);
    let mut operand = OwnedBuf::zeroed(16);
    let remote = RemoteBuf { addr: iov.addr(), key: iov.key() };
    let empty = rdm4::mem::UserBuf::empty();
    p.ep.atomic(p.to_peer, datatype::UINT64, op::ATOMIC_READ, operand.buf(), empty, result.buf(), remote, 1).unwrap();
    assert!(p.run_until(2000, |p| !p.cq.is_empty()), "no completion");
    assert_eq!(result.bytes(), &u64s(&[11, 12])[..]);
    let rta = p.to_peer_of(T::FetchRta);
    let Ok(Packet::Req(r)) = Packet::parse(&rta[0]) else { panic!("FETCH_RTA parses") };
    assert_eq!(r.data.len(), 16, "operand bytes of an FI_ATOMIC_READ of two u64");
}

/// rdm4 → peer: atomics of each class (DC_WRITE_RTA to releases with DC)
/// and their answers (ATOMRSP, RECEIPT).
#[test]
fn atomics_from_rdm4_are_applied_by_every_release_and_dc_write_rta_gets_its_receipt() {
    for profile in Profile::ALL {
        let mut p = Pair::connected(profile, Config::default());
        let region = p.peer.region(&u64s(&[10]));
        let iov = p.peer.iov(region, 0, 8);
        let remote = RemoteBuf { addr: iov.addr(), key: iov.key() };
        let empty = rdm4::mem::UserBuf::empty();
        let mut one = OwnedBuf::from_slice(&u64s(&[1]));
        let mut cmp = OwnedBuf::from_slice(&u64s(&[12]));
        let mut res = OwnedBuf::zeroed(8);
        p.ep.atomic(p.to_peer, datatype::UINT64, op::SUM, one.buf(), empty, empty, remote, 1).unwrap();
        p.ep.atomic(p.to_peer, datatype::UINT64, op::SUM, one.buf(), empty, res.buf(), remote, 2).unwrap();
        assert!(p.run_until(2000, |p| p.cq.len() == 2), "{profile:?}: {:?}", p.cq);
        assert_eq!(res.bytes(), &u64s(&[11])[..], "{profile:?}");
        p.ep.atomic(p.to_peer, datatype::UINT64, op::CSWAP, one.buf(), cmp.buf(), res.buf(), remote, 3).unwrap();
        assert!(p.run_until(2000, |p| p.cq.len() == 3), "{profile:?}");
        assert_eq!(p.peer.bytes(region), &u64s(&[1])[..], "{profile:?}: cswap");
        assert!(p.cq.iter().all(|e| e.status == Status::Success), "{profile:?}: {:?}", p.cq);
        let dc = profile.extra() & extra::DELIVERY_COMPLETE != 0;
        let want = if dc { "DC_WRITE_RTA" } else { "WRITE_RTA" };
        assert!(p.types_to_peer().contains(&want), "{profile:?}: {:?}", p.types_to_peer());
        no_unknown_types(&p);
    }
    // The other way: the peer's DC_WRITE_RTA gets rdm4's RECEIPT.
    let mut p = Pair::connected(Profile::Today, Config::default());
    let mut mem = OwnedBuf::zeroed(8);
    let key = p.ep.mr_reg(mem.buf(), Access::REMOTE_WRITE).unwrap();
    let iov = [rdm4::wire::RmaIov::new(mem.buf().addr(), 8, key)];
    let id = p.peer.atomic(T::DcWriteRta, datatype::UINT64, op::SUM, &iov, &u64s(&[5]), &[]);
    assert!(p.run_until(2000, |p| p.peer.done.contains_key(&id)), "no RECEIPT for DC_WRITE_RTA");
    assert_eq!(mem.bytes(), &u64s(&[5])[..]);
    assert_eq!(p.to_peer_of(T::Receipt).len(), 1);
}

// ----- delivery complete --------------------------------------------------------

/// Issue 42, "Also": a DC send whose receiver fails the receive (libfabric
/// reports it locally and sends nothing, `efa_rdm_rxe_handle_error`) must
/// not wait for ever: DC sends time out like requests.
#[test]
fn a_dc_send_to_a_receiver_that_fails_the_receive_ends() {
    let cfg = Config { request_timeout_ns: 1_000_000, ..Config::default() };
    let mut p = Pair::connected(Profile::V2_0, cfg);
    p.tick = 10_000;
    p.peer.knobs.fail_recvs = true;
    let mut b = OwnedBuf::from_slice(&pattern(100, 1));
    p.ep.send_flagged(p.to_peer, b.buf(), SendOpts::default(), SendFlags { dc: true, ..SendFlags::default() }).unwrap();
    let ok = p.run_until(2000, |p| !p.cq.is_empty());
    assert!(!p.peer.errors.is_empty(), "the peer's receive failed");
    assert!(ok, "the DC send never ended");
    assert_ne!(p.cq[0].status, Status::Success);
}

/// A DC send that rdm4 nacks (its long-read read fails) goes on by
/// DC_LONGCTS (`efa_rdm_pke_handle_read_nack_recv` keeps delivery
/// complete): rdm4 then owes the RECEIPT. Not named by issue 42.
#[test]
fn a_dc_longread_send_nacked_by_rdm4_gets_its_receipt_after_the_fallback() {
    let sim = SimConfig { rdma: true, copy_gathered: true, fail_reads: true, ..SimConfig::default() };
    for profile in [Profile::V2_0, Profile::Today] {
        let mut p = Pair::with_sim(profile, sim.clone(), Config::default());
        p.connect();
        let mut r = OwnedBuf::zeroed(200_000);
        p.ep.recv(r.buf(), RecvOpts::default()).unwrap();
        let data = pattern(200_000, 8);
        let id = p.peer.send_msg_dc(T::LongreadMsgRtm, &data, None, true);
        assert!(p.run_until(5000, |p| !p.cq.is_empty()), "{profile:?}: receive never ended");
        assert_eq!(p.cq[0].status, Status::Success, "{profile:?}");
        assert!(r.bytes() == data, "{profile:?}: data");
        let ok = p.run_until(1000, |p| p.peer.done.contains_key(&id));
        assert!(ok, "{profile:?}: the DC send got no RECEIPT after DC_LONGCTS; rdm4 sent {:?}", p.types_to_peer());
    }
}

// ----- legacy -----------------------------------------------------------------------

/// An emulated read between legacy peers: a baseline rdm4 endpoint reads
/// a baseline peer's memory by SHORT_RTR and LONGCTS_RTR (no RDMA).
#[test]
fn an_emulated_read_between_legacy_peers_moves_every_byte() {
    let mut p = Pair::connected(Profile::Baseline, Config { legacy: true, ..Config::default() });
    for len in [100usize, 5000, 300_000] {
        let data = pattern(len, 7);
        let region = p.peer.region(&data);
        let iov = p.peer.iov(region, 0, len as u64);
        let mut back = OwnedBuf::zeroed(len);
        p.cq.clear();
        p.ep.read(p.to_peer, back.buf(), RemoteBuf { addr: iov.addr(), key: iov.key() }, 1).unwrap();
        assert!(p.run_until(5000, |p| !p.cq.is_empty()), "read of {len} never ended");
        assert_eq!(p.cq[0].status, Status::Success, "read of {len}");
        assert!(back.bytes() == data, "read of {len}: bytes");
        let t = if len <= 5000 { "SHORT_RTR" } else { "LONGCTS_RTR" };
        assert!(p.types_to_peer().contains(&t), "{len}: {:?}", p.types_to_peer());
    }
    no_unknown_types(&p);
}
