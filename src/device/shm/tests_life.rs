//! Unit tests of the endpoint's life and its neighbours': the wake-up
//! descriptor, peers that close or die, segments left behind, settings.

use super::life::fitting_slots;
use super::segment::{cstr, is_stale};
use super::*;
use crate::device::{InCall, Sleep};

fn cfg(name: &str) -> ShmConfig {
    ShmConfig { prefix: format!("rdm4l{}{name}", std::process::id()), slots: 4, mtu: 256, ..ShmConfig::default() }
}

/// `poll` on `fd` with no wait: the events it reports.
fn revents(fd: RawFd) -> i16 {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    if n > 0 {
        pfd.revents
    } else {
        0
    }
}

#[test]
fn the_wait_fd_is_not_ready_after_a_peer_that_woke_it_has_closed() {
    let mut a = ShmDevice::open_with(cfg("hup")).unwrap();
    let fd = a.wait_fd().unwrap();
    assert_eq!(revents(fd), 0, "nothing arrived yet");
    {
        let mut b = ShmDevice::open_with(cfg("hup")).unwrap();
        let ah = b.insert(&a.local_addr()).unwrap();
        b.send(ah, &[7u8; 8], 0).unwrap();
        assert_ne!(revents(fd) & libc::POLLIN, 0, "the packet's wake-up is readable");
        assert_eq!(a.recv(8, |_, _, _| {}), 1);
        assert_eq!(revents(fd), 0, "taking the packet drained the wake-up");
        // `b` closes here, and with it its writer of `a`'s FIFO; its close
        // notice wakes `a` once.
    }
    let mut delivered = 0;
    a.recv(8, |_, _, _| delivered += 1);
    assert_eq!(delivered, 0, "a close notice is no packet");
    assert_eq!(revents(fd), 0, "a closed writer must not make the fd ready (POLLHUP)");
    // And it still wakes for the next packet.
    let mut c = ShmDevice::open_with(cfg("hup")).unwrap();
    let ah = c.insert(&a.local_addr()).unwrap();
    c.send(ah, &[9u8; 8], 0).unwrap();
    assert_ne!(revents(fd) & libc::POLLIN, 0);
    assert!(a.wait(0));
}

/// The pid of a process that has ended (and been reaped).
pub(super) fn dead_pid() -> u32 {
    let mut c = std::process::Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

/// Leaves `dev`'s segment behind as if its owner had died: the header
/// names a process that has ended, and nothing is unlinked.
fn abandon(dev: ShmDevice) -> String {
    dev.map.u32_at(off::PID).store(dead_pid(), Ordering::Relaxed);
    let name = dev.name.clone();
    // SAFETY: closing the FIFO the forgotten device owned.
    unsafe { libc::close(dev.fifo) };
    std::mem::forget(dev);
    name
}

fn exists(name: &str) -> bool {
    std::path::Path::new(&format!("/dev/shm/{name}")).exists()
}

#[test]
fn an_open_removes_every_dead_segment_of_its_prefix() {
    let c = cfg("dead");
    let at = |epid| ShmConfig { epid: Some(epid), ..c.clone() };
    let mut devs: Vec<ShmDevice> = (0..3).map(|k| ShmDevice::open_with(at(k)).unwrap()).collect();
    // Each holds an allocation peers may map: its file goes with it.
    let files: Vec<String> = devs
        .iter_mut()
        .map(|d| {
            let (_, key) = d.alloc_shared(4096, Access::REMOTE_WRITE).unwrap();
            super::alloc::alloc_file(&d.name, key)
        })
        .collect();
    let dead: Vec<String> = devs.into_iter().map(abandon).collect();
    assert!(dead.iter().all(|n| exists(n) && exists(&format!("{n}.fifo"))));
    assert!(files.iter().all(|f| exists(f)));
    // A live endpoint of the prefix stays.
    let live = ShmDevice::open_with(c.clone()).unwrap();
    // The live one took the first endpoint id, whose segment was dead;
    // the others are gone.
    assert_eq!(live.segment_name(), dead[0]);
    for n in &dead[1..] {
        assert!(!exists(n), "{n} was left behind");
        assert!(!exists(&format!("{n}.fifo")), "{n}.fifo was left behind");
    }
    for f in &files {
        assert!(!exists(f), "{f} was left behind");
    }
    let other = ShmDevice::open_with(c).unwrap();
    assert!(exists(live.segment_name()) && exists(other.segment_name()));
}

#[test]
fn a_segment_whose_owner_died_while_sizing_it_is_judged_from_its_header_alone() {
    // A huge sparse segment with a dead owner: judging it must not map it
    // whole (with MAP_POPULATE that fills page tables for all of it, and
    // the next open waits for them).
    let c = cfg("huge");
    let dev = ShmDevice::open_with(c.clone()).unwrap();
    let name = dev.name.clone();
    let path = cstr(&format!("/{name}"));
    // SAFETY: our own segment, grown sparse to 64 GiB.
    unsafe {
        let fd = libc::shm_open(path.as_ptr(), libc::O_RDWR, 0);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, 64 << 30), 0);
        libc::close(fd);
    }
    let name = abandon(dev);
    let t = std::time::Instant::now();
    assert!(is_stale(&name));
    let next = ShmDevice::open_with(c).unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "took {:?}", t.elapsed());
    // The new endpoint took its place, at its own size.
    assert_eq!(next.segment_name(), name);
    let len = std::fs::metadata(format!("/dev/shm/{name}")).unwrap().len();
    assert_eq!(len, next.shape.total() as u64);
}

