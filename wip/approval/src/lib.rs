//! Scratch crate for `tether_exec::approval`; see [`approval`].

pub mod approval;
