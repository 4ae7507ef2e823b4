//! Scratch crate for `tether_exec::audit`; the module is moved verbatim.
pub mod audit;
