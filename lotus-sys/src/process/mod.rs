//! The processes lotus starts, and ending them.
//!
//! - Starting held at a gate ([`spawn_gated`]): the child forks, stops
//!   before exec until the caller has attached (a profiler) and releases
//!   it; nothing runs unobserved, and no side waits forever on the other.
//! - Starting: [`clear_cloexec`] (a descriptor that one child inherits, in
//!   a `pre_exec` hook), [`log_pair`] (a child's output into a log file in
//!   a private folder), [`tail`] (that log's last lines, for an error).
//! - Waiting with a bound: [`wait_for`] (a child), [`output_within`] (a
//!   short question such as `tool --version`, its output captured).
//! - Stopping: [`signal_group`], [`stop_group`] (SIGINT, a grace period,
//!   then SIGKILL to the whole process group).
//! - Ending what a run left behind, daemons that left its group included:
//!   [`Reaper`], [`become_subreaper`], [`kill_descendants`],
//!   [`end_descendants`], [`descendants`]; [`start_time`] tells one process
//!   from a later one with the same pid.
//!
//! No code path here waits without a bound, except [`stop_group`]'s final
//! reap of a child that was sent SIGKILL.

mod bounded;
mod gate;
mod group;
mod reaper;

pub use bounded::output_within;
pub use gate::{spawn_gated, with_fd_hint, GatedChild};
pub use group::{clear_cloexec, log_pair, signal_group, stop_group, tail, wait_for};
pub use reaper::{
    become_subreaper, cpu_ticks, descendants, end_descendants, is_running, kill_descendants,
    raise_thread_priority, start_time, Reaper,
};
