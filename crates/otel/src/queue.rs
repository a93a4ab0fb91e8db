//! What an exporter holds before the collector takes it: a bounded queue
//! of items (spans, metric points) sent in batches, retried with
//! exponential backoff while the collector is down or busy, and let go,
//! counted, when it would outgrow its bound or outlive the retry window.
//! Pure: the caller says what time it is and what a send did.
//!
//! - Full: the oldest item goes (`dropped_full`): the newest tell what is
//!   happening now.
//! - Older than the retry window: it goes (`dropped_expired`). Only items
//!   waiting for a collector that fails age out: one that answers takes
//!   every batch within a flush interval.
//! - Refused for good (an error status other than 429/502/503/504): the
//!   batch goes (`dropped_rejected`); the collector will never take it.
//! - Backoff: from `backoff_min`, doubled at each failure up to
//!   `backoff_max`, back to the minimum at the first success.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Limits of a queue.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// Items per request at most.
    pub batch: usize,
    /// Items held at most.
    pub max_queued: usize,
    /// How long an item may wait for a failing collector.
    pub retry_window: Duration,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// A batch smaller than `batch` goes after waiting this long.
    pub flush: Duration,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            batch: 512,
            max_queued: 65536,
            retry_window: Duration::from_secs(300),
            backoff_min: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            flush: Duration::from_secs(1),
        }
    }
}

/// What happened to the items, since the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    pub queued: u64,
    pub sent: u64,
    pub dropped_full: u64,
    pub dropped_expired: u64,
    pub dropped_rejected: u64,
    /// Requests that failed (each retry counts).
    pub failures: u64,
    /// The most items held at once.
    pub peak: usize,
}

impl Stats {
    /// Every item let go without being sent.
    pub fn dropped(&self) -> u64 {
        self.dropped_full + self.dropped_expired + self.dropped_rejected
    }
}

/// The queue.
pub struct Queue<T> {
    p: Policy,
    items: VecDeque<(Instant, T)>,
    pub stats: Stats,
    next_try: Option<Instant>,
    backoff: Duration,
    /// The last failure, while failing.
    pub failing: Option<String>,
    oldest_wait: Option<Instant>,
}

