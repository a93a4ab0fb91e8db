//! mantle-tags: mTags (seeds/000) on an unmodified Linux.
//!
//! A tag is a named label carried by threads. When a thread sends a
//! *request* over IPC (unix sockets, pipes and FIFOs, TCP and UDP, POSIX
//! message queues, eventfd, signals), the reader acquires the sender's tags
//! as they were when it sent, keeps its own, and passes them on with its
//! own later requests; fork/clone inherit them; a shared-memory object
//! carries its creator's tags to every thread that maps it. Global tags
//! cross machines in a TCP option; deadlock tags mark synchronous call
//! chains, and a request that would close a circle is reported or refused
//! ([`deadlock`]). The kernel side (`src/bpf/tags.bpf.c`) does the
//! work with tracepoint, cgroup, uprobe and iterator programs; applications
//! are not changed.
//!
//! Mechanism in brief (details in tags.bpf.c's header comment):
//! * the tag vector of thread `tid` is `view[tid]`, an mmapable array that
//!   any process maps read-only to read its own tags without a system call;
//!   TTLs, terminators and the class live in task storage;
//! * senders deposit a snapshot of their passable tags on the channel,
//!   readers take it; TTL, terminators and classes are applied on delivery;
//! * the table (`tags`, world-readable; `owners`, root-only) and `ctl`
//!   (live/system/lifeline masks, counters) are written by tools under
//!   [`kernel::TableLock`] and read by the kernel side on every hop;
//! * hooks that cost on hot paths are attached only while a tag exists;
//!   `sys_exit` (the only hook fd-based channels have) can be left out for
//!   a whole load (`--no-fd-channels`).
//!
//! Invariants: a bit is set in some thread's vector only while its tag is
//! LIVE or DELETING; a bit is reused only after the sweep cleared it from
//! every thread, and deposits older than its freeing are dropped (epochs).
//! A thread's vector changes only through atomic OR/AND. The fast paths'
//! per-thread state (`rx_fast`: tags held with an unlimited TTL, a lower
//! bound of the Lamport clock) only ever under-claims: every operation on a
//! thread, its fork and its exit reset it, it is valid only under the epoch
//! it was written in, and every path holding the task storage folds its
//! clock in first, so a fast send never carries a smaller clock than a
//! reception before it (issue 15; docs/tags.md, "Cost").
//!
//! Where things are: [`abi`] (the shared layouts, from mantle-abi),
//! [`kernel`] (the kernel side through its pins: maps, admin and iterator
//! programs, tagged hooks, the table lock), `loader` (feature `loader`:
//! the eBPF object and `up`/`down`; the applications' library is built
//! without it), [`model`], [`lifeline`] and [`deadlock`] (pure cores, no
//! system calls). System calls go through mantle-sys only; this crate
//! has no `unsafe` of its own.
//!
//! Lock order: the table lock (flock on /run/mantle/lock/tags.lock) is the only
//! lock. Every change of the table, and every attach or detach of the
//! tagged hooks (which follow "is any tag left?"), holds it, including the
//! sweep that any root command runs first when deletions are pending. The
//! kernel side takes no locks: deposits and vectors change with atomic
//! OR/AND/XCHG and compare-and-swap only (tags.bpf.c; the inline take of a
//! reader that holds every tag of a deposit swaps a word only if it still
//! holds what was checked), and the hint bitmaps (`chan_hint`, `sk_hint`)
//! are only ever set, so there is nothing to order against.
//! The one protocol among them: a slot of `fd_dep` (the direct-mapped
//! deposits of pipes, eventfd and queues) changes channel only while no
//! sender is inside it, and readers drop what they took while its
//! generation moved (fdchan.bpf.h, "The slot protocol"; docs/tags.md).

// The crate makes no system call of its own (mantle_sys does); only the
// generated skeleton (loader.rs) holds unsafe code, libbpf-cargo's.
#![deny(unsafe_code)]

pub mod abi;
pub mod create;
pub mod deadlock;
pub mod guard;
pub mod kernel;
pub mod lifeline;
pub mod lifeline_file;
/// `tags up`/`down` as commands (needs the loader).
#[cfg(feature = "loader")]
pub mod load;
#[cfg(feature = "loader")]
mod loader;
pub mod model;
pub mod text;
pub mod thread;