#[test]
fn a_ring_is_sized_to_the_free_space_before_anything_is_allocated() {
    let mb = 1u64 << 20;
    // 8 MiB asked, 3 MiB free: the largest power of two that fits with
    // its registration table (2 MiB of ring).
    assert_eq!(fitting_slots(128, 65536, 3 * mb), Some(32));
    assert_eq!(fitting_slots(128, 65536, 64 * mb), Some(128));
    // Not even two packets: nothing.
    assert_eq!(fitting_slots(128, 65536, 100 * 1024), None);
    assert_eq!(fitting_slots(2, 256, 0), None);
}

#[test]
fn settings_out_of_bounds_are_refused() {
    let ok = cfg("bounds");
    assert!(ok.valid());
    for bad in [
        ShmConfig { slots: 3, ..ok.clone() },
        ShmConfig { slots: 1 << 17, ..ok.clone() },
        ShmConfig { slots: 1 << 16, mtu: 1 << 16, ..ok.clone() },
        ShmConfig { mtu: 100, ..ok.clone() },
        ShmConfig { mtu: 1000, ..ok.clone() },
        ShmConfig { epid: Some(70_000), ..ok.clone() },
        ShmConfig { prefix: "a/b".into(), ..ok.clone() },
        ShmConfig { prefix: String::new(), ..ok.clone() },
    ] {
        assert!(!bad.valid(), "{bad:?}");
        assert_eq!(ShmDevice::open_with(bad).err(), Some(Status::Inval));
    }
}

/// Takes every event of `dev`.
fn events(dev: &mut ShmDevice) -> Vec<DevEvent> {
    let mut v = Vec::new();
    dev.events(&mut v);
    v
}

#[test]
fn sends_to_a_closed_peer_fail_at_once_and_its_close_notice_reaches_the_peers_it_knew() {
    let c = ShmConfig { peer_check: Duration::from_secs(60), ..cfg("close") };
    let mut a = ShmDevice::open_with(c.clone()).unwrap();
    let mut b = ShmDevice::open_with(c.clone()).unwrap();
    let mut bystander = ShmDevice::open_with(c).unwrap();
    let a_to_b = a.insert(&b.local_addr()).unwrap();
    let b_to_a = b.insert(&a.local_addr()).unwrap();
    let by_to_a = bystander.insert(&a.local_addr()).unwrap();
    b.send(b_to_a, b"before", 0).unwrap();
    a.send(a_to_b, b"last words", 0).unwrap();
    drop(a);
    // `b` was known to `a`: its packet before the close is delivered, then
    // the notice makes `a` lost, with no peer check (60 s away).
    let mut got = Vec::new();
    b.recv(8, |from, p: &[u8], _| got.push((from, p.to_vec())));
    assert_eq!(got, vec![(Some(b_to_a), b"last words".to_vec())]);
    assert_eq!(events(&mut b), vec![DevEvent::PeerLost { ah: b_to_a }]);
    assert_eq!(b.send(b_to_a, b"after", 0), Err(DevError::Failed(Status::PeerUnreachable)));
    // `a` never knew the bystander: its first send after the close fails
    // (the closed tail refuses the claim) and reports the peer lost.
    assert_eq!(bystander.send(by_to_a, b"after", 0), Err(DevError::Failed(Status::PeerUnreachable)));
    assert_eq!(events(&mut bystander), vec![DevEvent::PeerLost { ah: by_to_a }]);
    assert_eq!(bystander.send(by_to_a, b"again", 0), Err(DevError::Failed(Status::PeerUnreachable)));
}