impl<T> Queue<T> {
    pub fn new(p: Policy) -> Queue<T> {
        Queue {
            p: Policy {
                batch: p.batch.max(1),
                max_queued: p.max_queued.max(1),
                ..p
            },
            items: VecDeque::new(),
            stats: Stats::default(),
            next_try: None,
            backoff: p.backoff_min,
            failing: None,
            oldest_wait: None,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Adds an item received at `now`.
    pub fn push(&mut self, now: Instant, item: T) {
        if self.items.len() >= self.p.max_queued {
            self.items.pop_front();
            self.stats.dropped_full += 1;
        }
        if self.items.is_empty() {
            self.oldest_wait = Some(now);
        }
        self.items.push_back((now, item));
        self.stats.queued += 1;
        self.stats.peak = self.stats.peak.max(self.items.len());
    }

    /// Lets go of items older than the retry window.
    pub fn expire(&mut self, now: Instant) {
        while let Some((t, _)) = self.items.front() {
            if now.saturating_duration_since(*t) <= self.p.retry_window {
                break;
            }
            self.items.pop_front();
            self.stats.dropped_expired += 1;
        }
    }

    /// The next batch to send at `now`, if one is due: a full batch, or
    /// any items once the flush interval passed or when `flush_all` (at the
    /// end); never before the backoff allows.
    pub fn due(&mut self, now: Instant, flush_all: bool) -> Option<Vec<&T>> {
        if self.items.is_empty() || self.next_try.is_some_and(|t| now < t) {
            return None;
        }
        let waited = self
            .oldest_wait
            .is_some_and(|t| now.saturating_duration_since(t) >= self.p.flush);
        if self.items.len() < self.p.batch && !waited && !flush_all && self.failing.is_none() {
            return None;
        }
        Some(
            self.items
                .iter()
                .take(self.p.batch)
                .map(|(_, x)| x)
                .collect(),
        )
    }

    /// When the next send may be tried (backing off), if later than now.
    pub fn next_try(&self) -> Option<Instant> {
        self.next_try
    }

    /// The first `n` items were taken by the collector.
    pub fn sent(&mut self, n: usize) {
        let n = n.min(self.items.len());
        self.items.drain(..n);
        self.stats.sent += n as u64;
        self.backoff = self.p.backoff_min;
        self.next_try = None;
        self.failing = None;
        self.oldest_wait = self.items.front().map(|(t, _)| *t);
    }

    /// Lets go of everything held (the end, with a collector that
    /// fails): counted as expired.
    pub fn drop_all(&mut self) -> u64 {
        let n = self.items.len() as u64;
        self.items.clear();
        self.stats.dropped_expired += n;
        self.oldest_wait = None;
        n
    }

    /// Sending the first `n` items failed at `now`; `retryable` says
    /// whether they may be sent again.
    pub fn failed(&mut self, now: Instant, n: usize, retryable: bool, why: String) {
        self.stats.failures += 1;
        self.failing = Some(why);
        if retryable {
            self.next_try = Some(now + self.backoff);
            self.backoff = (self.backoff * 2).min(self.p.backoff_max);
        } else {
            let n = n.min(self.items.len());
            self.items.drain(..n);
            self.stats.dropped_rejected += n as u64;
            self.oldest_wait = self.items.front().map(|(t, _)| *t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            batch: 3,
            max_queued: 5,
            retry_window: Duration::from_secs(10),
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(4),
            flush: Duration::from_secs(2),
        }
    }

    #[test]
    fn batches_wait_for_size_or_flush() {
        let t0 = Instant::now();
        let mut q = Queue::new(policy());
        q.push(t0, 1);
        assert!(q.due(t0, false).is_none());
        assert_eq!(q.due(t0 + Duration::from_secs(2), false).unwrap(), vec![&1]);
        assert_eq!(q.due(t0, true).unwrap(), vec![&1]);
        q.push(t0, 2);
        q.push(t0, 3);
        q.push(t0, 4);
        assert_eq!(q.due(t0, false).unwrap(), vec![&1, &2, &3]);
        q.sent(3);
        assert_eq!(q.len(), 1);
        assert_eq!(q.stats.sent, 3);
    }

    #[test]
    fn bounded_backoff_and_expiry() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut q = Queue::new(policy());
        for i in 0..8 {
            q.push(t0, i);
        }
        assert_eq!(q.len(), 5);
        assert_eq!(q.stats.dropped_full, 3);
        assert_eq!(q.stats.peak, 5);
        // failing: 1 s, 2 s, 4 s, 4 s
        q.failed(t0, 3, true, "down".into());
        assert!(q.due(t0 + Duration::from_millis(999), false).is_none());
        assert!(q.due(t0 + s(1), false).is_some());
        q.failed(t0 + s(1), 3, true, "down".into());
        assert_eq!(q.next_try(), Some(t0 + s(3)));
        q.failed(t0 + s(3), 3, true, "down".into());
        assert_eq!(q.next_try(), Some(t0 + s(7)));
        q.failed(t0 + s(7), 3, true, "down".into());
        assert_eq!(q.next_try(), Some(t0 + s(11)));
        assert_eq!(q.stats.failures, 4);
        // newer items survive the window, older ones go
        q.push(t0 + s(9), 100);
        q.expire(t0 + s(11));
        assert_eq!(q.len(), 1);
        assert_eq!(q.stats.dropped_expired, 4);
        assert_eq!(q.stats.dropped_full, 4, "100 came to a full queue");
        // success resets the backoff
        assert_eq!(q.due(t0 + s(11), false).unwrap(), vec![&100]);
        q.sent(1);
        q.push(t0 + s(12), 101);
        q.failed(t0 + s(12), 1, true, "down".into());
        assert_eq!(q.next_try(), Some(t0 + s(13)));
        // refused for good: dropped and counted
        q.failed(t0 + s(13), 1, false, "400".into());
        assert!(q.is_empty());
        assert_eq!(q.stats.dropped_rejected, 1);
        assert_eq!(q.stats.dropped(), 4 + 4 + 1);
        assert_eq!(q.stats.queued, 10);
        assert_eq!(q.stats.sent, 1);
    }
}