use abi::{Ctl, Owner, Reception, TagEntry, ThreadRec, View, MT_NAME_LEN, MT_TAGS, MT_TTL_INF};
use kernel::MappedMap;
use zerocopy::FromZeros;

/// Errors of the tags subsystem. The CLI maps them to messages and exit codes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the tags kernel side is not loaded (run `mantle tags up` as root)")]
    NotLoaded,
    #[error("the tags kernel side is already loaded (`mantle tags down` first)")]
    AlreadyLoaded,
    #[error("missing on this machine: {0}")]
    Missing(String),
    #[error("unknown tag {0:?}")]
    UnknownTag(String),
    #[error("a tag named {0:?} already exists")]
    Exists(String),
    #[error(
        "the tag table is full ({n} tags: bits {g}-{last}; bits 0-{gl} are for the cluster table's global tags; build with MANTLE_MT_TAGS=128 for more)",
        n = MT_TAGS - abi::MT_GLOBAL_BITS, g = abi::MT_GLOBAL_BITS, last = MT_TAGS - 1, gl = abi::MT_GLOBAL_BITS - 1
    )]
    TableFull,
    #[error("no room for a lifeline of {0} records (all tags share {n})", n = abi::MT_LIFELINE_SLOTS)]
    LifelineFull(u32),
    #[error("permission denied: {0}")]
    Permission(String),
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("no such thread or process: {0}")]
    NoSuchThread(u32),
    #[error("{0}")]
    Refused(String),
    /// A system call failed; `source` is its error (io, libbpf), errno kept.
    #[error("kernel: {what}: {source}")]
    Kernel {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Another command holds the table lock for too long.
    #[error("busy: {0}")]
    Busy(String),
    /// A value read from the kernel side breaks its documented rules (a
    /// map that something other than mantle wrote, or another build's).
    #[error("corrupt kernel-side state: {0}")]
    Corrupt(String),
}

impl Error {
    /// The errno behind this error, if a system call failed: the first
    /// `io::Error` with an OS code in the source chain.
    pub fn errno(&self) -> Option<i32> {
        let Error::Kernel { source, .. } = self else {
            return None;
        };
        mantle_sys::os::errno_in_chain(source.as_ref()).or_else(|| {
            // libbpf-rs keeps the kind, not always the errno
            let lb = source.downcast_ref::<libbpf_rs::Error>()?;
            (lb.kind() == libbpf_rs::ErrorKind::PermissionDenied).then_some(libc::EPERM)
        })
    }
    /// Whether this is a refusal for want of privilege, whichever way it
    /// was found out (our own check, or EPERM/EACCES from the kernel).
    pub fn is_permission(&self) -> bool {
        matches!(self, Error::Permission(_))
            || matches!(self.errno(), Some(libc::EPERM | libc::EACCES))
    }

    /// A system call's failure (for callers outside this crate that add
    /// what they were doing).
    pub fn sys(
        what: impl Into<String>,
        e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Error {
        kernel::kerr(what, e)
    }
}

impl From<model::NameError> for Error {
    fn from(e: model::NameError) -> Self {
        Error::Invalid(e.to_string())
    }
}

/// A tag as listed by tools.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TagInfo {
    pub name: String,
    pub bit: u32,
    pub state: &'static str,
    pub system: bool,
    /// "global" (cluster table, crosses machines) or "local".
    pub scope: &'static str,
    /// Travels with replies as well as requests.
    pub replies: bool,
    /// Marks synchronous call chains, for deadlock detection.
    pub deadlock: bool,
    /// Hops it travels from a holder by default; `None`: unlimited.
    pub ttl: Option<u8>,
    pub lifeline: u32,
    pub receptions: u64,
    pub created_ns: u64,
    pub generation: u32,
    /// The uid that may delete it besides root. Root only; `None` for
    /// others. (The owners map also keeps the pid of the creating tool,
    /// a short-lived process: not shown.)
    pub owner_uid: Option<u32>,
}

