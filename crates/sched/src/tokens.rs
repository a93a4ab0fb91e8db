//! The QoS token scheduler of the paper's Figure 7 (seeds/001, section
//! 3.3): I/O reservations in items per period.
//!
//! Each reserved task has `init_tokens` per period (a reservation of
//! packets per second becomes `rate × period` tokens: 35 000 packets/s
//! with the paper's 100 ms period, "refreshed periodically, at 10 times
//! per second", is 3 500 tokens). Tasks are ordered by QoS, most important
//! first (ties: the order they were added). There is at most one
//! best-effort task.
//!
//! Decides (`pick`, Figure 7's `main_event_loop`): if the period has
//! expired, every task's tokens are reset to `init_tokens`; then the first
//! task in QoS order that has data (the caller's `has_data`, e.g. from
//! `epoll`) and tokens left runs; otherwise the best-effort task runs
//! (Figure 7 picks it whether or not it has data; [`TokenDispatch`] says
//! which case it is, so the executive may idle instead). `until` is the
//! next refresh, where the decision must be taken again.
//!
//! Reads (Figure 7's `guest_syscall_read`): the executive reads
//! non-blocking on the task's behalf "until there is no pending data, the
//! guest has run out of buffer space, or the task runs out of tokens":
//! [`Tokens::budget`] is how many items a read may take now,
//! [`Tokens::consume`] is called for each item read.
//!
//! Invariants: a reserved task receives at most `init_tokens` items per
//! period; when every reserved task has data and the executive can read
//! more than the sum of the tokens per period, each receives exactly its
//! tokens and the best-effort task gets the rest (the surplus). Reserved
//! tasks out of tokens get nothing more until the refresh even if the
//! best-effort task has no data (Figure 7 is not work-conserving).
//! No clock and no I/O here: `now` and `has_data` come from the caller.

use super::TaskId;

/// What a task reserves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserve {
    /// `per_period` items per period; `qos`: larger is more important.
    Tokens { qos: u32, per_period: u32 },
    /// The surplus.
    BestEffort,
}

/// How many items a read may take now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// At most this many (a reserved task's tokens left; 0: none).
    Items(u32),
    /// No limit but the data and the guest's buffer (best effort).
    Unlimited,
}

/// The token scheduler's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenDispatch {
    /// The task to run (`None`: no reserved task qualifies and there is
    /// no best-effort task).
    pub task: Option<TaskId>,
    /// The task is the best-effort one (it may have no data).
    pub best_effort: bool,
    /// The next token refresh: decide again then at the latest.
    pub until: u64,
}

/// Errors of the token scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the token period is zero")]
    ZeroPeriod,
    #[error("{0} reserves zero tokens per period")]
    ZeroTokens(TaskId),
    #[error("{0} is already scheduled")]
    Duplicate(TaskId),
    #[error("{existing} is already the best-effort task")]
    BestEffortTaken { existing: TaskId },
    #[error("{0} is not scheduled by the token scheduler")]
    Unknown(TaskId),
    #[error("{0} has no tokens left in this period")]
    NoTokens(TaskId),
}

#[derive(Debug, Clone)]
struct Entry {
    task: TaskId,
    qos: u32,
    init: u32,
    curr: u32,
}

/// Figure 7's scheduler; see the module documentation.
#[derive(Debug, Clone)]
pub struct Tokens {
    period_ns: u64,
    next_refresh: u64,
    /// Reserved tasks, most important first.
    reserved: Vec<Entry>,
    best_effort: Option<TaskId>,
}

impl Tokens {
    /// Tokens refreshed every `period_ns` (the paper: 100 ms), the first
    /// period starting at `now`.
    pub fn new(period_ns: u64, now: u64) -> Result<Self, TokenError> {
        if period_ns == 0 {
            return Err(TokenError::ZeroPeriod);
        }
        Ok(Tokens {
            period_ns,
            next_refresh: now.saturating_add(period_ns),
            reserved: Vec::new(),
            best_effort: None,
        })
    }

    /// Tokens per period for a rate of `per_second` items per second
    /// (rounded down, at least 1 for a non-zero rate).
    pub fn tokens_for_rate(&self, per_second: u64) -> u32 {
        let t = u128::from(per_second) * u128::from(self.period_ns) / 1_000_000_000;
        let t = u32::try_from(t).unwrap_or(u32::MAX);
        if per_second > 0 {
            t.max(1)
        } else {
            0
        }
    }

    fn contains(&self, task: TaskId) -> bool {
        self.best_effort == Some(task) || self.reserved.iter().any(|e| e.task == task)
    }

