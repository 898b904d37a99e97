//! Crowded mode: more endpoints in a job on this host than CPUs to run
//! them, where copies, not latencies, bound the traffic.
//!
//! Two processes on CPUs of their own move a message fastest through the
//! ring: the sender copies in while the receiver copies out, in parallel,
//! through caches. When the processes that talk outnumber the CPUs (an
//! all-to-all of 4 to 16 processes on 2 vCPUs), the copies no longer run
//! side by side: every byte costs both copies of CPU time, and the job
//! moves at half the speed of a path that copies once. The device then
//! asks the engine to move messages from [`ShmConfig::crowded_longread_min`]
//! bytes by long-read — one cross-memory-attach copy by the receiver, the
//! sender passive — without a runt (whose packets would be copied twice
//! again). Measured in docs/performance.md ("All-to-all: crowded mode").
//!
//! The count is this endpoint's own: itself and the shm peers inserted
//! (its own address, which libfabric applications insert too, not counted
//! twice; peers found lost at the last peer check not counted: a peer that
//! reopened its endpoint is inserted again while its old address stays), against the CPUs of the host that the job may use ([`host_cpus`]: the
//! online CPUs, within the cgroup's cpuset and CPU quota). Not the
//! process's affinity: a launcher that binds each rank to a core of its
//! own (Open MPI does for two ranks) leaves every process one CPU while
//! the job has one per process, uncrowded. A job inserts its local peers
//! before it talks (MPI does at start), so every process of the job sees
//! the same count.
//! Inserting and removing peers switch the mode; the engine learns of a
//! switch through [`Device::caps_epoch`] and applies it to every peer.
//!
//! [`Device::caps_epoch`]: crate::device::Device::caps_epoch

use super::ShmConfig;
use crate::device::Caps;

/// Whether the endpoint is crowded, and the number the engine watches.
#[derive(Debug, Clone)]
pub(super) struct Crowd {
    cpus: usize,
    crowded: bool,
    epoch: u32,
}

impl Default for Crowd {
    fn default() -> Self {
        // Read once per process (cgroup files), not at every open.
        static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        Crowd { cpus: *CPUS.get_or_init(host_cpus), crowded: false, epoch: 0 }
    }
}

/// The CPUs of this host that the job may use: the online ones, within
/// this process's cgroup cpuset and CPU quota (cgroup v2, or v1's `cpuset`
/// and `cpu` hierarchies), whatever the process's own affinity.
pub(super) fn host_cpus() -> usize {
    // SAFETY: sysconf without pointers.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    let groups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let read = |path: String| std::fs::read_to_string(path).ok();
    // The path of this process in hierarchy `name` (v1) or the unified one.
    let path_of = |name: &str| {
        groups.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
            let hit = if name.is_empty() { ctrl.is_empty() } else { ctrl.split(',').any(|c| c == name) };
            hit.then(|| path.to_string())
        })
    };
    let v2 = path_of("").map(|p| format!("/sys/fs/cgroup{p}"));
    let cpuset = v2
        .as_ref()
        .and_then(|d| read(format!("{d}/cpuset.cpus.effective")))
        .or_else(|| path_of("cpuset").and_then(|p| read(format!("/sys/fs/cgroup/cpuset{p}/cpuset.effective_cpus"))))
        .and_then(|list| cpu_list_len(list.trim()));
    let quota = v2.as_ref().and_then(|d| read(format!("{d}/cpu.max"))).and_then(|m| {
        let mut f = m.split_whitespace();
        quota_cpus(f.next()?.parse().ok()?, f.next()?.parse().ok()?)
    });
    let quota = quota.or_else(|| {
        let p = path_of("cpu")?;
        let dir = ["cpu", "cpu,cpuacct"]
            .iter()
            .map(|d| format!("/sys/fs/cgroup/{d}{p}"))
            .find(|d| std::path::Path::new(&format!("{d}/cpu.cfs_quota_us")).exists())?;
        quota_cpus(
            read(format!("{dir}/cpu.cfs_quota_us"))?.trim().parse().ok()?,
            read(format!("{dir}/cpu.cfs_period_us"))?.trim().parse().ok()?,
        )
    });
    online.min(cpuset.unwrap_or(online)).min(quota.unwrap_or(online)).max(1)
}

/// The CPUs a quota of `quota` per `period` gives (rounded up); `None`
/// without a quota (negative: v1's -1).
fn quota_cpus(quota: i64, period: i64) -> Option<usize> {
    (quota > 0 && period > 0).then(|| ((quota + period - 1) / period) as usize)
}