#[test]
fn a_close_ends_the_peers_operations_towards_it_at_their_next_poll() {
    use crate::engine::{Config, Endpoint, RecvOpts, SendOpts};
    use crate::mem::OwnedBuf;
    let c = ShmConfig { peer_check: Duration::from_secs(60), ..cfg("ops") };
    let mut a = Endpoint::new(ShmDevice::open_with(c.clone()).unwrap(), Config::default());
    let mut b = Endpoint::new(ShmDevice::open_with(c).unwrap(), Config::default());
    let a_to_b = a.av_insert(&b.addr()).unwrap();
    let b_to_a = b.av_insert(&a.addr()).unwrap();
    // Handshakes both ways.
    let mut hi = OwnedBuf::from_slice(b"hi");
    let mut hi_rx = OwnedBuf::zeroed(2);
    b.recv(hi_rx.buf(), RecvOpts::default()).unwrap();
    a.send(a_to_b, hi.buf(), SendOpts::default()).unwrap();
    let mut cq = Vec::new();
    for _ in 0..100 {
        a.progress(0);
        b.progress(0);
    }
    b.poll_cq(&mut cq, 8);
    a.poll_cq(&mut cq, 8);
    assert_eq!(cq.len(), 2);
    // b: a long message to a that waits for a's CTS, which never comes.
    let mut long = OwnedBuf::from_slice(&vec![7u8; 1 << 20]);
    b.send(b_to_a, long.buf(), SendOpts { context: 99, ..SendOpts::default() }).unwrap();
    b.progress(0);
    drop(a);
    cq.clear();
    b.progress(0);
    b.poll_cq(&mut cq, 8);
    assert_eq!(cq.len(), 1, "{cq:?}");
    assert_eq!((cq[0].context, cq[0].status), (99, Status::PeerUnreachable));
    let mut small = OwnedBuf::from_slice(b"x");
    assert_eq!(b.send(b_to_a, small.buf(), SendOpts::default()), Err(Status::PeerUnreachable));
}

