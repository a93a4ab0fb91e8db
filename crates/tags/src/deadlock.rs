//! Deadlock reports (mTags paper, section 5.3, Figure 6): the kernel side
//! reports the request that closes a circular call chain (sender, and the
//! process it goes to, which already holds the chain's deadlock tag); this
//! module rebuilds the chain, in the order its members were called, from
//! the tag's lifeline. Pure: no system calls.

use crate::ReceptionInfo;

/// One thread of a call chain.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Participant {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub host: String,
    /// How the chain reached it ("set" for the origin).
    pub via: String,
}

/// A circular call chain.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeadlockReport {
    pub tag: String,
    pub ts_ns: u64,
    /// Refused (the sender got EDEADLK) or only detected.
    pub refused: bool,
    /// Channel of the request that closes the circle.
    pub via: String,
    /// The chain, origin first, in the order its members were called; the
    /// last one sent the closing request.
    pub chain: Vec<Participant>,
    /// Where the closing request goes: a process of the chain.
    pub back_to_pid: u32,
    pub back_to_tid: u32,
    /// The user the chain's origin ran as, when the report was made (None:
    /// it has exited, or the origin is on another machine). Only threads
    /// allowed to set the tag start chains (issue 8): the report says who.
    pub started_by_uid: Option<u32>,
}

/// The chain that led to thread `tx_tid` (or, for a remote sender whose
/// thread is unknown, process `tx_pid`) holding the tag, as of `ts_ns`:
/// follow receptions backwards (who gave it the tag, who gave that one the
/// tag, ...) until the origin, where a tool or the API set it. Returns the
/// records origin first. A cycle in the records (a tag that went round
/// before) stops the walk.
pub fn chain_of(
    records: &[ReceptionInfo],
    tx_tid: u32,
    tx_pid: u32,
    ts_ns: u64,
) -> Vec<&ReceptionInfo> {
    let mut out: Vec<&ReceptionInfo> = Vec::new();
    let (mut tid, mut pid, mut until) = (tx_tid, tx_pid, ts_ns);
    while out.len() < records.len() {
        let hit = records
            .iter()
            .filter(|r| {
                r.ts_ns <= until
                    && if tid != 0 {
                        r.rx_tid == tid
                    } else {
                        r.rx_pid == pid
                    }
            })
            .filter(|r| r.via != "fork")
            .max_by_key(|r| (r.ts_ns, r.seq));
        let Some(r) = hit else { break };
        if out.iter().any(|o| o.seq == r.seq) {
            break;
        }
        out.push(r);
        if r.via == "set" {
            break;
        }
        (tid, pid, until) = (r.tx_tid, r.tx_pid, r.ts_ns);
    }
    out.reverse();
    out
}

/// Participants of a chain from its records (origin first).
pub fn participants(chain: &[&ReceptionInfo]) -> Vec<Participant> {
    chain
        .iter()
        .map(|r| Participant {
            tid: r.rx_tid,
            pid: r.rx_pid,
            comm: r.rx_comm.clone(),
            host: r.host.clone(),
            via: r.via.clone(),
        })
        .collect()
}

/// Text for people: one participant per line, then the closing edge.
pub fn render(r: &DeadlockReport) -> String {
    let mut s = format!(
        "deadlock: tag {}: circular call chain of {} thread(s), {}\n",
        r.tag,
        r.chain.len(),
        if r.refused {
            "the closing request was refused (EDEADLK)"
        } else {
            "detected when the closing request was sent (this channel has no deny point)"
        }
    );
    for (i, p) in r.chain.iter().enumerate() {
        s += &format!(
            "  {}. tid {} pid {} ({}) on {}{}\n",
            i + 1,
            p.tid,
            p.pid,
            crate::text::term(&p.comm),
            crate::text::term(&p.host),
            if i == 0 {
                match r.started_by_uid {
                    Some(u) => format!(", origin, started by uid {u}"),
                    None => ", origin".to_string(),
                }
            } else {
                format!(", called via {}", p.via)
            }
        );
    }
    s += &format!(
        "  -> back to pid {} (tid {}) via {}: circular wait\n",
        r.back_to_pid, r.back_to_tid, r.via
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, ts: u64, rx: u32, tx: u32, via: &str) -> ReceptionInfo {
        crate::test_reception(seq, ts, rx, tx, via, "h")
    }

    #[test]
    fn walks_back_to_the_origin_in_call_order() {
        // A (1) set; an earlier, answered chain A->X; then A->B->C.
        let rs = vec![
            rec(1, 10, 1, 99, "set"),
            rec(2, 20, 5, 1, "unix-stream"),
            rec(3, 30, 2, 1, "unix-stream"),
            rec(4, 40, 3, 2, "tcp"),
        ];
        let ch = chain_of(&rs, 3, 3, 50);
        let who: Vec<u32> = ch.iter().map(|r| r.rx_tid).collect();
        assert_eq!(who, vec![1, 2, 3]);
        assert_eq!(participants(&ch)[2].via, "tcp");
    }

    #[test]
    fn remote_sender_is_matched_by_pid_and_later_records_are_ignored() {
        let mut r2 = rec(2, 20, 7, 1, "tcp");
        r2.rx_pid = 70;
        let rs = vec![rec(1, 10, 1, 0, "set"), r2, rec(3, 60, 7, 1, "tcp")];
        let ch = chain_of(&rs, 0, 70, 50);
        assert_eq!(ch.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 2]);
    }

    #[test]
    fn a_loop_in_the_records_ends_the_walk() {
        let rs = vec![rec(1, 10, 1, 2, "pipe"), rec(2, 20, 2, 1, "pipe")];
        assert_eq!(chain_of(&rs, 2, 2, 30).len(), 2);
        assert!(chain_of(&rs, 9, 9, 30).is_empty());
    }
}
