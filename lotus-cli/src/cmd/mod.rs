//! The subcommands of `lotus`, one module each.

pub mod attribute;
pub mod backends;
pub mod compare;
pub mod completions;
pub mod export;
pub mod man;
pub mod map;
pub mod predict;
pub mod profile;
pub mod report;
pub mod show;
pub mod trace;
pub mod tune;