/// Options of `create`.
#[derive(Debug, Clone, Default)]
pub struct CreateOpts {
    /// Hops the tag may travel (None: unlimited).
    pub ttl: Option<u8>,
    pub system: bool,
    /// Lifeline ring size in records (0: no lifeline).
    pub lifeline: u32,
    pub owner_uid: Option<u32>,
    /// Travels with replies as well as requests.
    pub replies: bool,
    /// A deadlock tag: marks a synchronous call chain; a request carrying
    /// it towards a thread that holds it is a circular wait (section 5.3).
    pub deadlock: bool,
    /// Any user may set it on itself; otherwise only root and the owner's
    /// uid (threads that receive it over IPC hold it either way).
    pub anyone: bool,
    /// Held per request: a receiver holds it only until it answers the
    /// request that brought it (issue 8, "Precision").
    pub per_request: bool,
}

/// One thread as listed by tools.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ThreadInfo {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub system: bool,
    pub tags: Vec<HeldTag>,
    pub terminators: Vec<String>,
}

/// A tag as a thread holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HeldTag {
    pub name: String,
    /// Hops it may still travel from this thread; `None`: unlimited.
    pub ttl: Option<u8>,
}

/// One lifeline record.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReceptionInfo {
    pub seq: u64,
    pub ts_ns: u64,
    pub tag: String,
    pub rx_tid: u32,
    pub rx_pid: u32,
    pub rx_comm: String,
    pub tx_tid: u32,
    pub tx_pid: u32,
    pub via: String,
    pub ttl: u8,
    /// Machine where the reception happened, and the sending machine.
    pub host: String,
    pub tx_host: String,
    /// Lamport clock of the receiving thread after the reception.
    pub lamport: u64,
}

/// A reception record for unit tests: thread `rx` (its own process)
/// received from `tx` over `via` on `host`.
#[cfg(test)]
pub(crate) fn test_reception(
    seq: u64,
    ts_ns: u64,
    rx: u32,
    tx: u32,
    via: &str,
    host: &str,
) -> ReceptionInfo {
    ReceptionInfo {
        seq,
        ts_ns,
        tag: "t".into(),
        rx_tid: rx,
        rx_pid: rx,
        rx_comm: format!("p{rx}"),
        tx_tid: tx,
        tx_pid: tx,
        via: via.into(),
        ttl: 255,
        host: host.into(),
        tx_host: host.into(),
        lamport: seq,
    }
}

/// What [`Tags::lifeline_since`] read of a lifeline ring.
#[derive(Debug, Clone, Default)]
pub struct RingRead {
    /// The records after the given sequence number, oldest first.
    pub records: Vec<ReceptionInfo>,
    /// Read on after this sequence number next time: the last record
    /// read or lost (the records after it are not written yet).
    pub next: u64,
    /// Records after the given number that the ring overwrote before
    /// they were read.
    pub lost: u64,
    /// The tag's generation: a new one is a new tag of the same name,
    /// whose ring starts again from 1.
    pub generation: u32,
}

/// Whole-subsystem status.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Status {
    pub loaded: bool,
    pub hooks_attached: bool,
    /// Pipes, FIFOs, eventfd, message queues and shared memory are followed
    /// (false: loaded with --no-fd-channels).
    pub fd_channels: bool,
    pub live_tags: u32,
    pub view_entries: u32,
    pub hops: u64,
    pub rejected: u64,
    pub late: u64,
    pub deposit_fail: u64,
    pub no_view: u64,
    /// 16-bit digest of the cluster table (0: none loaded).
    pub cluster_digest: u32,
    pub tcp_options_written: u64,
    pub tcp_options_parsed: u64,
    pub tcp_options_mismatched: u64,
    pub tcp_options_no_space: u64,
}

/// Handle on the loaded kernel side.
pub struct Tags {
    /// Read-only mappings of the frozen public maps: nobody's user space
    /// writes them; root changes them through [`kernel::admin`].
    ctl: MappedMap,
    tags: MappedMap,
    root: bool,
}

/// Target of an operation from a tool.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    Tid(u32),
    Pid(u32),
}

impl Tags {
    /// Opens the loaded kernel side; root gets write access to the table.
    pub fn open() -> Result<Tags, Error> {
        kernel::check_pin_dirs()?;
        if !kernel::loaded() {
            return Err(Error::NotLoaded);
        }
        let root = mantle_sys::os::privileged();
        let t = Tags {
            ctl: kernel::map_array::<abi::Ctl>("ctl", false)?,
            tags: kernel::map_array::<abi::TagEntry>("tags", false)?,
            root,
        }
        .checked()?;
        // Finish what expired (or an owner deleted) since the last command,
        // under the table lock: two tools finishing at once used to race in
        // detach_if_empty (one unpinned a link the other had just seen), and
        // an unlocked detach could undo a concurrent create's attach.
        if root && t.ctl().deleting.iter().any(|&w| w != 0) {
            let _lock = kernel::TableLock::take()?;
            if t.ctl().deleting.iter().any(|&w| w != 0) {
                t.sweep()?;
                t.detach_if_empty()?;
            }
        }
        Ok(t)
    }

