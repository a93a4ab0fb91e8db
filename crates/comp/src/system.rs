//! The system file (pure core: no system calls): the components, their
//! interfaces, who may invoke whom, and memory limits per type.
//!
//! ```toml
//! [limits]                 # the global pool, per TMEM type
//! stacks = 64
//! cbuf_pages = 16384      # 4 KiB pages of CBUF memory in all (or "64MiB")
//! hold_bound_ms = 1000     # P2: report holders past this
//! hold_action = "report"   # or "kill" (SIGKILL the holder) or "restart"
//!
//! [policy]                 # the TMEM policy loop (Table II)
//! name = "fixed"           # or none, min, max, fair, greedy,
//!                          # greedy-nopi, tmem, tmem-nopi
//! period_ms = 250          # the paper's quarter second
//!
//! [[component]]
//! name = "net"
//! exec = ["/usr/lib/mantle/net", "--port", "80"]
//! interface = ["send", "recv"]
//! invokes = ["ip"]
//! stacks = 4               # contexts in the cache at start (a^j)
//! max_stacks = 8           # contexts the component may ever have
//! cbuf_kib = 8192          # CBUF memory it may hold (or "8MiB")
//! desired_stacks = 4       # δ^j of the fixed policy (default: stacks)
//! desired_cbuf_kib = 4096  # δ^j of the fixed policy (default: cbuf_kib)
//! ```
//! The invocation graph must be acyclic (TMEM paper §IV-E, deadlock
//! prevention): a cycle is refused, naming it.

use serde::Deserialize;
use std::collections::BTreeMap;

use crate::Error;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SystemFile {
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub policy: PolicySpec,
    #[serde(rename = "component", default)]
    pub components: Vec<ComponentSpec>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    #[serde(default)]
    pub name: PolicyName,
    /// Milliseconds: a whole number of them, or a duration string in the
    /// one grammar (`"250ms"`, `"1s"`) that is a whole number of them.
    #[serde(default = "d_period", deserialize_with = "millis")]
    pub period_ms: u64,
}

fn d_period() -> u64 {
    250
}

