//! Unit tests of the endpoint's life and its neighbours': the wake-up
//! descriptor, peers that close or die, segments left behind, settings.

use super::*;

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
        // `b` closes here, and with it its writer of `a`'s FIFO.
    }
    assert_eq!(revents(fd), 0, "a closed writer must not make the fd ready (POLLHUP)");
    // And it still wakes for the next packet.
    let mut c = ShmDevice::open_with(cfg("hup")).unwrap();
    let ah = c.insert(&a.local_addr()).unwrap();
    c.send(ah, &[9u8; 8], 0).unwrap();
    assert_ne!(revents(fd) & libc::POLLIN, 0);
    assert!(a.wait(0));
}