    /// The geometry the rest of this type relies on, checked once.
    fn checked(self) -> Result<Tags, Error> {
        if self.ctl.entries() != 1 || self.tags.entries() != MT_TAGS {
            return Err(Error::Refused(format!(
                "the loaded tags kernel side comes from another build of mantle (ctl: {} entries, \
                 tags: {} entries; this build expects 1 and {MT_TAGS}); reload it: \
                 `mantle tags down && mantle tags up`",
                self.ctl.entries(),
                self.tags.entries()
            )));
        }
        Ok(self)
    }

    fn need_root(&self, what: &str) -> Result<(), Error> {
        if self.root {
            Ok(())
        } else {
            Err(Error::Permission(format!("{what} needs root")))
        }
    }

    fn ctl(&self) -> Ctl {
        // checked at open: ctl has its one entry
        self.ctl.get::<Ctl>(0).unwrap_or_else(Ctl::new_zeroed)
    }

    /// Entry `bit` of the table; a bit beyond it (from a corrupted record)
    /// reads as a free entry, which every caller treats as "no such tag".
    fn entry(&self, bit: u32) -> TagEntry {
        self.tags
            .get::<TagEntry>(bit as usize)
            .unwrap_or_else(TagEntry::new_zeroed)
    }

    /// Bit of a live tag by name.
    pub fn lookup(&self, name: &str) -> Result<u32, Error> {
        (0..MT_TAGS as u32)
            .find(|&b| {
                let e = self.entry(b);
                e.state == abi::ST_LIVE && abi::cstr(&e.name) == name
            })
            .ok_or_else(|| Error::UnknownTag(name.to_string()))
    }

    fn name_of(&self, bit: u32) -> String {
        abi::cstr(&self.entry(bit).name)
    }

    /// Creates a tag; attaches the tagged hooks if it is the first one.
    pub fn create(&self, name: &str, o: &CreateOpts) -> Result<TagInfo, Error> {
        self.need_root("creating a tag")?;
        model::validate_name(name)?;
        let _lock = kernel::TableLock::take()?;
        // Local tags live above the global range, so that a cluster table
        // loaded later (or on another machine) never collides with them.
        let bit = (abi::MT_GLOBAL_BITS as u32..MT_TAGS as u32)
            .find(|&b| self.entry(b).state == abi::ST_FREE)
            .ok_or(Error::TableFull)?;
        self.install(bit, name, o, 0)
    }

    /// Installs the cluster table's global tags on bits 0.. (at load).
    pub fn install_cluster(&self, table: &model::ClusterTable) -> Result<(), Error> {
        self.need_root("loading a cluster table")?;
        let _lock = kernel::TableLock::take()?;
        for (i, g) in table.tags.iter().enumerate() {
            let o = CreateOpts {
                ttl: g.ttl,
                system: g.system,
                lifeline: model::GLOBAL_LIFELINE,
                owner_uid: Some(0),
                replies: false,
                deadlock: g.deadlock,
                anyone: false,
                per_request: false,
            };
            self.install(i as u32, &g.name, &o, abi::F_GLOBAL)?;
        }
        kernel::admin(&abi::Admin {
            code: abi::ADM_DIGEST,
            digest: table.digest as u32,
            ..abi::Admin::new_zeroed()
        })
    }

