//! mantle-comp-demo: components for tests, benchmarks and examples, picked
//! by the first argument. Each is started by `mantle comp up` (or a
//! Manager) and finds its regions in the environment.
//!
//! `echo` (a leaf):
//! * f0(a..) = a0 + a5; f1(ms) sleeps ms; f2 aborts (a crash mid-call);
//!   f3 = policy * 1000 + priority of the context running it;
//! * f4(cbid, n): maps the passed CBUF (cbuf2buf), returns the sum of its
//!   n bytes and writes that sum into its first 8 bytes (a result back);
//!   -errno if the cbid is refused;
//! * f5(): allocates a 64-byte CBUF, keeps it, returns its cbid;
//! * f6(ms): allocates a CBUF, holds it ms, frees it;
//! * f7(): spins until a caller blocks on this component's empty cache
//!   (at most 100 ms): the holder side of the "invocation with PI" bench;
//! * f8(): the truncation attack (both roles): tries to shrink and to
//!   grow every memfd it holds (regions, CBUF table, slabs), reopened
//!   writable through /proc/self/fd; returns `tried << 16 | succeeded`;
//! * f9(n, ms): allocates up to n 64-byte CBUFs (stopping at the first
//!   error), holds them ms, frees them; returns `got * 1000 + errno` of
//!   the failed allocation (0 when all n were had);
//! * f10(pid): the sibling attack: tries to open process pid's memory
//!   (/proc/pid/mem, read-write), to read its maps, to read one word of
//!   it with process_vm_readv, and to reopen read-write every memfd of
//!   the manager's it holds (/proc/pid/fd); returns how many worked;
//! * f11(us): reports one job of the calling thread (the call's origin)
//!   with a tardiness of us microseconds; returns 0.
//! * f12(kib, ms): dirties kib KiB (at most 192) of the context's stack,
//!   sleeps ms, returns the pages touched.
//!
//! `relay TARGET` (a link):
//! * f0(x) = TARGET.f0(x + 1) + 1; f1(ms) = TARGET.f1(ms);
//! * f4(cbid, n): maps the CBUF here too, passes it to TARGET.f4;
//! * f5(n): allocates n bytes, fills byte i with i % 251, calls
//!   TARGET.f4(cbid, n), checks the result the leaf wrote back, frees;
//!   returns the sum (or -errno);
//! * f6(raw): cbuf2buf(raw cbid) here: 0, or -errno when refused;
//! * f7(): allocates and frees a CBUF, then passes the freed cbid to
//!   TARGET.f4 (expected: -ESTALE).
//!
//! `fig8 CHILD:PCT ...` (a component of the paper's Figure 8 system,
//! bench/tmem/fig67.rs):
//! * f0(left_us, step_us, seed, cbid): maps the passed CBUF (cbid 0: none),
//!   spins step_us of this thread's CPU time (all of left_us when it
//!   invokes nobody further), allocates a 64-byte CBUF, writes it, picks a
//!   CHILD with probability PCT% (the rest: none, seeded by seed), invokes
//!   its f0 with what is left and the CBUF, frees it; returns the
//!   components visited, or -errno;
//! * f1(us): reports one job of the call's origin with us µs tardiness.

use std::sync::Arc;

use mantle_abi::comp::CbufId;
use mantle_comp::{cbuf::Cbufs, Env, Error, Interface, Server};

fn errno(e: Error) -> i64 {
    match e {
        Error::Cbuf(n) | Error::Remote(n) => -(n as i64),
        _ => -(libc::EIO as i64),
    }
}

fn sum_of(cb: &Cbufs, id: u64, n: u64) -> i64 {
    let n = n as usize;
    match cb.cbuf2buf(CbufId(id as u32), n.max(8)) {
        Ok(p) => {
            // SAFETY: cbuf2buf checked that the buffer holds n.max(8) bytes
            // and stays mapped; other components write it only around our
            // call (the invocation protocol).
            let b = unsafe { std::slice::from_raw_parts_mut(p, n.max(8)) };
            let s: u64 = b[..n].iter().map(|&x| x as u64).sum();
            b[..8].copy_from_slice(&s.to_le_bytes());
            s as i64
        }
        Err(e) => errno(e),
    }
}

/// f8: every memfd this process holds, shrunk to 0 and grown by a page.
fn truncate_attack() -> i64 {
    let (mut tried, mut done) = (0i64, 0i64);
    for e in std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
    {
        let p = e.path();
        let is_memfd =
            std::fs::read_link(&p).is_ok_and(|l| l.to_string_lossy().starts_with("/memfd:mantle"));
        if !is_memfd {
            continue;
        }
        tried += 1;
        if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&p) {
            let len = f.metadata().map_or(0, |m| m.len());
            if f.set_len(0).is_ok() || f.set_len(len + 4096).is_ok() {
                done += 1;
            }
        }
    }
    tried << 16 | done
}

