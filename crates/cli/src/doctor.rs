//! `mantle doctor`: which kernel features mantle can use on this machine
//! (mantle-sys probes them; this prints the report).

use crate::render::print_json;

pub fn run(json: bool) {
    let r = mantle_sys::probe::probe_all();
    if json {
        print_json(&r);
    } else {
        print!("{}", r.render_text());
    }
}