/// How many CPUs a list such as "0-3,8,10-11" names; `None` when it is no
/// such list.
fn cpu_list_len(list: &str) -> Option<usize> {
    if list.is_empty() {
        return None;
    }
    list.split(',').try_fold(0usize, |n, part| match part.split_once('-') {
        Some((a, b)) => {
            let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
            (b >= a).then(|| n + b - a + 1)
        }
        None => part.parse::<usize>().ok().map(|_| n + 1),
    })
}

impl Crowd {
    /// Takes the number of shm peers inserted now; switches the mode (and
    /// the epoch) when this endpoint and its peers start or stop
    /// outnumbering the CPUs.
    pub(super) fn peers(&mut self, peers: usize) {
        let crowded = peers + 1 > self.cpus;
        if crowded != self.crowded {
            self.crowded = crowded;
            self.epoch = self.epoch.wrapping_add(1);
        }
    }

    pub(super) fn epoch(&self) -> u32 {
        self.epoch
    }

    pub(super) fn crowded(&self) -> bool {
        self.crowded
    }

    /// `caps` as the mode makes them: in crowded mode long-read from the
    /// smaller of the two sizes, and no runt where crowding set the size.
    pub(super) fn apply(&self, cfg: &ShmConfig, mut caps: Caps) -> Caps {
        if self.crowded && caps.rdma_read && cfg.crowded_longread_min < cfg.longread_min {
            caps.longread_min = cfg.crowded_longread_min;
            caps.runt = false;
        }
        caps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> Caps {
        Caps {
            mtu: 65536,
            max_rdma_size: 1 << 30,
            rdma_read: true,
            rdma_write: true,
            rdma_write_imm: true,
            sync_send: true,
            gather_in_place: false,
            longread_min: usize::MAX,
            runt: true,
        }
    }

    #[test]
    fn more_endpoints_than_cpus_switch_to_long_read_without_runt_and_back() {
        let cfg = ShmConfig::default();
        let mut c = Crowd { cpus: 2, crowded: false, epoch: 7 };
        c.peers(1);
        assert_eq!((c.apply(&cfg, caps()), c.epoch()), (caps(), 7), "2 endpoints on 2 CPUs: not crowded");
        c.peers(2);
        let crowded = c.apply(&cfg, caps());
        assert_eq!((crowded.longread_min, crowded.runt, c.epoch()), (cfg.crowded_longread_min, false, 8));
        c.peers(5);
        assert_eq!(c.epoch(), 8, "still crowded: no switch");
        c.peers(1);
        assert_eq!((c.apply(&cfg, caps()), c.epoch()), (caps(), 9), "back below the CPUs");
    }

    #[test]
    fn cpu_lists_and_quotas_are_read_as_the_kernel_writes_them() {
        assert_eq!(cpu_list_len("0-3,8,10-11"), Some(7));
        assert_eq!(cpu_list_len("5"), Some(1));
        assert_eq!(cpu_list_len(""), None);
        assert_eq!(cpu_list_len("3-1"), None);
        assert_eq!(cpu_list_len("x"), None);
        assert_eq!(quota_cpus(150_000, 100_000), Some(2));
        assert_eq!(quota_cpus(-1, 100_000), None);
    }

    #[test]
    fn a_process_bound_to_one_cpu_still_counts_the_hosts() {
        // SAFETY: sysconf without pointers.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        let unbound = host_cpus();
        assert!(unbound >= 1 && unbound <= online);
        // This thread bound to CPU 0, as a launcher binds a rank.
        // SAFETY: sched_{get,set}affinity of this thread with a cpu_set_t.
        let bound = unsafe {
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut old);
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut one);
            let set = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) == 0;
            let got = host_cpus();
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &old);
            set.then_some(got)
        };
        if let Some(bound) = bound {
            assert_eq!(bound, unbound, "bound to one CPU, the host's count is unchanged");
        }
    }

    #[test]
    fn an_explicit_size_or_no_cross_memory_attach_leaves_the_caps_alone() {
        let mut c = Crowd { cpus: 1, crowded: false, epoch: 0 };
        c.peers(3);
        let explicit = ShmConfig { longread_min: 8192, crowded_longread_min: usize::MAX, ..ShmConfig::default() };
        let want = Caps { longread_min: 8192, ..caps() };
        assert_eq!(c.apply(&explicit, want), want, "RDM4_SHM_LONGREAD_MIN set");
        let no_cma = Caps { rdma_read: false, ..caps() };
        assert_eq!(c.apply(&ShmConfig::default(), no_cma), no_cma, "no RDMA read: nothing to switch to");
    }
}
