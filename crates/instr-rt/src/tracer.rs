//! The built-in tracer: per function id, calls, inclusive and exclusive
//! time in TSC ticks (converted to ns at output with a frequency measured
//! over the run), and an optional Chrome trace (`ph: "X"` events, viewable
//! in chrome://tracing and ui.perfetto.dev).
//!
//! Environment, read once at the first entry:
//! * `MANTLE_INSTR_OUT=path`: per-function summary, JSON (schema
//!   `mantle-instr-profile/1`), written at exit;
//! * `MANTLE_INSTR_TRACE=path`: Chrome trace JSON, written at exit;
//! * `MANTLE_INSTR_TRACE_MAX=n`: events kept per thread (default
//!   1000000); a thread that reaches it gets a marker event (an instant
//!   event named [`MARKER_NAME`], with the number of events it dropped)
//!   and the program a warning on stderr at exit;
//! * `MANTLE_INSTR_MAP=path`: the sidecar `mantle instr` wrote, mapping ids
//!   to names (TSV: `id<TAB>name<TAB>object`, `#` comments).
//!
//! With neither output asked for, the tracer does not run at all: an
//! instrumented function with no hook set costs what one with empty hooks
//! costs, or less (`crate::TRACER`).
//!
//! In a set-id program (AT_SECURE) the environment is ignored: no output.
//!
//! Recursion: inclusive time counts only the outermost activation of a
//! function on a thread, so it never exceeds the run time. Threads merge
//! their data into [`GLOBAL`] when they exit; threads still running at
//! process exit are not counted (their data is theirs until then).

use crate::Frame;
use std::fmt::Write as _;
use std::sync::{Mutex, Once, OnceLock};
use std::time::Instant;

#[derive(Clone, Copy, Default)]
struct Stat {
    calls: u64,
    incl: u64,
    excl: u64,
    /// Open activations on this thread (recursion depth).
    active: u32,
}

/// The name of the event that ends a thread's trace when it reached
/// `MANTLE_INSTR_TRACE_MAX` events.
pub const MARKER_NAME: &str =
    "mantle-instr: trace limit reached (MANTLE_INSTR_TRACE_MAX), later events dropped";

/// The id of that marker (ids are below 2^24).
const MARKER_ID: u32 = u32::MAX;

/// The default of `MANTLE_INSTR_TRACE_MAX`.
pub const TRACE_MAX_DEFAULT: usize = 1_000_000;

#[derive(Clone, Copy)]
struct Event {
    id: u32,
    t0: u64,
    dur: u64,
}

struct Config {
    out: Option<String>,
    trace: Option<String>,
    trace_max: usize,
    map: Option<String>,
    tsc0: u64,
    t0: Instant,
}

static CONFIG: OnceLock<Config> = OnceLock::new();
static INIT: Once = Once::new();

/// Everything the exited threads left.
pub static GLOBAL: Mutex<Global> = Mutex::new(Global {
    stats: Vec::new(),
    events: Vec::new(),
});

/// Merged data of exited threads.
pub struct Global {
    stats: Vec<Stat>,
    events: Vec<(u32, Event)>,
}

extern "C" fn at_exit() {
    write_outputs();
}

pub(crate) fn init() {
    INIT.call_once(|| {
        // A set-id program must not write files an unprivileged caller
        // names through the environment (the glibc rule for secure mode).
        // SAFETY: getauxval has no preconditions.
        let secure = unsafe { libc::getauxval(libc::AT_SECURE) } != 0;
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty() && !secure);
        let c = Config {
            out: env("MANTLE_INSTR_OUT"),
            trace: env("MANTLE_INSTR_TRACE"),
            trace_max: env("MANTLE_INSTR_TRACE_MAX")
                .and_then(|v| v.parse().ok())
                .unwrap_or(TRACE_MAX_DEFAULT),
            map: env("MANTLE_INSTR_MAP"),
            tsc0: crate::now(),
            t0: Instant::now(),
        };
        let want = c.out.is_some() || c.trace.is_some();
        let _ = CONFIG.set(c);
        crate::TRACER.store(
            if want {
                crate::TRACER_ON
            } else {
                crate::TRACER_OFF
            },
            std::sync::atomic::Ordering::Relaxed,
        );
        crate::update_hook_fns();
        if want {
            // SAFETY: registering a plain extern "C" function.
            unsafe { libc::atexit(at_exit) };
        }
    });
}

