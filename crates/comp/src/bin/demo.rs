//! mantle-comp-demo: components for tests, benchmarks and examples, picked
//! by the first argument. Each is started by `mantle comp up` (or a
//! Manager) and finds its regions in the environment.
//!
//! * `echo`: f0(a..) = a0 + a5; f1(ms) sleeps ms then returns 0; f2 crashes
//!   (abort); f3 returns the caller-visible kernel prio of the context.
//! * `relay TARGET`: f0 invokes TARGET's f0 with a0+1 and returns its
//!   result + 1 (a chain link).

use mantle_comp::{Env, Interface};

fn main() {
    let role = std::env::args().nth(1).unwrap_or_default();
    let env = match Env::from_env() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("mantle-comp-demo: {e}");
            std::process::exit(2);
        }
    };
    let iface = match role.as_str() {
        "echo" => Interface::new()
            .add(|a| (a[0].wrapping_add(a[5])) as i64)
            .add(|a| {
                std::thread::sleep(std::time::Duration::from_millis(a[0]));
                0
            })
            .add(|_| std::process::abort())
            .add(|_| {
                mantle_sys::pifutex::self_sched()
                    .map_or(-1, |s| s.policy as i64 * 1000 + s.value as i64)
            }),
        "relay" => {
            let target = std::env::args().nth(2).unwrap_or_default();
            let s = match env.server(&target) {
                Ok(s) => s.clone(),
                Err(e) => {
                    eprintln!("mantle-comp-demo: {e}");
                    std::process::exit(2);
                }
            };
            let s2 = s.clone();
            Interface::new()
                .add(move |a| match s.invoke(0, &[a[0] + 1]) {
                    Ok(v) => v + 1,
                    Err(_) => -1,
                })
                .add(move |a| s2.invoke(1, &[a[0]]).unwrap_or(-1))
        }
        r => {
            eprintln!("mantle-comp-demo: unknown role {r:?} (echo, relay TARGET)");
            std::process::exit(2);
        }
    };
    if let Err(e) = env.serve_forever(iface) {
        eprintln!("mantle-comp-demo: {e}");
        std::process::exit(1);
    }
}