    /// Adds `task` with its reservation; it starts with full tokens.
    pub fn add(&mut self, task: TaskId, reserve: Reserve) -> Result<(), TokenError> {
        if self.contains(task) {
            return Err(TokenError::Duplicate(task));
        }
        match reserve {
            Reserve::BestEffort => match self.best_effort {
                Some(existing) => Err(TokenError::BestEffortTaken { existing }),
                None => {
                    self.best_effort = Some(task);
                    Ok(())
                }
            },
            Reserve::Tokens { per_period: 0, .. } => Err(TokenError::ZeroTokens(task)),
            Reserve::Tokens { qos, per_period } => {
                // After every task of the same or higher QoS: stable order.
                let at = self.reserved.partition_point(|e| e.qos >= qos);
                self.reserved.insert(
                    at,
                    Entry {
                        task,
                        qos,
                        init: per_period,
                        curr: per_period,
                    },
                );
                Ok(())
            }
        }
    }

    /// Forgets `task`.
    pub fn remove(&mut self, task: TaskId) -> Result<(), TokenError> {
        if self.best_effort == Some(task) {
            self.best_effort = None;
            return Ok(());
        }
        let i = self.index(task)?;
        self.reserved.remove(i);
        Ok(())
    }

    fn index(&self, task: TaskId) -> Result<usize, TokenError> {
        self.reserved
            .iter()
            .position(|e| e.task == task)
            .ok_or(TokenError::Unknown(task))
    }

    /// Resets every task's tokens if the period has expired (several
    /// expired periods count as one refresh).
    pub fn refresh(&mut self, now: u64) {
        if now < self.next_refresh {
            return;
        }
        for e in &mut self.reserved {
            e.curr = e.init;
        }
        let behind = (now - self.next_refresh) / self.period_ns + 1;
        self.next_refresh = self
            .next_refresh
            .saturating_add(behind.saturating_mul(self.period_ns));
    }

    /// Figure 7's decision at `now`; `has_data(task)`: the task's stream
    /// has data pending.
    pub fn pick(&mut self, now: u64, has_data: impl Fn(TaskId) -> bool) -> TokenDispatch {
        self.refresh(now);
        let until = self.next_refresh;
        if let Some(e) = self
            .reserved
            .iter()
            .find(|e| e.curr > 0 && has_data(e.task))
        {
            return TokenDispatch {
                task: Some(e.task),
                best_effort: false,
                until,
            };
        }
        TokenDispatch {
            task: self.best_effort,
            best_effort: self.best_effort.is_some(),
            until,
        }
    }

    /// How many items a read by `task` may take now.
    pub fn budget(&self, task: TaskId) -> Result<Budget, TokenError> {
        if self.best_effort == Some(task) {
            return Ok(Budget::Unlimited);
        }
        Ok(Budget::Items(self.reserved[self.index(task)?].curr))
    }

    /// One item was read for `task`: takes a token. Returns the budget
    /// left; refuses (and takes nothing) when a reserved task has none.
    pub fn consume(&mut self, task: TaskId) -> Result<Budget, TokenError> {
        if self.best_effort == Some(task) {
            return Ok(Budget::Unlimited);
        }
        let i = self.index(task)?;
        let e = &mut self.reserved[i];
        if e.curr == 0 {
            return Err(TokenError::NoTokens(task));
        }
        e.curr -= 1;
        Ok(Budget::Items(e.curr))
    }

    /// Reserved tasks in QoS order with (tokens per period, tokens left).
    pub fn reserved(&self) -> impl Iterator<Item = (TaskId, u32, u32)> + '_ {
        self.reserved.iter().map(|e| (e.task, e.init, e.curr))
    }
}

#[cfg(test)]
mod tests {
    use super::super::sim::Rng;
    use super::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    /// A stream: items arrive at `rate` per second from `start`, into a
    /// socket buffer of `cap` items (overflow is dropped).
    struct Stream {
        task: TaskId,
        rate: u64,
        start: u64,
        cap: u64,
        arrived: u64,
        queued: u64,
        dropped: u64,
        /// Items delivered, per simulated second.
        delivered: Vec<u64>,
    }

    impl Stream {
        fn new(task: TaskId, rate: u64, start: u64) -> Self {
            Stream {
                task,
                rate,
                start,
                cap: 2_000,
                arrived: 0,
                queued: 0,
                dropped: 0,
                delivered: Vec::new(),
            }
        }
        fn arrive(&mut self, now: u64) {
            let total = if now < self.start {
                0
            } else {
                (u128::from(now - self.start) * u128::from(self.rate) / u128::from(S)) as u64
            };
            let new = total - self.arrived;
            self.arrived = total;
            let room = self.cap - self.queued;
            self.queued += new.min(room);
            self.dropped += new.saturating_sub(room);
        }
        /// Next arrival instant after `now`.
        fn next_arrival(&self, now: u64) -> u64 {
            if now < self.start {
                return self.start;
            }
            let k = self.arrived + 1;
            self.start + (u128::from(k) * u128::from(S)).div_ceil(u128::from(self.rate)) as u64
        }
    }