fn config() -> Option<&'static Config> {
    CONFIG.get()
}

pub(crate) struct ThreadTrace {
    stats: Vec<Stat>,
    events: Vec<Event>,
    tid: u32,
}

impl ThreadTrace {
    pub(crate) const fn new() -> Self {
        ThreadTrace {
            stats: Vec::new(),
            events: Vec::new(),
            tid: 0,
        }
    }

    fn stat(&mut self, id: u32) -> &mut Stat {
        let i = id as usize;
        if i >= self.stats.len() {
            self.stats.resize(i + 1, Stat::default());
        }
        &mut self.stats[i]
    }

    pub(crate) fn enter(&mut self, id: u32, _t: u64) {
        let s = self.stat(id);
        s.calls += 1;
        s.active += 1;
    }

    pub(crate) fn leave(&mut self, f: &Frame, t: u64, parent: Option<&mut Frame>) {
        // Entered while a user hook ran (no time taken): untimed.
        let dur = if f.t0 == 0 { 0 } else { t.wrapping_sub(f.t0) };
        let s = self.stat(f.id);
        s.excl += dur.saturating_sub(f.child);
        s.active = s.active.saturating_sub(1);
        if s.active == 0 {
            s.incl += dur;
        }
        if let Some(p) = parent {
            p.child += dur;
        }
        if let Some(c) = config() {
            if c.trace.is_some() {
                self.record(
                    c.trace_max,
                    Event {
                        id: f.id,
                        t0: f.t0,
                        dur,
                    },
                    t,
                );
            }
        }
    }

    /// Keeps `e` if the thread has fewer than `max` events; the first one
    /// past the limit becomes the marker (at time `t`), which then counts
    /// the events dropped (in its `dur`).
    fn record(&mut self, max: usize, e: Event, t: u64) {
        let n = self.events.len();
        if n < max {
            self.events.push(e);
        } else if n == max {
            self.events.push(Event {
                id: MARKER_ID,
                t0: t,
                dur: 1,
            });
        } else if let Some(m) = self.events.last_mut() {
            m.dur += 1;
        }
    }

    /// Moves this thread's data into `g`.
    fn drain_into(&mut self, g: &mut Global) {
        if self.tid == 0 {
            // SAFETY: gettid has no preconditions.
            self.tid = unsafe { libc::gettid() } as u32;
        }
        if g.stats.len() < self.stats.len() {
            g.stats.resize(self.stats.len(), Stat::default());
        }
        for (a, b) in g.stats.iter_mut().zip(self.stats.drain(..)) {
            a.calls += b.calls;
            a.incl += b.incl;
            a.excl += b.excl;
        }
        let tid = self.tid;
        g.events.extend(self.events.drain(..).map(|e| (tid, e)));
    }
}

impl Drop for ThreadTrace {
    fn drop(&mut self) {
        if let Ok(mut g) = GLOBAL.lock() {
            self.drain_into(&mut g);
        }
    }
}

fn names(path: Option<&str>) -> Vec<Option<String>> {
    let mut v: Vec<Option<String>> = Vec::new();
    let Some(text) = path.and_then(|p| std::fs::read_to_string(p).ok()) else {
        return v;
    };
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut f = line.split('\t');
        let (Some(id), Some(name)) = (f.next().and_then(|i| i.parse::<usize>().ok()), f.next())
        else {
            continue;
        };
        if id < 1 << 24 {
            if v.len() <= id {
                v.resize(id + 1, None);
            }
            v[id] = Some(name.to_string());
        }
    }
    v
}

fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// TSC ticks per second, measured from the first entry to now.
fn tsc_hz(c: &Config) -> f64 {
    // Measure over at least 10 ms for a stable ratio.
    while c.t0.elapsed().as_millis() < 10 {
        std::hint::spin_loop();
    }
    let secs = c.t0.elapsed().as_secs_f64();
    (crate::now().wrapping_sub(c.tsc0)) as f64 / secs
}

/// Merges the calling thread's data and writes the files asked for.
pub fn write_outputs() {
    let Some(c) = config() else { return };
    if c.out.is_none() && c.trace.is_none() {
        return;
    }
    let Ok(mut g) = GLOBAL.lock() else { return };
    let _ = crate::THREAD.try_with(|cell| {
        // SAFETY: the thread's own data, outside any hook.
        unsafe { &mut *cell.get() }.trace.drain_into(&mut g);
    });
    let hz = tsc_hz(c);
    let ns = |t: u64| t as f64 * 1e9 / hz;
    let names = names(c.map.as_deref());
    let name = |id: usize| -> String {
        names
            .get(id)
            .cloned()
            .flatten()
            .unwrap_or_else(|| format!("fn#{id}"))
    };
    if let Some(path) = &c.out {
        let mut o = String::new();
        let _ = write!(
            o,
            "{{\"schema\":\"mantle-instr-profile/1\",\"tsc_hz\":{hz:.0},\"functions\":["
        );
        let mut first = true;
        for (id, s) in g.stats.iter().enumerate().filter(|(_, s)| s.calls > 0) {
            if !first {
                o.push(',');
            }
            first = false;
            let _ = write!(
                o,
                "\n{{\"id\":{id},\"name\":{},\"calls\":{},\"incl_ns\":{:.0},\"excl_ns\":{:.0}}}",
                json_str(&name(id)),
                s.calls,
                ns(s.incl),
                ns(s.excl)
            );
        }
        o.push_str("\n]}\n");
        let _ = std::fs::write(path, o);
    }
    if let Some(path) = &c.trace {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let mut o = String::from("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[");
        for (i, (tid, e)) in g.events.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            if e.id == MARKER_ID {
                let _ = write!(
                    o,
                    "\n{{\"name\":{},\"ph\":\"i\",\"s\":\"t\",\"pid\":{pid},\"tid\":{tid},\"ts\":{:.3},\"args\":{{\"limit\":{},\"dropped\":{}}}}}",
                    json_str(MARKER_NAME),
                    ns(e.t0.wrapping_sub(c.tsc0)) / 1e3,
                    c.trace_max,
                    e.dur
                );
                // The program's own output is left alone, but a trace
                // that is not whole must say so where it is seen.
                eprintln!(
                    "libmantle-instr: warning: the trace of thread {tid} reached MANTLE_INSTR_TRACE_MAX={} events; {} later events were dropped (marked in {path})",
                    c.trace_max, e.dur
                );
                continue;
            }
            let _ = write!(
                o,
                "\n{{\"name\":{},\"ph\":\"X\",\"pid\":{pid},\"tid\":{tid},\"ts\":{:.3},\"dur\":{:.3}}}",
                json_str(&name(e.id as usize)),
                ns(e.t0.wrapping_sub(c.tsc0)) / 1e3,
                ns(e.dur) / 1e3
            );
        }
        o.push_str("\n]}\n");
        let _ = std::fs::write(path, o);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_str("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
        assert_eq!(json_str("fn_ok"), "\"fn_ok\"");
    }

    #[test]
    fn map_file_names_ids() {
        let dir = std::env::temp_dir().join(format!("mantle-instr-rt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("map.tsv");
        std::fs::write(
            &p,
            "# header\n0\tmain\ta.o\n3\tfib\ta.o\nbad line\n99999999999\tx\ty\n",
        )
        .unwrap();
        let n = names(p.to_str());
        assert_eq!(n.len(), 4);
        assert_eq!(n[0].as_deref(), Some("main"));
        assert_eq!(n[3].as_deref(), Some("fib"));
        assert_eq!(n[1], None);
        assert!(names(Some("/nonexistent/map")).is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
