//! What the engine does for its device while the application is away:
//! the responder's call passed through, and which peers the endpoint's
//! operations await, so that the device notices when one is gone
//! ([`crate::device::Device::awaiting`]).

use super::{Device, Endpoint};
use crate::device::Responder;

impl<D: Device> Endpoint<D> {
    /// Whether the device needs a responder beside manual progress
    /// (it has the [`Responder`] extension).
    pub fn wants_responder(&self) -> bool {
        self.core.responder
    }

    /// See [`Responder::respond`]: the device's work while the application
    /// is away (the engine itself does nothing then: what arrives waits
    /// in the device for the next progress call). `None`: the device needs
    /// no responder.
    pub fn respond(&mut self) -> Option<(std::os::fd::RawFd, i32)> {
        self.dev.as_responder().map(|r| r.respond())
    }

    /// See [`Responder::responder_fds`].
    pub fn responder_fds(&mut self) -> Vec<std::os::fd::RawFd> {
        self.dev.as_responder().map_or_else(Vec::new, |r| r.responder_fds())
    }

    /// Tells the device which peers the endpoint's operations await
    /// ([`Device::awaiting`]), so that it notices when one of them is
    /// gone: every operation entry (sends beyond the eager fast path,
    /// receives under way, RMA and atomics) awaits its peer. To be called
    /// about every 100 ms (the C API's responder or progress thread does).
    pub fn keepalive(&mut self) {
        let Endpoint { dev, core } = self;
        let mut last = None;
        for (_, op) in core.ops.iter() {
            if last == Some(op.peer) {
                continue;
            }
            last = Some(op.peer);
            if let Some(ah) = core.peers.get(op.peer).and_then(|p| p.ah.filter(|_| !p.lost)) {
                dev.awaiting(ah);
            }
        }
    }
}
