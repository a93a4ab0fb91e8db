//! x86-64 system call numbers and names, from the generated table
//! (`sysno_x86_64.rs`, made by `scripts/gen-syscalls.sh` from the kernel's
//! uapi header; never typed by hand). Pure.

#[cfg(target_arch = "x86_64")]
#[path = "sysno_x86_64.rs"]
mod table;
#[cfg(not(target_arch = "x86_64"))]
compile_error!("the executive knows x86-64 system call numbers only (scripts/gen-syscalls.sh)");

/// A system call number of this architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Sysno(pub u32);

impl Sysno {
    /// The number of call `name` (`openat`), if this architecture has it.
    pub fn from_name(name: &str) -> Option<Sysno> {
        table::TABLE
            .iter()
            .find(|(_, n)| *n == name)
            .map(|&(nr, _)| Sysno(nr))
    }

    /// The call's name; numbers the table does not know (a kernel newer
    /// than the header, or garbage from a guest) print as `syscall_NNN`.
    pub fn name(self) -> std::borrow::Cow<'static, str> {
        match table::TABLE.binary_search_by_key(&self.0, |&(nr, _)| nr) {
            Ok(i) => table::TABLE[i].1.into(),
            Err(_) => format!("syscall_{}", self.0).into(),
        }
    }

    /// Every call the table knows.
    pub fn all() -> impl Iterator<Item = Sysno> {
        table::TABLE.iter().map(|&(nr, _)| Sysno(nr))
    }
}

impl std::fmt::Display for Sysno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_maps_to_its_number_and_back() {
        let mut n = 0;
        for s in Sysno::all() {
            assert_eq!(Sysno::from_name(&s.name()), Some(s));
            n += 1;
        }
        assert!(n > 300, "{n} calls");
        assert_eq!(
            Sysno::from_name("getppid"),
            Some(Sysno(libc::SYS_getppid as u32))
        );
        assert_eq!(
            Sysno::from_name("openat"),
            Some(Sysno(libc::SYS_openat as u32))
        );
        assert_eq!(Sysno::from_name("no_such_call"), None);
        assert_eq!(Sysno(100_000).name(), "syscall_100000");
    }

    #[test]
    fn table_is_sorted_and_unique() {
        for w in table::TABLE.windows(2) {
            assert!(w[0].0 < w[1].0, "{:?} {:?}", w[0], w[1]);
        }
    }
}