    /// Writes tag `name` into free entry `bit` (table lock held).
    fn install(
        &self,
        bit: u32,
        name: &str,
        o: &CreateOpts,
        extra_flags: u32,
    ) -> Result<TagInfo, Error> {
        let mut regions = Vec::new();
        let c = self.ctl();
        for b in 0..MT_TAGS as u32 {
            let e = self.entry(b);
            if e.state != abi::ST_FREE {
                if abi::cstr(&e.name) == name {
                    return Err(Error::Exists(name.to_string()));
                }
                regions.push((c.ll_base[b as usize], c.ll_size[b as usize]));
            }
        }
        if self.entry(bit).state != abi::ST_FREE {
            return Err(Error::Exists(abi::cstr(&self.entry(bit).name)));
        }
        let base = if o.lifeline > 0 {
            model::alloc_lifeline(&regions, o.lifeline).ok_or(Error::LifelineFull(o.lifeline))?
        } else {
            0
        };
        // The ring's sequence numbers are cleared, and the owner recorded,
        // by mt_admin before the tag is live: `lifeline` and `owners` are
        // frozen (issue 32: a capability-less uid 0 can open their root
        // pins; only programs that check the caller's capabilities write).
        let uid = o.owner_uid.unwrap_or_else(mantle_sys::os::geteuid);
        let mut nm = [0u8; MT_NAME_LEN];
        nm[..name.len()].copy_from_slice(name.as_bytes());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let flag = |on: bool, f: u32| if on { f } else { 0 };
        kernel::admin(&abi::Admin {
            code: abi::ADM_INSTALL,
            tag: bit,
            flags: flag(o.system, abi::F_SYSTEM)
                | flag(o.replies, abi::F_REPLIES)
                | flag(o.deadlock, abi::F_DEADLOCK)
                | flag(o.anyone, abi::F_ANYONE)
                | flag(o.per_request, abi::F_PER_REQUEST)
                | extra_flags,
            ll_base: base,
            ll_size: o.lifeline,
            created_ns: now.as_nanos() as u64,
            default_ttl: o.ttl.unwrap_or(MT_TTL_INF as u8),
            owner_uid: uid,
            name: nm,
            ..abi::Admin::new_zeroed()
        })
        .map_err(|e| match e {
            Error::Invalid(_) if o.lifeline > abi::MT_LIFELINE_SLOTS as u32 => {
                Error::LifelineFull(o.lifeline)
            }
            e => e,
        })?;
        kernel::attach_tagged()?;
        self.info(bit)
    }

    /// Deletes a tag: it stops travelling at once, every holder loses it
    /// (sweep), then its bit is freed. Detaches the hooks after the last.
    pub fn delete(&self, name: &str) -> Result<(), Error> {
        self.need_root("deleting a tag (owners use the library call)")?;
        let _lock = kernel::TableLock::take()?;
        let bit = self.lookup(name)?;
        if self.entry(bit).flags & abi::F_GLOBAL != 0 {
            return Err(Error::Refused(format!(
                "{name:?} is a global tag: it comes from the cluster table, which every machine must share (reload with `tags up --cluster`)"
            )));
        }
        kernel::admin(&abi::Admin {
            code: abi::ADM_DELETE,
            tag: bit,
            ..abi::Admin::new_zeroed()
        })
        .map_err(|e| match e {
            Error::UnknownTag(_) => Error::UnknownTag(name.to_string()),
            e => e,
        })?;
        self.sweep()?;
        if self.entry(bit).state != abi::ST_FREE {
            return Err(Error::Corrupt(format!(
                "tag {name:?} was not freed by the sweep"
            )));
        }
        self.detach_if_empty()
    }

    /// Detaches the tagged hooks once no tag is left.
    fn detach_if_empty(&self) -> Result<(), Error> {
        if (0..MT_TAGS as u32).all(|b| self.entry(b).state == abi::ST_FREE) {
            kernel::detach_tagged()?;
        }
        Ok(())
    }

    /// Retires tag `name` after `ms` milliseconds (a kernel timer).
    pub fn expire_after(&self, name: &str, ms: u32) -> Result<(), Error> {
        self.need_root("setting an expiry")?;
        kernel::arm_expiry(self.lookup(name)?, ms)
    }

    /// Finishes pending deletions (clears their bits everywhere).
    pub fn sweep(&self) -> Result<(), Error> {
        kernel::run_iter::<u8>("sweep_iter").map(|_| ())
    }

