//! The subcommands of `lotus`, one module each.

pub mod attribute;
pub mod compare;
pub mod docs;
pub mod map;
pub mod profile;
pub mod report;
pub mod show;
pub mod trace;
