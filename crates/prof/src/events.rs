//! Event names and their perf_event_open (type, config). Pure: the type
//! numbers are mantle_sys::perf's, the names and configs are here.

use serde::Serialize;

pub use mantle_sys::perf::{PERF_TYPE_HARDWARE, PERF_TYPE_HW_CACHE, PERF_TYPE_SOFTWARE};

/// One event mantle can sample by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EventDef {
    pub name: &'static str,
    #[serde(rename = "type")]
    pub type_: u32,
    pub config: u64,
    /// Needs a hardware PMU.
    pub hardware: bool,
    pub description: &'static str,
}

// HW_CACHE config: id | (op << 8) | (result << 16)
const DTLB: u64 = 3;
const ITLB: u64 = 4;
const OP_READ: u64 = 0;
const RESULT_MISS: u64 = 1;

pub const EVENTS: &[EventDef] = &[
    EventDef {
        name: "cpu-clock",
        type_: PERF_TYPE_SOFTWARE,
        config: 0,
        hardware: false,
        description: "CPU time, per CPU (hrtimer; works without a PMU)",
    },
    EventDef {
        name: "task-clock",
        type_: PERF_TYPE_SOFTWARE,
        config: 1,
        hardware: false,
        description: "time the sampled tasks run (hrtimer; works without a PMU)",
    },
    EventDef {
        name: "cycles",
        type_: PERF_TYPE_HARDWARE,
        config: 0,
        hardware: true,
        description: "CPU cycles",
    },
    EventDef {
        name: "instructions",
        type_: PERF_TYPE_HARDWARE,
        config: 1,
        hardware: true,
        description: "retired instructions",
    },
    EventDef {
        name: "cache-misses",
        type_: PERF_TYPE_HARDWARE,
        config: 3,
        hardware: true,
        description: "last-level cache misses",
    },
    EventDef {
        name: "branch-misses",
        type_: PERF_TYPE_HARDWARE,
        config: 5,
        hardware: true,
        description: "mispredicted branches",
    },
    EventDef {
        name: "dTLB-load-misses",
        type_: PERF_TYPE_HW_CACHE,
        config: DTLB | (OP_READ << 8) | (RESULT_MISS << 16),
        hardware: true,
        description: "data TLB load misses",
    },
    EventDef {
        name: "iTLB-load-misses",
        type_: PERF_TYPE_HW_CACHE,
        config: ITLB | (OP_READ << 8) | (RESULT_MISS << 16),
        hardware: true,
        description: "instruction TLB load misses",
    },
];

/// The event called `name` (a few perf aliases accepted).
pub fn by_name(name: &str) -> Option<&'static EventDef> {
    let n = match name {
        "cpu-cycles" => "cycles",
        "LLC-misses" => "cache-misses",
        other => other,
    };
    EVENTS.iter().find(|e| e.name == n)
}

/// The names, for error messages.
pub fn names() -> String {
    EVENTS.iter().map(|e| e.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn lookup() {
        assert_eq!(by_name("cpu-clock").unwrap().type_, PERF_TYPE_SOFTWARE);
        assert_eq!(by_name("cpu-cycles").unwrap().name, "cycles");
        assert_eq!(by_name("dTLB-load-misses").unwrap().config, 0x10003);
        assert_eq!(by_name("iTLB-load-misses").unwrap().config, 0x10004);
        assert!(by_name("nope").is_none());
        assert!(EVENTS.iter().filter(|e| e.hardware).count() == 6);
    }
}