/// f10: every way into a sibling process of the same uid.
fn sibling_attack(pid: u64) -> i64 {
    let mut got = 0;
    let p = format!("/proc/{pid}");
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("{p}/mem"))
        .is_ok()
    {
        got += 1;
    }
    if let Ok(maps) = std::fs::read_to_string(format!("{p}/maps")) {
        got += 1;
        let addr = maps
            .lines()
            .next()
            .and_then(|l| l.split('-').next())
            .and_then(|a| u64::from_str_radix(a, 16).ok())
            .unwrap_or(0);
        let mut word = 0u64;
        let local = libc::iovec {
            iov_base: (&mut word as *mut u64).cast(),
            iov_len: 8,
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: 8,
        };
        // SAFETY: local points at our own 8-byte word; the remote address
        // is only read by the kernel, on the other process's side.
        if unsafe { libc::process_vm_readv(pid as i32, &local, 1, &remote, 1, 0) } == 8 {
            got += 1;
        }
    }
    for e in std::fs::read_dir(format!("{p}/fd"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let is_memfd = std::fs::read_link(e.path())
            .is_ok_and(|l| l.to_string_lossy().starts_with("/memfd:mantle"));
        if is_memfd
            && std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(e.path())
                .is_ok()
        {
            got += 1;
        }
    }
    got
}

/// f12: touches `n` bytes of this context's stack (one write a page),
/// sleeps, returns the pages touched.
#[inline(never)]
fn dirty_stack(n: usize, ms: u64) -> i64 {
    let mut buf = [0u8; 192 * 1024];
    let n = n.min(buf.len());
    for i in (0..n).step_by(4096) {
        buf[i] = 1;
    }
    std::thread::sleep(std::time::Duration::from_millis(ms));
    std::hint::black_box(&mut buf)
        .iter()
        .step_by(4096)
        .map(|&b| b as i64)
        .sum()
}

/// This thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to fill; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Spins until this thread has used `us` µs of CPU (time preempted does
/// not count: the paper's "consumed in a tight loop" of e_i).
fn spin_cpu(us: u64) {
    let end = thread_cpu_ns() + us * 1000;
    while thread_cpu_ns() < end {
        std::hint::spin_loop();
    }
}

fn fig8(env: &Env) -> Interface {
    let children: Vec<(Server, u64)> = std::env::args()
        .skip(2)
        .filter_map(|a| {
            let (n, p) = a.split_once(':')?;
            Some((env.server(n).ok()?.clone(), p.parse().ok()?))
        })
        .collect();
    let (cb, cb1) = (env.cbufs.clone(), env.cbufs.clone());
    Interface::new()
        .func(move |a| {
            let (left, step, seed, cbid) = (a[0], a[1], a[2], a[3]);
            if cbid != 0 {
                match cb.cbuf2buf(CbufId(cbid as u32), 8) {
                    // SAFETY: cbuf2buf checked 8 bytes are mapped here.
                    Ok(p) => std::hint::black_box(unsafe { p.cast::<u64>().read_volatile() }),
                    Err(e) => return errno(e),
                };
            }
            let mut x = seed | 1;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut pick = x % 100;
            let next = children.iter().find(|(_, p)| {
                if pick < *p {
                    true
                } else {
                    pick -= p;
                    false
                }
            });
            let here = match next {
                Some(_) => step.min(left),
                None => left,
            };
            spin_cpu(here);
            let left = left - here;
            let Some((s, _)) = next.filter(|_| left > 0) else {
                return 1;
            };
            let (p, id) = match cb.alloc(64) {
                Ok(v) => v,
                Err(e) => return errno(e),
            };
            // SAFETY: a buffer of at least 64 bytes, ours until freed.
            unsafe { p.cast::<u64>().write_volatile(left) };
            let r = s
                .invoke(0, &[left, step, x, id.0 as u64])
                .unwrap_or_else(errno);
            let _ = cb.free(p);
            if r < 0 {
                r
            } else {
                r + 1
            }
        })
        .func(move |a| {
            cb1.report_job(a[0].saturating_mul(1000));
            0
        })
}