    /// Runs the executive's loop of Figure 7 for `secs` seconds: each
    /// item read costs `cost_ns`; a read takes at most `buf` items.
    fn run(tokens: &mut Tokens, streams: &mut [Stream], secs: usize, cost_ns: u64, buf: u64) {
        for s in streams.iter_mut() {
            s.delivered = vec![0; secs];
        }
        let end = secs as u64 * S;
        let mut now = 0;
        while now < end {
            for s in streams.iter_mut() {
                s.arrive(now);
            }
            let queued: Vec<(TaskId, u64)> = streams.iter().map(|s| (s.task, s.queued)).collect();
            let has = |t: TaskId| queued.iter().any(|&(q, n)| q == t && n > 0);
            let d = tokens.pick(now, has);
            let Some(task) = d.task.filter(|&t| has(t)) else {
                let next = streams.iter().map(|s| s.next_arrival(now)).min().unwrap();
                now = next.min(d.until).max(now + 1);
                continue;
            };
            let s = streams.iter_mut().find(|s| s.task == task).unwrap();
            let allowed = match tokens.budget(task).unwrap() {
                Budget::Items(n) => u64::from(n),
                Budget::Unlimited => u64::MAX,
            };
            let n = s.queued.min(buf).min(allowed);
            assert!(n > 0, "picked {task} with nothing to read");
            for _ in 0..n {
                tokens.consume(task).unwrap();
            }
            s.queued -= n;
            s.delivered[(now / S) as usize] += n;
            now += n * cost_ns;
        }
    }

    #[test]
    fn figure_8_reservations_hold_in_overload_and_best_effort_takes_the_surplus() {
        // The paper's setup: 42 000 items/s per stream, reservations of
        // 35 000, 20 000, 10 000 items/s and a best-effort task; the
        // best-effort stream starts first, the others every 2 s. The
        // executive reads 100 000 items/s (10 µs each): overload once all
        // four run (168 000/s offered).
        let mut tokens = Tokens::new(100 * MS, 0).unwrap();
        let rates = [35_000, 20_000, 10_000];
        for (i, r) in rates.iter().enumerate() {
            let per_period = tokens.tokens_for_rate(*r);
            tokens
                .add(
                    TaskId(i as u32),
                    Reserve::Tokens {
                        qos: 10 - i as u32,
                        per_period,
                    },
                )
                .unwrap();
        }
        tokens.add(TaskId(3), Reserve::BestEffort).unwrap();
        let mut streams = vec![
            Stream::new(TaskId(0), 42_000, 6 * S),
            Stream::new(TaskId(1), 42_000, 4 * S),
            Stream::new(TaskId(2), 42_000, 2 * S),
            Stream::new(TaskId(3), 42_000, 0),
        ];
        run(&mut tokens, &mut streams, 10, 10_000, 64);
        // Under-load: the best-effort task alone gets all its stream.
        assert!(
            streams[3].delivered[1] >= 41_000,
            "{:?}",
            streams[3].delivered
        );
        // Overload (seconds 7..10): each reserved task gets its
        // reservation exactly, the best effort the surplus.
        for sec in 7..10 {
            for (i, r) in rates.iter().enumerate() {
                assert_eq!(streams[i].delivered[sec], *r, "task {i} second {sec}");
            }
            let surplus = 100_000 - 65_000;
            let be = streams[3].delivered[sec];
            assert!(
                be * 100 >= surplus * 97 && be <= surplus,
                "best effort {be} in second {sec}"
            );
        }
        // The reserved streams above their reservation drop the rest.
        assert!(streams[0].dropped > 0 && streams[3].dropped > 0);
    }

    #[test]
    fn delivers_in_proportion_to_tokens_over_random_sets() {
        // Property: random reservations and capacities. When the
        // executive can read more than the reservations, every reserved
        // task with a stream faster than its reservation receives exactly
        // its tokens per period and the best effort the rest; when it
        // cannot, the most important tasks are served first.
        let mut rng = Rng::new(3);
        for case in 0..40 {
            let n = rng.range(1, 4) as usize;
            let mut tokens = Tokens::new(100 * MS, 0).unwrap();
            let mut rates = Vec::new();
            let mut streams = Vec::new();
            for i in 0..n {
                let rate = rng.range(1, 40) * 1_000;
                tokens
                    .add(
                        TaskId(i as u32),
                        Reserve::Tokens {
                            qos: (n - i) as u32,
                            per_period: tokens.tokens_for_rate(rate),
                        },
                    )
                    .unwrap();
                rates.push(rate);
                streams.push(Stream::new(TaskId(i as u32), rate + 10_000, 0));
            }
            let be = TaskId(99);
            tokens.add(be, Reserve::BestEffort).unwrap();
            streams.push(Stream::new(be, 200_000, 0));
            let capacity = rng.range(20, 160) * 1_000;
            run(&mut tokens, &mut streams, 3, S / capacity, 50);
            let reserved: u64 = rates.iter().sum();
            // Count seconds 1 and 2 (second 0 starts with full queues).
            let mut left = capacity;
            for (i, &r) in rates.iter().enumerate() {
                let got = streams[i].delivered[1] + streams[i].delivered[2];
                let want = 2 * r.min(left);
                assert!(
                    got.abs_diff(want) * 100 <= want.max(100),
                    "case {case} task {i}: got {got}, want {want} (rates {rates:?}, capacity {capacity})"
                );
                left -= r.min(left);
            }
            let got = streams[n].delivered[1] + streams[n].delivered[2];
            let want = 2 * capacity.saturating_sub(reserved);
            assert!(
                got.abs_diff(want) * 100 <= want.max(2_000),
                "case {case} best effort: got {got}, want {want} (rates {rates:?}, capacity {capacity})"
            );
        }
    }

