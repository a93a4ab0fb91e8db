//! The protected path's view of a guest (seccomp user notification):
//! [`ProtectedGuest`] reads the caller's memory with process_vm_readv and
//! re-validates the notification id *after* each read, so that a read of
//! a recycled tid (the caller died, its tid reused) is never believed;
//! [`call_of`] turns a notification into a [`Call`].
//!
//! Trust: what is read is the guest's claim at that instant; the guest
//! (another thread of it) may change it before the kernel reads it again.
//! A security decision must therefore not answer Continue on it: agents
//! Perform (the executive makes the call with what it read) or Fail.
//! No write access on this path (process_vm_writev would race the same
//! way; the fast path and Perform cover the needs).

use crate::agent::{Call, Guest, GuestError};
use crate::sysno::Sysno;
use mantle_sys::seccomp::{seccomp_notif, Listener, AUDIT_ARCH};

/// One pending notification, as an agent sees it.
pub struct ProtectedGuest<'a> {
    pub listener: &'a Listener,
    pub id: u64,
    pub tid: u32,
}

impl Guest for ProtectedGuest<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<usize, GuestError> {
        let r = mantle_sys::supervise::read_memory(self.tid, addr, buf);
        // after the read: the tid still names the caller of this call
        if !self.still_pending() {
            return Err(GuestError::Gone);
        }
        r.map_err(|e| GuestError::of_memory(&e, addr))
    }

    fn still_pending(&mut self) -> bool {
        self.listener.id_valid(self.id).unwrap_or(false)
    }

    fn write(&mut self, addr: u64, buf: &[u8]) -> Result<usize, GuestError> {
        // before the write: the tid still names the caller of this call
        // (what is left is the microseconds between this check and the
        // write, in which the caller would have to die and its tid be
        // given to a new task: the same rule as the QoS reader's writes)
        if !self.still_pending() {
            return Err(GuestError::Gone);
        }
        mantle_sys::supervise::write_memory(self.tid, addr, buf)
            .map_err(|e| GuestError::of_memory(&e, addr))
    }
}

/// The call a notification carries; None for another architecture's call
/// (the filter kills those, so this is a kernel surprise, answered ENOSYS).
pub fn call_of(n: &seccomp_notif, received_ns: u64) -> Option<Call> {
    if n.data.arch != AUDIT_ARCH {
        return None;
    }
    Some(Call {
        tid: n.pid,
        nr: Sysno(n.data.nr as u32),
        args: n.data.args,
        ip: n.data.instruction_pointer,
        received_ns,
        start_ns: received_ns,
    })
}