    /// Details of one tag by bit.
    pub fn info(&self, bit: u32) -> Result<TagInfo, Error> {
        let e = self.entry(bit);
        let c = self.ctl();
        let owner: Option<Owner> = if self.root {
            kernel::pinned_map("owners", false)?
                .lookup::<u32, Owner>(&bit)
                .map_err(|e| kernel::kerr("read the owners map", e))?
        } else {
            None
        };
        let i = bit as usize;
        let ttl = c.default_ttl[i];
        Ok(TagInfo {
            name: abi::cstr(&e.name),
            bit,
            state: match e.state {
                abi::ST_LIVE => "live",
                abi::ST_DELETING => "deleting",
                _ => "free",
            },
            system: e.flags & abi::F_SYSTEM != 0,
            replies: e.flags & abi::F_REPLIES != 0,
            deadlock: e.flags & abi::F_DEADLOCK != 0,
            scope: if e.flags & abi::F_GLOBAL != 0 {
                "global"
            } else {
                "local"
            },
            ttl: (ttl != MT_TTL_INF as u8).then_some(ttl),
            lifeline: c.ll_size[i],
            receptions: c.ll_head[i],
            created_ns: e.created_ns,
            generation: e.generation,
            owner_uid: owner.map(|o| o.uid),
        })
    }

    /// Every tag that is not free.
    pub fn list(&self) -> Result<Vec<TagInfo>, Error> {
        (0..MT_TAGS as u32)
            .filter(|&b| self.entry(b).state != abi::ST_FREE)
            .map(|b| self.info(b))
            .collect()
    }

    /// Applies an operation to other threads (root): set, clear, terminate...
    pub fn op(
        &self,
        code: abi::OpCode,
        tag: Option<&str>,
        arg: u32,
        target: Target,
    ) -> Result<Vec<ThreadInfo>, Error> {
        self.need_root("changing another thread's tags")?;
        let bit = match tag {
            Some(t) => self.lookup(t)?,
            None => 0,
        };
        let _lock = kernel::TableLock::take()?;
        let op = abi::Op {
            code: code as u32,
            tag: bit,
            arg,
            tid: if let Target::Tid(t) = target { t } else { 0 },
            pid: if let Target::Pid(p) = target { p } else { 0 },
            pad: 0,
        };
        kernel::set_op(&op)?;
        let recs = kernel::run_iter::<ThreadRec>("op_iter")?;
        let id = match target {
            Target::Tid(t) | Target::Pid(t) => t,
        };
        if recs.is_empty() {
            return Err(Error::NoSuchThread(id));
        }
        if let Some(r) = recs.iter().find(|r| r.err != 0) {
            return Err(op_error(-r.err, tag.unwrap_or("")));
        }
        Ok(recs.iter().map(|r| self.thread_info(r)).collect())
    }

    fn thread_info(&self, r: &ThreadRec) -> ThreadInfo {
        ThreadInfo {
            tid: r.tid,
            pid: r.pid,
            comm: abi::cstr(&r.comm),
            system: r.flags & abi::F_SYSTEM != 0,
            tags: model::bits(&r.vec)
                .into_iter()
                .map(|b| HeldTag {
                    name: self.name_of(b),
                    ttl: Some(r.ttl[b as usize]).filter(|&t| t != MT_TTL_INF as u8),
                })
                .collect(),
            terminators: model::bits(&r.term)
                .into_iter()
                .map(|b| self.name_of(b))
                .collect(),
        }
    }

    /// Threads holding `tag` (or any tag / terminator / class mark if None).
    pub fn threads(&self, tag: Option<&str>) -> Result<Vec<ThreadInfo>, Error> {
        self.need_root("listing threads")?;
        let bit = tag.map(|t| self.lookup(t)).transpose()?;
        let recs = kernel::run_iter::<ThreadRec>("list_iter")?;
        Ok(recs
            .iter()
            .filter(|r| match bit {
                Some(b) => {
                    let (w, m) = model::bit(b);
                    r.vec[w] & m != 0
                }
                None => true,
            })
            .map(|r| self.thread_info(r))
            .collect())
    }

    /// Tag vector of any thread, read from the view (no privilege needed).
    pub fn vector_of(&self, tid: u32) -> Result<Vec<String>, Error> {
        let view = kernel::map_array::<abi::View>("view", false)?;
        let v: View = view.get(tid as usize).ok_or_else(|| {
            Error::Invalid(format!(
                "tid {tid} is beyond the view ({} entries)",
                view.entries()
            ))
        })?;
        Ok(model::bits(&v.vec)
            .into_iter()
            .map(|b| self.name_of(b))
            .collect())
    }

    /// The lifeline of a tag, oldest first.
    pub fn lifeline(&self, name: &str) -> Result<Vec<ReceptionInfo>, Error> {
        Ok(self.lifeline_since(name, 0)?.records)
    }

