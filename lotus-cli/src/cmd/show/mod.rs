//! `lotus show`.

pub mod against;