    #[test]
    fn decision_order_refresh_budget_and_errors() {
        let mut t = Tokens::new(100, 1_000).unwrap();
        let (a, b, c, be) = (TaskId(1), TaskId(2), TaskId(3), TaskId(4));
        t.add(
            b,
            Reserve::Tokens {
                qos: 5,
                per_period: 2,
            },
        )
        .unwrap();
        t.add(
            a,
            Reserve::Tokens {
                qos: 9,
                per_period: 1,
            },
        )
        .unwrap();
        t.add(
            c,
            Reserve::Tokens {
                qos: 5,
                per_period: 1,
            },
        )
        .unwrap();
        assert_eq!(t.reserved().map(|e| e.0).collect::<Vec<_>>(), [a, b, c]);
        let all = |_: TaskId| true;
        // No best-effort task and nobody with data: nothing.
        assert_eq!(
            t.pick(1_000, |_| false),
            TokenDispatch {
                task: None,
                best_effort: false,
                until: 1_100
            }
        );
        t.add(be, Reserve::BestEffort).unwrap();
        assert_eq!(
            t.add(be, Reserve::BestEffort),
            Err(TokenError::Duplicate(be))
        );
        assert_eq!(
            t.add(TaskId(5), Reserve::BestEffort),
            Err(TokenError::BestEffortTaken { existing: be })
        );
        assert_eq!(
            t.add(
                TaskId(5),
                Reserve::Tokens {
                    qos: 1,
                    per_period: 0
                }
            ),
            Err(TokenError::ZeroTokens(TaskId(5)))
        );
        assert_eq!(t.pick(1_000, all).task, Some(a));
        assert_eq!(t.pick(1_000, |x| x != a).task, Some(b));
        assert_eq!(t.budget(a), Ok(Budget::Items(1)));
        assert_eq!(t.consume(a), Ok(Budget::Items(0)));
        assert_eq!(t.consume(a), Err(TokenError::NoTokens(a)));
        assert_eq!(t.pick(1_050, all).task, Some(b));
        t.consume(b).unwrap();
        t.consume(b).unwrap();
        assert_eq!(t.pick(1_050, all).task, Some(c));
        t.consume(c).unwrap();
        // Everyone out of tokens: the best effort, with or without data.
        assert_eq!(
            t.pick(1_099, |_| false),
            TokenDispatch {
                task: Some(be),
                best_effort: true,
                until: 1_100
            }
        );
        assert_eq!(t.budget(be), Ok(Budget::Unlimited));
        assert_eq!(t.consume(be), Ok(Budget::Unlimited));
        // The refresh; several missed periods count once, and the next
        // refresh stays on the grid.
        assert_eq!(
            t.pick(1_350, all),
            TokenDispatch {
                task: Some(a),
                best_effort: false,
                until: 1_400
            }
        );
        assert_eq!(t.budget(b), Ok(Budget::Items(2)));
        t.remove(a).unwrap();
        t.remove(be).unwrap();
        assert_eq!(t.remove(a), Err(TokenError::Unknown(a)));
        assert_eq!(t.budget(a), Err(TokenError::Unknown(a)));
        assert_eq!(t.consume(a), Err(TokenError::Unknown(a)));
        assert_eq!(t.pick(1_350, all).task, Some(b));
        assert_eq!(Tokens::new(0, 0).unwrap_err(), TokenError::ZeroPeriod);
    }

    #[test]
    fn rates_to_tokens() {
        let t = Tokens::new(100 * MS, 0).unwrap();
        assert_eq!(t.tokens_for_rate(35_000), 3_500);
        assert_eq!(t.tokens_for_rate(1), 1);
        assert_eq!(t.tokens_for_rate(0), 0);
        assert_eq!(t.tokens_for_rate(u64::MAX), u32::MAX);
    }
}
