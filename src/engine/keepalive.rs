//! What the engine does for a device whose peers need answers while the
//! application is away: the responder's call passed through, and which
//! peers the endpoint's operations await, so that the device notices when
//! one is gone ([`crate::device::Device::awaiting`]).

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

    /// See [`Responder::away`]: what a responder thread holds.
    pub fn away(&mut self) -> Option<std::sync::Arc<dyn crate::device::away::AwayWork>> {
        self.dev.as_responder().and_then(|r| r.away())
    }

    /// Tells the device which peers the endpoint's operations await
    /// ([`Device::awaiting`]), so that it notices when one of them is
    /// gone. The engine does it when the device asks
    /// ([`crate::device::DevEvent::Awaiting`]) and before it sleeps on a
    /// device with a responder; callers may do it at any time.
    pub fn keepalive(&mut self) {
        let Endpoint { dev, core } = self;
        core.tell_awaiting(dev);
    }

    /// Before a sleep on the device (or the application's sleep on its
    /// descriptor, `trywait`): the device learns which peers are awaited,
    /// so that its timers wake the sleeper to probe them (udp), however
    /// long ago it last asked. Only when an operation began since the
    /// device last learnt it: operations that end only leave peers it
    /// awaits no more (its marks lapse), and an event loop that sleeps
    /// often does not walk every operation in flight each time.
    pub(super) fn before_sleep(&mut self) {
        if self.core.responder && self.core.ops.inserted() != self.core.told_ops {
            self.keepalive();
        }
    }
}

impl super::Core {
    /// [`Endpoint::keepalive`]: every operation entry (sends beyond the
    /// eager fast path, receives under way, RMA and atomics) awaits its
    /// peer.
    pub(super) fn tell_awaiting<D: Device>(&mut self, dev: &mut D) {
        self.told_ops = self.ops.inserted();
        let mut last = None;
        for (_, op) in self.ops.iter() {
            if last == Some(op.peer) {
                continue;
            }
            last = Some(op.peer);
            if let Some(ah) = self.peers.get(op.peer).and_then(|p| p.ah.filter(|_| !p.lost)) {
                dev.awaiting(ah);
            }
        }
    }
}
