//! Runs N 8-byte tagged eager send+receive pairs between two endpoints over
//! the sim device, for instruction counts that do not drift with the
//! machine's speed (run twice under callgrind with different N and divide
//! the difference):
//!
//! ```sh
//! cargo build --release --example engine_pair
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/engine_pair 100000
//! ```

use rdm4::device::sim::{SimConfig, SimNet};
use rdm4::engine::{Config, Endpoint, RecvOpts, SendOpts};
use rdm4::mem::OwnedBuf;

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let net = SimNet::new(SimConfig { capture: false, inbox_capacity: 4096, ..SimConfig::default() });
    let mut a = Endpoint::new(net.device(), Config::default());
    let mut b = Endpoint::new(net.device(), Config::default());
    let to_b = a.av_insert(&b.addr()).unwrap();
    b.av_insert(&a.addr()).unwrap();
    let mut s = OwnedBuf::from_slice(&[7u8; 8]);
    let mut r = OwnedBuf::zeroed(8);
    let mut cq = Vec::with_capacity(8);
    for _ in 0..n {
        b.recv(r.buf(), RecvOpts { tag: Some((1, 0)), ..Default::default() }).unwrap();
        a.send(to_b, s.buf(), SendOpts { tag: Some(1), ..Default::default() }).unwrap();
        let mut got = 0;
        while got < 2 {
            b.progress(0);
            a.progress(0);
            cq.clear();
            got += b.poll_cq(&mut cq, 4) + a.poll_cq(&mut cq, 4);
        }
    }
    assert_eq!(r.bytes(), &[7u8; 8]);
}