impl Default for PolicySpec {
    fn default() -> Self {
        PolicySpec {
            name: PolicyName::Fixed,
            period_ms: d_period(),
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyName {
    #[default]
    Fixed,
    None,
    Min,
    Max,
    Fair,
    Greedy,
    #[serde(rename = "greedy-nopi")]
    GreedyNopi,
    Tmem,
    #[serde(rename = "tmem-nopi")]
    TmemNopi,
}

impl PolicyName {
    pub const ALL: [PolicyName; 9] = [
        PolicyName::None,
        PolicyName::Fixed,
        PolicyName::Min,
        PolicyName::Max,
        PolicyName::Fair,
        PolicyName::Greedy,
        PolicyName::GreedyNopi,
        PolicyName::Tmem,
        PolicyName::TmemNopi,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PolicyName::None => "none",
            PolicyName::Fixed => "fixed",
            PolicyName::Min => "min",
            PolicyName::Max => "max",
            PolicyName::Fair => "fair",
            PolicyName::Greedy => "greedy",
            PolicyName::GreedyNopi => "greedy-nopi",
            PolicyName::Tmem => "tmem",
            PolicyName::TmemNopi => "tmem-nopi",
        }
    }

    pub fn parse(name: &str) -> Option<PolicyName> {
        PolicyName::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    #[serde(default = "d_stacks")]
    pub stacks: u32,
    /// The CBUF pool in 4 KiB pages (a size string: a whole number of them).
    #[serde(default = "d_pages", deserialize_with = "pages")]
    pub cbuf_pages: u32,
    /// Milliseconds, written as `period_ms` is.
    #[serde(default = "d_bound", deserialize_with = "millis")]
    pub hold_bound_ms: u64,
    #[serde(default)]
    pub hold_action: HoldAction,
}

fn d_stacks() -> u32 {
    256
}
fn d_pages() -> u32 {
    16384
}
fn d_bound() -> u64 {
    1000
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            stacks: d_stacks(),
            cbuf_pages: d_pages(),
            hold_bound_ms: d_bound(),
            hold_action: HoldAction::Report,
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HoldAction {
    #[default]
    Report,
    Kill,
    /// Kill the holder, reclaim its transient memory, start it again.
    Restart,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ComponentSpec {
    pub name: String,
    pub exec: Vec<String>,
    #[serde(default)]
    pub interface: Vec<String>,
    #[serde(default)]
    pub invokes: Vec<String>,
    #[serde(default = "d_cstacks")]
    pub stacks: u32,
    #[serde(default)]
    pub max_stacks: Option<u32>,
    /// CBUF memory the component may hold (KiB; a size string: a whole
    /// number of KiB).
    #[serde(default = "d_cbuf_kib", deserialize_with = "kib")]
    pub cbuf_kib: u32,
    /// δ^j for stacks under the fixed policy (default: `stacks`).
    #[serde(default)]
    pub desired_stacks: Option<u32>,
    /// δ^j for CBUFs under the fixed policy, KiB (default: `cbuf_kib`).
    #[serde(default, deserialize_with = "opt_kib")]
    pub desired_cbuf_kib: Option<u32>,
}

/// A size key as written: an integer counts in the key's unit (pages,
/// KiB), a string is mantle's one grammar of sizes (`"64MiB"`, `"8192"`
/// bytes; [`mantle_units::parse_size`]).
#[derive(Deserialize)]
#[serde(untagged)]
enum SizeKey {
    Count(u64),
    Text(String),
}

fn size_in<'de, D: serde::Deserializer<'de>>(
    d: D,
    unit_bytes: u64,
    unit: &'static str,
) -> Result<u32, D::Error> {
    use serde::de::Error as _;
    let n = match SizeKey::deserialize(d).map_err(|_| {
        D::Error::custom(format!(
            "not a size: write a whole number of {unit} or a size string such as \"64MiB\""
        ))
    })? {
        SizeKey::Count(n) => n,
        SizeKey::Text(s) => {
            mantle_units::parse_size_in(&s, unit_bytes, unit).map_err(D::Error::custom)?
        }
    };
    u32::try_from(n).map_err(|_| D::Error::custom(format!("{n} {unit} is too large")))
}

/// A `_ms` key: an integer counts in the key's unit, as it always did; a
/// string is a duration in the grammar of every flag (mantle_units), and
/// must come to whole milliseconds.
fn millis<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    use serde::de::Error as _;
    match SizeKey::deserialize(d).map_err(|_| {
        D::Error::custom("not a duration: write a whole number of ms or a string such as \"250ms\"")
    })? {
        SizeKey::Count(n) => Ok(n),
        SizeKey::Text(s) => {
            let d = mantle_units::parse_duration(&s).map_err(D::Error::custom)?;
            if d.as_nanos() % 1_000_000 != 0 {
                return Err(D::Error::custom(format!(
                    "{s:?} is not a whole number of milliseconds"
                )));
            }
            u64::try_from(d.as_millis()).map_err(|_| D::Error::custom(format!("{s:?} is too long")))
        }
    }
}

fn pages<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    size_in(d, 4096, "4 KiB pages")
}

fn kib<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    size_in(d, 1024, "KiB")
}

fn opt_kib<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    kib(d).map(Some)
}

fn d_cbuf_kib() -> u32 {
    8192
}

fn d_cstacks() -> u32 {
    2
}

impl ComponentSpec {
    pub fn max_stacks(&self) -> u32 {
        self.max_stacks.unwrap_or(self.stacks)
    }
    pub fn desired_stacks(&self) -> u32 {
        self.desired_stacks.unwrap_or(self.stacks)
    }
    /// CBUF pages (4 KiB) the component may hold at most.
    pub fn max_cbuf_pages(&self) -> u32 {
        self.cbuf_kib.div_ceil(4)
    }
    pub fn desired_cbuf_pages(&self) -> u32 {
        self.desired_cbuf_kib.unwrap_or(self.cbuf_kib).div_ceil(4)
    }
}

impl SystemFile {
    /// Parses and validates a system file: names unique and well formed,
    /// every invoked component declared, limits in range, and the
    /// invocation graph acyclic.
    pub fn parse(text: &str) -> Result<SystemFile, Error> {
        let s: SystemFile =
            toml::from_str(text).map_err(|e| Error::Spec(format!("system file: {e}")))?;
        s.validate()?;
        Ok(s)
    }

    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Spec(m));
        if self.components.is_empty() {
            return bad("no [[component]] in the system file".into());
        }
        let mut seen = BTreeMap::new();
        for (i, c) in self.components.iter().enumerate() {
            if c.name.is_empty()
                || c.name.len() > 32
                || !c
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return bad(format!(
                    "component name {:?}: 1-32 of [A-Za-z0-9_-]",
                    c.name
                ));
            }
            if seen.insert(c.name.as_str(), i).is_some() {
                return bad(format!("component {:?} declared twice", c.name));
            }
            if c.exec.is_empty() {
                return bad(format!("component {:?}: exec is empty", c.name));
            }
            let max = c.max_stacks();
            if c.stacks == 0 || max < c.stacks || max > mantle_abi::comp::MAX_CTX {
                return bad(format!(
                    "component {:?}: need 1 <= stacks ({}) <= max_stacks ({max}) <= {}",
                    c.name,
                    c.stacks,
                    mantle_abi::comp::MAX_CTX
                ));
            }
            if !(1..=max).contains(&c.desired_stacks()) {
                return bad(format!(
                    "component {:?}: need 1 <= desired_stacks ({}) <= max_stacks ({max})",
                    c.name,
                    c.desired_stacks()
                ));
            }
            if c.desired_cbuf_kib.unwrap_or(0) > c.cbuf_kib {
                return bad(format!(
                    "component {:?}: desired_cbuf_kib above cbuf_kib ({})",
                    c.name, c.cbuf_kib
                ));
            }
            if c.interface.len() > u32::MAX as usize {
                return bad(format!("component {:?}: interface too large", c.name));
            }
        }
        for c in &self.components {
            for t in &c.invokes {
                if !seen.contains_key(t.as_str()) {
                    return bad(format!("component {:?} invokes undeclared {t:?}", c.name));
                }
            }
        }
        let total: u64 = self.components.iter().map(|c| c.stacks as u64).sum();
        if total > self.limits.stacks as u64 {
            return bad(format!(
                "initial stacks ({total}) exceed limits.stacks ({})",
                self.limits.stacks
            ));
        }
        if !(1..=60_000).contains(&self.policy.period_ms) {
            return bad(format!(
                "policy.period_ms {}: must be 1 ms to 60000 ms (1 min)",
                self.policy.period_ms
            ));
        }
        if let Some(cycle) = self.cycle() {
            return Err(Error::Cycle(cycle));
        }
        Ok(())
    }

    pub fn index(&self, name: &str) -> Option<usize> {
        self.components.iter().position(|c| c.name == name)
    }

    /// A cycle of the invocation graph, as the names along it with the
    /// first repeated at the end (a → b → a), or None.
    pub fn cycle(&self) -> Option<Vec<String>> {
        // colours: 0 unvisited, 1 on the current path, 2 done
        let n = self.components.len();
        let mut colour = vec![0u8; n];
        let mut path = Vec::new();
        for s in 0..n {
            if colour[s] == 0 {
                if let Some(c) = self.dfs(s, &mut colour, &mut path) {
                    return Some(c);
                }
            }
        }
        None
    }

    fn dfs(&self, v: usize, colour: &mut [u8], path: &mut Vec<usize>) -> Option<Vec<String>> {
        colour[v] = 1;
        path.push(v);
        for t in &self.components[v].invokes {
            let w = self.index(t)?;
            if colour[w] == 1 {
                let from = path.iter().position(|&p| p == w).unwrap_or(0);
                let mut names: Vec<String> = path[from..]
                    .iter()
                    .map(|&p| self.components[p].name.clone())
                    .collect();
                names.push(self.components[w].name.clone());
                return Some(names);
            }
            if colour[w] == 0 {
                if let Some(c) = self.dfs(w, colour, path) {
                    return Some(c);
                }
            }
        }
        path.pop();
        colour[v] = 2;
        None
    }

    /// Components in start order: every component after the ones it
    /// invokes (servers first).
    pub fn start_order(&self) -> Vec<usize> {
        let n = self.components.len();
        let mut done = vec![false; n];
        let mut out = Vec::with_capacity(n);
        fn visit(s: &SystemFile, v: usize, done: &mut [bool], out: &mut Vec<usize>) {
            if done[v] {
                return;
            }
            done[v] = true;
            for t in &s.components[v].invokes {
                if let Some(w) = s.index(t) {
                    visit(s, w, done, out);
                }
            }
            out.push(v);
        }
        for v in 0..n {
            visit(self, v, &mut done, &mut out);
        }
        out
    }

    /// The components `i` invokes directly or through others (who may be
    /// passed i's CBUFs).
    pub fn downstream(&self, i: usize) -> Vec<usize> {
        let mut seen = vec![false; self.components.len()];
        let mut stack = vec![i];
        while let Some(v) = stack.pop() {
            for t in &self.components[v].invokes {
                if let Some(w) = self.index(t) {
                    if !seen[w] {
                        seen[w] = true;
                        stack.push(w);
                    }
                }
            }
        }
        (0..seen.len()).filter(|&w| seen[w] && w != i).collect()
    }

    /// Whether `from` may invoke `to` (an edge of the graph).
    pub fn may_invoke(&self, from: &str, to: &str) -> bool {
        self.components
            .iter()
            .any(|c| c.name == from && c.invokes.iter().any(|t| t == to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(edges: &str) -> String {
        format!(
            "[[component]]\nname='a'\nexec=['x']\ninvokes=[{edges}]\n\
             [[component]]\nname='b'\nexec=['x']\ninvokes=['c']\n\
             [[component]]\nname='c'\nexec=['x']\ninvokes=[]\n"
        )
    }

    #[test]
    fn sizes_are_counts_in_the_keys_unit_or_size_strings() {
        let one = |limits: &str, comp: &str| {
            SystemFile::parse(&format!(
                "[limits]\n{limits}\n[[component]]\nname='a'\nexec=['x']\n{comp}\n"
            ))
        };
        let s = one("cbuf_pages = 16384", "cbuf_kib = 8192").unwrap();
        assert_eq!(
            (s.limits.cbuf_pages, s.components[0].cbuf_kib),
            (16384, 8192)
        );
        let s = one(
            "cbuf_pages = '64MiB'",
            "cbuf_kib = '8MiB'\ndesired_cbuf_kib = '4096KiB'",
        )
        .unwrap();
        assert_eq!(s.limits.cbuf_pages, 16384);
        assert_eq!(s.components[0].cbuf_kib, 8192);
        assert_eq!(s.components[0].desired_cbuf_kib, Some(4096));
        assert_eq!(s.components[0].desired_cbuf_pages(), 1024);
        for (limits, comp, why) in [
            ("cbuf_pages = '1000'", "", "whole number of 4 KiB pages"),
            ("", "cbuf_kib = '64KB'", "write 64KiB"),
            ("", "cbuf_kib = 'lots'", "is not a size"),
            ("", "cbuf_kib = 1.5", "not a size"),
            ("", "cbuf_kib = '8TiB'", "is not a size"),
            ("", "cbuf_kib = 5000000000", "too large"),
        ] {
            let e = one(limits, comp).unwrap_err().to_string();
            assert!(e.contains(why), "{limits} {comp}: {e}");
        }
    }

    #[test]
    fn a_chain_parses_and_starts_servers_first() {
        let s = SystemFile::parse(&file("'b'")).unwrap();
        let order: Vec<&str> = s
            .start_order()
            .iter()
            .map(|&i| s.components[i].name.as_str())
            .collect();
        assert_eq!(order, ["c", "b", "a"]);
        assert!(s.may_invoke("a", "b") && !s.may_invoke("a", "c"));
        assert_eq!(s.downstream(0), [1, 2]);
        assert_eq!(s.downstream(2), Vec::<usize>::new());
    }

    #[test]
    fn a_cycle_is_refused_and_named() {
        let text = file("'b'").replace("invokes=[]", "invokes=['a']");
        match SystemFile::parse(&text) {
            Err(Error::Cycle(c)) => assert_eq!(c, ["a", "b", "c", "a"]),
            other => panic!("{other:?}"),
        }
        let self_loop = file("'a'");
        match SystemFile::parse(&self_loop) {
            Err(Error::Cycle(c)) => assert_eq!(c, ["a", "a"]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn malformed_files_are_refused() {
        for bad in [
            "",
            "[[component]]\nname='a'\nexec=[]\n",
            "[[component]]\nname='a b'\nexec=['x']\n",
            "[[component]]\nname='a'\nexec=['x']\ninvokes=['z']\n",
            "[[component]]\nname='a'\nexec=['x']\n[[component]]\nname='a'\nexec=['x']\n",
            "[[component]]\nname='a'\nexec=['x']\nstacks=0\n",
            "[[component]]\nname='a'\nexec=['x']\nstacks=4\nmax_stacks=2\n",
            "[[component]]\nname='a'\nexec=['x']\nstacks=512\n",
            "[[component]]\nname='a'\nexec=['x']\nbogus=1\n",
            "[limits]\nstacks=1\n[[component]]\nname='a'\nexec=['x']\nstacks=2\n",
            "[[component]]\nname='a'\nexec=['x']\nstacks=2\ndesired_stacks=3\n",
            "[[component]]\nname='a'\nexec=['x']\ndesired_stacks=0\n",
            "[[component]]\nname='a'\nexec=['x']\ncbuf_kib=8\ndesired_cbuf_kib=9\n",
            "[policy]\nperiod_ms=0\n[[component]]\nname='a'\nexec=['x']\n",
            "[policy]\nname='magic'\n[[component]]\nname='a'\nexec=['x']\n",
            "[limits]\nhold_action='ignore'\n[[component]]\nname='a'\nexec=['x']\n",
        ] {
            assert!(SystemFile::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn policy_and_hold_action_parse_with_defaults() {
        let s = SystemFile::parse("[[component]]\nname='a'\nexec=['x']\n").unwrap();
        assert_eq!(s.policy, PolicySpec::default());
        assert_eq!(s.limits.hold_action, HoldAction::Report);
        let c = &s.components[0];
        assert_eq!((c.desired_stacks(), c.desired_cbuf_pages()), (2, 2048));
        for (t, want) in [
            ("report", HoldAction::Report),
            ("kill", HoldAction::Kill),
            ("restart", HoldAction::Restart),
        ] {
            let s = SystemFile::parse(&format!(
                "[limits]\nhold_action='{t}'\n[policy]\nname='none'\nperiod_ms=60000\n\
                 [[component]]\nname='a'\nexec=['x']\nmax_stacks=5\ndesired_stacks=5\n\
                 cbuf_kib=6\ndesired_cbuf_kib=5\n"
            ))
            .unwrap();
            assert_eq!(s.limits.hold_action, want);
            assert_eq!(s.policy.name, PolicyName::None);
            let c = &s.components[0];
            assert_eq!(
                (
                    c.desired_stacks(),
                    c.max_cbuf_pages(),
                    c.desired_cbuf_pages()
                ),
                (5, 2, 2)
            );
        }
    }

    #[test]
    fn every_policy_name_parses_and_round_trips() {
        for p in PolicyName::ALL {
            assert_eq!(PolicyName::parse(p.as_str()), Some(p));
            let s = SystemFile::parse(&format!(
                "[policy]\nname='{}'\n[[component]]\nname='a'\nexec=['x']\n",
                p.as_str()
            ))
            .unwrap();
            assert_eq!(s.policy.name, p);
        }
        assert_eq!(PolicyName::parse("Tmem"), None);
    }

    #[test]
    fn every_stack_count_in_range_is_accepted() {
        for n in 1..=mantle_abi::comp::MAX_CTX {
            let t =
                format!("[limits]\nstacks=1000\n[[component]]\nname='a'\nexec=['x']\nstacks={n}\n");
            assert_eq!(SystemFile::parse(&t).unwrap().components[0].stacks, n);
        }
    }

    #[test]
    fn ms_keys_take_the_duration_grammar_too() {
        let f = |t: &str| SystemFile::parse(&format!("{t}\n[[component]]\nname='a'\nexec=['x']\n"));
        let s = f("[limits]\nhold_bound_ms='2s'\n[policy]\nperiod_ms='250ms'").unwrap();
        assert_eq!((s.limits.hold_bound_ms, s.policy.period_ms), (2000, 250));
        let s = f("[limits]\nhold_bound_ms=40\n[policy]\nperiod_ms=1000").unwrap();
        assert_eq!((s.limits.hold_bound_ms, s.policy.period_ms), (40, 1000));
        for bad in [
            "period_ms='250'",
            "period_ms='1.5ms'",
            "period_ms='fast'",
            "period_ms=true",
        ] {
            let e = f(&format!("[policy]\n{bad}")).unwrap_err().to_string();
            assert!(
                e.contains("period_ms") || e.contains("duration") || e.contains("millisecond"),
                "{bad}: {e}"
            );
        }
        // a range check still applies after the conversion
        assert!(f("[policy]\nperiod_ms='2m'").is_err());
    }
}
