//! Two "hosts" on this machine for the tests that need them: network
//! namespaces joined by a veth pair, removed on drop.

#![allow(dead_code)]

use std::process::{Command, Stdio};

/// Runs `ip` with `args`; true on success.
pub fn ip(args: &[&str]) -> bool {
    Command::new("ip").args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Two namespaces, `ns[0]` with address `<subnet>.1/24` and `ns[1]` with
/// `<subnet>.2/24` on the two ends of a veth pair, loopback up in both.
pub struct Netns {
    pub ns: [String; 2],
}

impl Netns {
    /// Makes them, named after `tag` (a few characters, distinct per test
    /// binary's use) and this process's id, with `mtu` on the veth pair;
    /// `None` when a step fails (what was made is removed).
    pub fn pair(tag: &str, subnet: &str, mtu: u32) -> Option<Netns> {
        let id = std::process::id();
        let net = Netns { ns: [format!("rdm4{tag}a{id}"), format!("rdm4{tag}b{id}")] };
        let (va, vb) = (format!("{tag}a{}", id % 100_000), format!("{tag}b{}", id % 100_000));
        let ns = &net.ns;
        let mtu = mtu.to_string();
        let ok = ip(&["netns", "add", &ns[0]])
            && ip(&["netns", "add", &ns[1]])
            && ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb])
            && ip(&["link", "set", &va, "netns", &ns[0]])
            && ip(&["link", "set", &vb, "netns", &ns[1]])
            && ip(&["-n", &ns[0], "addr", "add", &format!("{subnet}.1/24"), "dev", &va])
            && ip(&["-n", &ns[1], "addr", "add", &format!("{subnet}.2/24"), "dev", &vb])
            && ip(&["-n", &ns[0], "link", "set", &va, "mtu", &mtu, "up"])
            && ip(&["-n", &ns[1], "link", "set", &vb, "mtu", &mtu, "up"])
            && ip(&["-n", &ns[0], "link", "set", "lo", "up"])
            && ip(&["-n", &ns[1], "link", "set", "lo", "up"]);
        ok.then_some(net)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for ns in &self.ns {
            // Deleting a namespace deletes its end of the veth pair, and the pair with it.
            let _ = ip(&["netns", "del", ns]);
        }
    }
}
