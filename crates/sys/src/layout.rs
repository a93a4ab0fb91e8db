//! Layout checks for structs shared between eBPF programs and user space:
//! the Rust mirror's size and field offsets must equal those the eBPF
//! compiler laid out, read from the object's BTF. Used by every subsystem's
//! `layout` test, so that the two halves cannot drift apart silently.

use libbpf_rs::btf::types::{MemberAttr, Struct};
use libbpf_rs::btf::{Btf, HasSize};

/// Panics unless BTF struct `name` has `size` bytes and exactly `fields`
/// (name, byte offset) as its members.
pub fn check_struct(btf: &Btf, name: &str, size: usize, fields: &[(&str, usize)]) {
    let s: Struct = btf
        .type_by_name(name)
        .unwrap_or_else(|| panic!("struct {name} not in the object's BTF"));
    assert_eq!(s.size(), size, "size of struct {name}");
    for &(field, off) in fields {
        let m = s
            .iter()
            .find(|m| m.name.map(|n| n == field).unwrap_or(false))
            .unwrap_or_else(|| panic!("{name}.{field} not in BTF"));
        let MemberAttr::Normal { offset } = m.attr else {
            panic!("{name}.{field} is a bitfield")
        };
        assert_eq!(offset as usize, off * 8, "offset of {name}.{field}");
    }
    // every BTF member is listed: a field added on one side only fails
    assert_eq!(s.iter().len(), fields.len(), "field count of struct {name}");
}

/// `layout_fields!(Type: a, b, c)`: the (name, offset) list of a Rust
/// mirror's fields, for [`check_struct`].
#[macro_export]
macro_rules! layout_fields {
    ($t:ty: $($f:ident),*) => { &[$((stringify!($f), ::std::mem::offset_of!($t, $f))),*] };
}
