//! One thread as a tool describes it: its process and command name from
//! /proc (readable by anyone), and, for root, the whole thread object even
//! when the thread holds nothing (the kernel side lists only threads with a
//! tag, a terminator or a class mark).

use crate::{Error, Tags, ThreadInfo};

/// Process id and comm of any thread, from /proc. A thread that is not
/// there is [`Error::NoSuchThread`].
pub fn proc_thread(tid: u32) -> Result<(u32, String), Error> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status"))
        .map_err(|_| Error::NoSuchThread(tid))?;
    let pid = tgid(&status).ok_or(Error::NoSuchThread(tid))?;
    let comm = std::fs::read_to_string(format!("/proc/{tid}/comm"))
        .map(|c| c.trim_end_matches('\n').to_string())
        .unwrap_or_default();
    Ok((pid, comm))
}

/// The process id in the text of /proc/TID/status.
fn tgid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The thread object of `tid` (process `pid`, command `comm`): the kernel
/// side's listing of it, or an empty one when it holds nothing. Root.
pub fn object(t: &Tags, tid: u32, pid: u32, comm: String) -> Result<ThreadInfo, Error> {
    Ok(t.threads(None)?
        .into_iter()
        .find(|th| th.tid == tid)
        .unwrap_or(ThreadInfo {
            tid,
            pid,
            comm,
            system: false,
            tags: Vec::new(),
            terminators: Vec::new(),
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tgid_from_status() {
        assert_eq!(tgid("Name:\tx\nTgid:\t 42\nPid:\t43\n"), Some(42));
        assert_eq!(tgid("Name:\tx\n"), None);
        assert_eq!(tgid("Tgid:\tz\n"), None);
    }

    #[test]
    fn this_thread_is_found_and_a_missing_one_is_not() {
        let me = std::process::id();
        assert_eq!(proc_thread(me).unwrap().0, me);
        assert!(matches!(
            proc_thread(u32::MAX),
            Err(Error::NoSuchThread(u32::MAX))
        ));
    }
}
