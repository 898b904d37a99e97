//! The engine's map from device address handles to peers.

use crate::device::Ah;
use crate::fxhash::FxHashMap;

/// Device address handle → peer. Devices hand out small dense handles
/// (indices), which a vector maps with one load; others go to a hash map.
#[derive(Default)]
pub(crate) struct AhTable {
    dense: Vec<u32>,
    sparse: FxHashMap<Ah, u32>,
}

impl AhTable {
    /// Handles below this are kept in the vector.
    const DENSE: usize = 1 << 16;

    /// The peer of `ah`: inline for the dense handles (every packet asks),
    /// out of line for the others.
    #[inline(always)]
    pub(crate) fn get(&self, ah: Ah) -> Option<u32> {
        if (ah as usize) < Self::DENSE {
            self.dense.get(ah as usize).copied().filter(|&p| p != u32::MAX)
        } else {
            self.get_sparse(ah)
        }
    }

    #[inline(never)]
    fn get_sparse(&self, ah: Ah) -> Option<u32> {
        self.sparse.get(&ah).copied()
    }

    pub(crate) fn insert(&mut self, ah: Ah, peer: u32) {
        let i = ah as usize;
        if i < Self::DENSE {
            if self.dense.len() <= i {
                self.dense.resize(i + 1, u32::MAX);
            }
            self.dense[i] = peer;
        } else {
            self.sparse.insert(ah, peer);
        }
    }
}
