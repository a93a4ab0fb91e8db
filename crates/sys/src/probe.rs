//! Kernel feature probes (being written).