    /// The records of a tag's lifeline after sequence number `after`
    /// (0: all the ring holds), for a reader that follows the ring as it
    /// grows (`mantle tags export`). [`RingRead`] says where to go on from
    /// and what the ring lost before it was read.
    pub fn lifeline_since(&self, name: &str, after: u64) -> Result<RingRead, Error> {
        self.need_root("reading a lifeline")?;
        let bit = self.lookup(name)?;
        let i = bit as usize;
        let c = self.ctl();
        let (base, size, head) = (c.ll_base[i] as u64, c.ll_size[i] as u64, c.ll_head[i]);
        if size == 0 {
            return Err(Error::Invalid(format!(
                "tag {name:?} has no lifeline (create it with --lifeline N)"
            )));
        }
        let gen = self.entry(bit).generation;
        let ll = kernel::map_array::<abi::Reception>("lifeline", false)?;
        // A claim read from the kernel side: check it before indexing (a
        // ring outside the lifeline map used to panic the tool).
        if base + size > ll.entries() as u64 {
            return Err(Error::Corrupt(format!(
                "tag {name:?}: lifeline ring {base}+{size} lies outside the {} records",
                ll.entries()
            )));
        }
        let hosts = kernel::host_names(c.host_id, c.host_netns);
        let host_name = |id: u32| {
            hosts
                .get(&id)
                .cloned()
                .unwrap_or_else(|| format!("host-{id:08x}"))
        };
        let mut out = Vec::new();
        let first = head.saturating_sub(size).max(after);
        let mut read = RingRead {
            records: Vec::new(),
            next: first,
            lost: first - after,
            generation: gen,
        };
        for n in first..head {
            let Some(r) = ll.get::<Reception>((base + n % size) as usize) else {
                continue; // bounds checked above; unreachable
            };
            if r.seq != n + 1 || r.generation != gen {
                if r.generation == gen && r.seq > n + 1 {
                    // overwritten since: lost
                    read.lost += 1;
                    read.next = n + 1;
                    continue;
                }
                // Being written (an older record still there): stop here;
                // a reader that follows the ring reads on from it.
                break;
            }
            read.next = n + 1;
            out.push(ReceptionInfo {
                seq: r.seq,
                ts_ns: r.ts_ns,
                tag: name.to_string(),
                rx_tid: r.rx_tid,
                rx_pid: r.rx_pid,
                rx_comm: abi::cstr(&r.rx_comm),
                tx_tid: r.tx_tid,
                tx_pid: r.tx_pid,
                via: abi::Kind::from_raw(r.kind).name().to_string(),
                ttl: r.ttl,
                host: host_name(r.rx_host),
                tx_host: host_name(r.tx_host),
                lamport: r.lamport,
            });
        }
        read.records = out;
        Ok(read)
    }

    /// Waits for circular call chains reported by the kernel side and
    /// hands each to `f` (with its chain rebuilt from the tag's lifeline),
    /// and `None` at least every 200 ms, until `f` returns false. Root.
    pub fn watch_deadlocks(
        &self,
        mut f: impl FnMut(Option<deadlock::DeadlockReport>) -> bool,
    ) -> Result<(), Error> {
        self.need_root("watching for deadlocks")?;
        let events = std::rc::Rc::new(std::cell::RefCell::new(Vec::<abi::Deadlock>::new()));
        let map = libbpf_rs::MapHandle::from_pinned_path(kernel::pin("maps", "dl_events"))
            .map_err(|e| kernel::kerr("open the deadlock event ring", e))?;
        let mut b = libbpf_rs::RingBufferBuilder::new();
        let sink = events.clone();
        let short = std::rc::Rc::new(std::cell::Cell::new(0u64));
        let short_seen = short.clone();
        b.add(&map, move |bytes: &[u8]| {
            // a record of another layout is counted, not trusted
            match mantle_abi::read::<abi::Deadlock>(bytes, "mt_deadlock") {
                Ok(d) if (d.tag as usize) < MT_TAGS => sink.borrow_mut().push(d),
                _ => short_seen.set(short_seen.get() + 1),
            }
            0
        })
        .map_err(|e| kernel::kerr("read the deadlock event ring", e))?;
        let rb = b
            .build()
            .map_err(|e| kernel::kerr("read the deadlock event ring", e))?;
        loop {
            if let Err(e) = rb.poll(std::time::Duration::from_millis(200)) {
                if e.kind() != libbpf_rs::ErrorKind::Interrupted {
                    return Err(kernel::kerr("poll the deadlock event ring", e));
                }
            }
            if short.get() > 0 {
                return Err(Error::Corrupt(format!(
                    "{} deadlock report(s) of another layout in the event ring",
                    short.get()
                )));
            }
            let batch: Vec<abi::Deadlock> = events.borrow_mut().drain(..).collect();
            for ev in batch {
                if !f(Some(self.deadlock_report(&ev))) {
                    return Ok(());
                }
            }
            if !f(None) {
                return Ok(());
            }
        }
    }

