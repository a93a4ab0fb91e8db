//! The executive's shared layouts (executive ↔ guest): the fast path's
//! per-thread slots. Filled in by the fast-path work of issue 10.
