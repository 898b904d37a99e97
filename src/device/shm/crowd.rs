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
//! The count is this endpoint's own: itself and the shm peers inserted,
//! against the CPUs the process may run on (affinity and quota,
//! `available_parallelism`). A job inserts its local peers before it talks
//! (MPI does at start), so every process of the job sees the same count.
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
        // Read once per process (cgroup files and the affinity mask), not at
        // every open.
        static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let cpus = *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        Crowd { cpus, crowded: false, epoch: 0 }
    }
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