    /// A kernel report, with the chain rebuilt from the tag's lifeline.
    fn deadlock_report(&self, ev: &abi::Deadlock) -> deadlock::DeadlockReport {
        let e = self.entry(ev.tag);
        let name = abi::cstr(&e.name);
        let records = if e.generation == ev.generation {
            self.lifeline(&name).unwrap_or_default()
        } else {
            Vec::new() // the tag is gone (or its bit reused) since
        };
        let chain = deadlock::chain_of(&records, ev.tx_tid, ev.tx_pid, ev.ts_ns);
        let mut members = deadlock::participants(&chain);
        if members.last().map(|p| p.pid) != Some(ev.tx_pid) {
            // no lifeline (or it wrapped): at least the closing sender
            members.push(deadlock::Participant {
                tid: ev.tx_tid,
                pid: ev.tx_pid,
                comm: abi::cstr(&ev.tx_comm),
                host: String::new(),
                via: String::new(),
            });
        }
        // The origin's user, if it is a process of this machine still
        // running (a remote origin's pid means nothing here).
        let started_by_uid = members
            .first()
            .filter(|p| p.host.is_empty() || p.host == mantle_sys::os::hostname())
            .and_then(|p| uid_of(p.pid));
        deadlock::DeadlockReport {
            tag: name,
            ts_ns: ev.ts_ns,
            refused: ev.denied != 0,
            via: abi::Kind::from_raw(ev.kind).name().to_string(),
            chain: members,
            back_to_pid: ev.rx_pid,
            back_to_tid: ev.rx_tid,
            started_by_uid,
        }
    }

    pub fn status(&self) -> Status {
        let c = self.ctl();
        let st: abi::Stats = kernel::pinned_map("stats", false)
            .ok()
            .and_then(|m| m.percpu_sum(0).ok())
            .unwrap_or_default();
        Status {
            loaded: true,
            hooks_attached: kernel::hooks_attached(),
            fd_channels: c.opts & abi::OPT_NO_FD_CHANNELS == 0,
            live_tags: c.live.iter().map(|w| w.count_ones()).sum(),
            view_entries: c.view_size,
            hops: st.hops,
            rejected: st.rejected,
            late: st.late,
            deposit_fail: st.deposit_fail,
            no_view: st.no_view,
            cluster_digest: c.cluster_digest,
            tcp_options_written: st.opt_written,
            tcp_options_parsed: st.opt_parsed,
            tcp_options_mismatched: st.opt_mismatch,
            tcp_options_no_space: st.opt_nospace,
        }
    }
}

/// The real uid of process `pid` (/proc/PID/status), if it exists.
fn uid_of(pid: u32) -> Option<u32> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    st.lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Maps a kernel-side op error (positive errno) to a typed error.
pub fn op_error(errno: i32, tag: &str) -> Error {
    match errno {
        e if e == abi::MT_EPERM as i32 => {
            Error::Permission(format!("not allowed to change tag {tag:?} there"))
        }
        e if e == abi::MT_ENOENT as i32 => Error::UnknownTag(tag.to_string()),
        e if e == abi::MT_EEXIST as i32 => Error::Exists(tag.to_string()),
        e if e == abi::MT_ECLASS as i32 => Error::Refused(format!(
            "class mismatch: tag {tag:?} and the thread are not both system or both user"
        )),
        e if e == abi::MT_ETERM as i32 => {
            Error::Refused(format!("the thread terminates tag {tag:?}"))
        }
        _ => Error::Invalid(format!("kernel side refused the operation (errno {errno})")),
    }
}