#[test]
fn no_peer_write_lands_after_a_deregistration_returns() {
    let c = cfg("mr");
    let c = ShmConfig { mtu: 65536, ..c };
    let mut owner = ShmDevice::open_with(c.clone()).unwrap();
    if !owner.caps().rdma_write {
        println!("skip: cross-memory attach is not available here");
        return;
    }
    let mut writer = ShmDevice::open_with(c).unwrap();
    let ah = writer.insert(&owner.local_addr()).unwrap();
    const LEN: usize = 4 << 20;
    let mut region = crate::mem::OwnedBuf::zeroed(LEN);
    let addr = region.buf().addr();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let key = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (stop2, key2) = (stop.clone(), key.clone());
    // The writer copies 1 MiB chunks into the region with whatever key is
    // current, for as long as the test runs.
    let t = std::thread::spawn(move || {
        let mut chunk = crate::mem::OwnedBuf::from_slice(&vec![0x11u8; 1 << 20]);
        let mut writes = 0u32;
        while !stop2.load(Ordering::Relaxed) {
            let k = key2.load(Ordering::Relaxed);
            for part in 0..4u64 {
                if writer.rdma_write(ah, chunk.buf(), addr + part * (1 << 20), k, 1).is_ok() {
                    writes += 1;
                }
            }
            let mut ev = Vec::new();
            writer.events(&mut ev);
        }
        writes
    });
    let mut late = 0;
    for _ in 0..20 {
        let k = owner.reg(region.buf(), Access::REMOTE_WRITE).unwrap();
        key.store(k, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(2));
        owner.dereg(k).unwrap();
        // From here on the region is the application's again.
        region.bytes_mut().fill(0xEE);
        std::thread::sleep(Duration::from_millis(10));
        if region.bytes().iter().any(|&b| b != 0xEE) {
            late += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let writes = t.join().unwrap();
    assert!(writes > 0, "the writer never wrote");
    assert_eq!(late, 0, "rounds with a write after the deregistration returned");
}

#[test]
fn an_endpoint_that_inserts_its_own_address_is_not_crowded_by_it() {
    if super::crowd::host_cpus() != 2 {
        println!("skip: the count is checked against 2 CPUs for the job");
        return;
    }
    let mut a = ShmDevice::open_with(cfg("self")).unwrap();
    let b = ShmDevice::open_with(cfg("self")).unwrap();
    let before = a.caps();
    a.insert(&a.local_addr()).unwrap(); // as libfabric applications do
    a.insert(&b.local_addr()).unwrap();
    assert_eq!((a.caps(), a.caps_epoch()), (before, 0), "itself and one peer on 2 CPUs: not crowded");
    let c = ShmDevice::open_with(cfg("self")).unwrap();
    a.insert(&c.local_addr()).unwrap();
    assert_eq!(a.caps_epoch(), 1, "itself and two peers on 2 CPUs: crowded");
    // A peer that closed (or died) is found lost at a peer check and no
    // longer counts, though its address stays inserted.
    drop(c);
    let limit = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while a.caps_epoch() == 1 && std::time::Instant::now() < limit {
        let mut ev = Vec::new();
        a.events(&mut ev);
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
    assert_eq!((a.caps(), a.caps_epoch()), (before, 2), "the lost peer uncrowds it");
}

#[test]
fn no_peer_write_lands_after_the_owner_closes_with_registrations() {
    let c = ShmConfig { mtu: 65536, ..cfg("mrclose") };
    let mut region = crate::mem::OwnedBuf::zeroed(1 << 20);
    let addr = region.buf().addr();
    let owner = ShmDevice::open_with(c.clone()).unwrap();
    if !owner.caps().rdma_write {
        println!("skip: cross-memory attach is not available here");
        return;
    }
    let mut owner = owner;
    let mut writer = ShmDevice::open_with(c).unwrap();
    let ah = writer.insert(&owner.local_addr()).unwrap();
    let k = owner.reg(region.buf(), Access::REMOTE_WRITE).unwrap();
    let mut chunk = crate::mem::OwnedBuf::from_slice(&[0x11u8; 4096]);
    let mut ev = Vec::new();
    // Before the close the write lands; the owner then closes without
    // deregistering, and the region is the application's again.
    writer.rdma_write(ah, chunk.buf(), addr, k, 1).unwrap();
    writer.events(&mut ev);
    assert!(matches!(ev[..], [DevEvent::SendDone { status: Ok(()), .. }]), "{ev:?}");
    assert_eq!(region.bytes()[0], 0x11);
    drop(owner);
    region.bytes_mut().fill(0xEE);
    // A writer that has not yet noticed the close still holds the key.
    ev.clear();
    let r = writer.rdma_write(ah, chunk.buf(), addr, k, 2);
    writer.events(&mut ev);
    assert!(region.bytes().iter().all(|&b| b == 0xEE), "a write landed after the owner closed ({r:?}, {ev:?})");
}

/// Claim word `i` of the registration entry of `key`.
fn claim_word(dev: &ShmDevice, key: u64, i: usize) -> &std::sync::atomic::AtomicU32 {
    let e = dev.shape.mr_off() + (key % MR_ENTRIES as u64) as usize * MR_ENTRY_LEN;
    dev.map.u32_at(e + 32 + 4 * i)
}

#[test]
fn a_deregistration_waits_for_live_accessors_only_and_says_busy_after_its_wait() {
    let mut owner = ShmDevice::open_with(cfg("busy")).unwrap();
    let mut region = crate::mem::OwnedBuf::zeroed(4096);
    // A claim left by a process that died mid-copy does not hold it up.
    let k = owner.reg(region.buf(), Access::REMOTE_WRITE).unwrap();
    claim_word(&owner, k, 3).store(dead_pid(), Ordering::Relaxed);
    let t = std::time::Instant::now();
    assert_eq!(owner.dereg(k), Ok(()));
    assert!(t.elapsed() < Duration::from_millis(500));
    assert_eq!(claim_word(&owner, k, 3).load(Ordering::Relaxed), 0);
    // A live accessor that does not finish: Busy after the wait, no new
    // access meanwhile, the entry not reused; done once it lets go.
    let k = owner.reg(region.buf(), Access::REMOTE_WRITE).unwrap();
    claim_word(&owner, k, 0).store(std::process::id(), Ordering::Relaxed);
    assert_eq!(owner.dereg(k), Err(Status::Busy));
    let mut peer = ShmDevice::open_with(cfg("busy")).unwrap();
    let ah = peer.insert(&owner.local_addr()).unwrap();
    if peer.caps().rdma_write {
        let mut src = crate::mem::OwnedBuf::from_slice(&[1u8; 64]);
        peer.rdma_write(ah, src.buf(), region.buf().addr(), k, 7).unwrap();
        let mut ev = Vec::new();
        peer.events(&mut ev);
        assert!(matches!(ev[..], [DevEvent::SendDone { status: Err(Status::RemoteAccess), .. }]), "{ev:?}");
        assert!(region.bytes().iter().all(|&b| b == 0));
    }
    let other = owner.reg(region.buf(), Access::REMOTE_WRITE).unwrap();
    assert_ne!(other % MR_ENTRIES as u64, k % MR_ENTRIES as u64, "a closing entry is not reused");
    claim_word(&owner, k, 0).store(0, Ordering::Relaxed);
    assert_eq!(owner.dereg(k), Ok(()));
    assert_eq!(owner.dereg(k), Err(Status::Inval));
    assert_eq!(owner.dereg(other), Ok(()));
}

#[test]
fn the_wait_fd_is_readable_exactly_while_a_packet_waits() {
    let mut a = ShmDevice::open_with(cfg("level")).unwrap();
    let mut b = ShmDevice::open_with(cfg("level")).unwrap();
    let ah = b.insert(&a.local_addr()).unwrap();
    a.insert(&b.local_addr()).unwrap(); // a known sender: the express path's
    let fd = a.wait_fd().unwrap();
    b.send(ah, &[1u8; 8], 0).unwrap();
    b.send(ah, &[2u8; 8], 0).unwrap();
    // One of the two taken: the other still waits, so the fd stays readable.
    assert_eq!(a.recv(1, |_, _, _| {}), 1);
    assert_ne!(revents(fd) & libc::POLLIN, 0, "a packet waits: readable");
    assert_eq!(a.recv(8, |_, _, _| {}), 1);
    assert_eq!(revents(fd), 0, "nothing waits: not readable");
    // A wake-up written after its packet was taken (the producer's write
    // comes after its publication) does not leave the fd readable for
    // ever: the next poll that finds nothing clears it.
    a.wake_own();
    assert_ne!(revents(fd) & libc::POLLIN, 0);
    assert_eq!(a.recv(8, |_, _, _| {}), 0);
    assert_eq!(revents(fd), 0, "a stale wake-up is cleared by an empty poll");
    // The express receive's empty poll clears it too.
    b.send(ah, &[3u8; 8], 0).unwrap();
    assert_eq!(a.recv(8, |_, _, _| {}), 1);
    a.wake_own();
    assert_eq!(a.recv_express(8, |_, _| true), (0, false));
    assert_eq!(revents(fd), 0, "cleared by the express path's empty poll");
}

#[test]
fn over_shm_without_cma_a_request_whose_range_wraps_is_answered_with_an_error() {
    use crate::engine::{Config, Endpoint};
    use crate::wire::{Packet, PacketType, RawAddrHdr, Req, RmaIov};
    let c = ShmConfig { cma: false, ..cfg("wrap") };
    let mut target = Endpoint::new(ShmDevice::open_with(c.clone()).unwrap(), Config::default());
    let mut region = crate::mem::OwnedBuf::from_slice(&[0x5A; 256]);
    let key = target.mr_reg(region.buf(), Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
    let mut forger = ShmDevice::open_with(c).unwrap();
    let ah = forger.insert(&target.addr()).unwrap();
    let body = forger.local_addr().to_req_hdr_body();
    let iov = [RmaIov::new(u64::MAX - 50, 100, key)];
    let mut r = Req::new(PacketType::ShortRtr);
    r.raw_addr = Some(RawAddrHdr::new(&body).unwrap());
    r.rma_iov = &iov;
    r.fields.msg_length = 100;
    r.fields.recv_id = 42;
    r.fields.recv_length = 100;
    let mut pkt = vec![0u8; r.buffer_len()];
    let n = r.emit(&mut pkt).unwrap();
    forger.send(ah, &pkt[..n], 0).unwrap();
    target.progress(0); // the request introduces the forger
                        // PEER_ERROR goes only to a peer whose HANDSHAKE says it takes it.
    let words = [crate::wire::LeU64::new(crate::wire::extra::PEER_ERROR)];
    let mut hs = vec![0u8; 256];
    let n = Packet::Handshake(crate::wire::Handshake::new(&words)).emit(&mut hs).unwrap();
    forger.send(ah, &hs[..n], 0).unwrap();
    let mut answer = None;
    for _ in 0..100 {
        target.progress(0);
        forger.recv(8, |_, p: &[u8], _| {
            if let Ok(Packet::PeerError(e)) = Packet::parse(p) {
                answer = Some((e.op_id, e.prov_errno));
            }
        });
        if answer.is_some() {
            break;
        }
    }
    assert_eq!(answer, Some((42, Status::RemoteAccess.code().unsigned_abs())));
    assert!(region.bytes().iter().all(|&b| b == 0x5A));
}

#[test]
fn a_write_with_immediate_data_is_reported_to_the_owner_after_its_bytes_and_packets_before_it() {
    let mut owner = ShmDevice::open_with(cfg("imm")).unwrap();
    let mut writer = ShmDevice::open_with(cfg("imm")).unwrap();
    if !writer.caps().rdma_write_imm {
        return; // no cross-memory attach here: the engine emulates such writes
    }
    let ah = writer.insert(&owner.local_addr()).unwrap();
    let back = owner.insert(&writer.local_addr()).unwrap();
    let mut region = crate::mem::OwnedBuf::zeroed(4096);
    let k = owner.reg(region.buf(), Access::REMOTE_WRITE).unwrap();
    let mut src = crate::mem::OwnedBuf::from_slice(&[7u8; 1000]);
    writer.send(ah, &[1u8; 8], 0).unwrap();
    writer.rdma_write_imm(ah, src.buf(), region.buf().addr() + 8, k, 0xDEAD_BEEF, 5).unwrap();
    // A refused write (bad key) reports nothing to the owner.
    writer.rdma_write_imm(ah, src.buf(), region.buf().addr(), k ^ 1, 9, 6).unwrap();
    let mut ev = Vec::new();
    writer.events(&mut ev);
    assert_eq!(
        ev,
        vec![
            DevEvent::SendDone { wr_id: 5, ah, status: Ok(()) },
            DevEvent::SendDone { wr_id: 6, ah, status: Err(Status::RemoteAccess) }
        ]
    );
    // The owner: the packet first, then the notice, the bytes in place.
    let mut got = Vec::new();
    owner.recv(16, |_, p: &[u8], _| {
        got.push(p.to_vec());
        crate::device::Rx::Next
    });
    assert_eq!(got, vec![vec![1u8; 8]], "the packet sent before; notices are no packets");
    let mut oev = Vec::new();
    owner.events(&mut oev);
    assert_eq!(oev, vec![DevEvent::WriteImm { ah: Some(back), raw: writer.local_addr(), imm: 0xDEAD_BEEF, len: 1000 }]);
    assert!(region.bytes()[8..1008].iter().all(|&b| b == 7) && region.bytes()[..8].iter().all(|&b| b == 0));
    assert!(region.bytes()[1008..].iter().all(|&b| b == 0));
    owner.dereg(k).unwrap();
}