fn main() {
    let role = std::env::args().nth(1).unwrap_or_default();
    let env = match Env::from_env() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("mantle-comp-demo: {e}");
            std::process::exit(2);
        }
    };
    let cb = env.cbufs.clone();
    let own = env.own.clone();
    let iface = match role.as_str() {
        "echo" => {
            let (c4, c5, c6, c9, c11) =
                (cb.clone(), cb.clone(), cb.clone(), cb.clone(), cb.clone());
            Interface::new()
                .func(|a| (a[0].wrapping_add(a[5])) as i64)
                .func(|a| {
                    std::thread::sleep(std::time::Duration::from_millis(a[0]));
                    0
                })
                .func(|_| std::process::abort())
                .func(|_| {
                    mantle_sys::pifutex::self_sched()
                        .map_or(-1, |s| s.policy as i64 * 1000 + s.value as i64)
                })
                .func(move |a| sum_of(&c4, a[0], a[1]))
                .func(move |_| match c5.alloc(64) {
                    Ok((_, id)) => id.0 as i64,
                    Err(e) => errno(e),
                })
                .func(move |a| match c6.alloc(64) {
                    Ok((p, _)) => {
                        std::thread::sleep(std::time::Duration::from_millis(a[0]));
                        c6.free(p).map_or_else(errno, |_| 0)
                    }
                    Err(e) => errno(e),
                })
                .func(move |_| {
                    let t0 = std::time::Instant::now();
                    while own.waiters() == 0 && t0.elapsed().as_millis() < 100 {
                        std::hint::spin_loop();
                    }
                    0
                })
                .func(|_| truncate_attack())
                .func(move |a| {
                    let mut got = Vec::new();
                    let mut err = 0;
                    while (got.len() as u64) < a[0] {
                        match c9.alloc(64) {
                            Ok((p, _)) => got.push(p),
                            Err(e) => {
                                err = -errno(e);
                                break;
                            }
                        }
                    }
                    std::thread::sleep(std::time::Duration::from_millis(a[1]));
                    let n = got.len() as i64;
                    for p in got {
                        let _ = c9.free(p);
                    }
                    n * 1000 + err
                })
                .func(|a| sibling_attack(a[0]))
                .func(move |a| {
                    c11.report_job(a[0].saturating_mul(1000));
                    0
                })
                .func(|a| dirty_stack(a[0] as usize * 1024, a[1]))
        }
        "relay" => {
            let target = std::env::args().nth(2).unwrap_or_default();
            let s = match env.server(&target) {
                Ok(s) => Arc::new(s.clone()),
                Err(e) => {
                    eprintln!("mantle-comp-demo: {e}");
                    std::process::exit(2);
                }
            };
            let (s0, s1, s4, s5, s7) = (s.clone(), s.clone(), s.clone(), s.clone(), s);
            let (c4, c5, c6, c7) = (cb.clone(), cb.clone(), cb.clone(), cb);
            Interface::new()
                .func(move |a| s0.invoke(0, &[a[0] + 1]).map_or(-1, |v| v + 1))
                .func(move |a| s1.invoke(1, &[a[0]]).unwrap_or(-1))
                .func(|_| 0)
                .func(|_| 0)
                .func(
                    move |a| match c4.cbuf2buf(CbufId(a[0] as u32), a[1] as usize) {
                        Ok(_) => s4.invoke(4, &[a[0], a[1]]).unwrap_or_else(errno),
                        Err(e) => errno(e),
                    },
                )
                .func(move |a| {
                    let n = (a[0] as usize).max(8);
                    let (p, id) = match c5.alloc(n) {
                        Ok(v) => v,
                        Err(e) => return errno(e),
                    };
                    // SAFETY: a buffer of at least n bytes, ours until freed.
                    let b = unsafe { std::slice::from_raw_parts_mut(p, n) };
                    for (i, x) in b.iter_mut().enumerate() {
                        *x = (i % 251) as u8;
                    }
                    let r = s5.invoke(4, &[id.0 as u64, n as u64]).unwrap_or_else(errno);
                    let back = i64::from_le_bytes(b[..8].try_into().unwrap_or_default());
                    let _ = c5.free(p);
                    if r >= 0 && back != r {
                        return -(libc::EBADMSG as i64);
                    }
                    r
                })
                .func(move |a| {
                    c6.cbuf2buf(CbufId(a[0] as u32), 8)
                        .map_or_else(errno, |_| 0)
                })
                .func(move |_| match c7.alloc(64) {
                    Ok((p, id)) => {
                        let _ = c7.free(p);
                        s7.invoke(4, &[id.0 as u64, 8]).unwrap_or_else(errno)
                    }
                    Err(e) => errno(e),
                })
                .func(|_| truncate_attack())
        }
        "fig8" => fig8(&env),
        r => {
            eprintln!(
                "mantle-comp-demo: unknown role {r:?} (echo, relay TARGET, fig8 CHILD:PCT..)"
            );
            std::process::exit(2);
        }
    };
    if let Err(e) = env.serve_forever(iface) {
        eprintln!("mantle-comp-demo: {e}");
        std::process::exit(1);
    }
}
