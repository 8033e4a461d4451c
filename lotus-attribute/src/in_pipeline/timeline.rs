//! A trace folder's events on the samples' clock (`CLOCK_MONOTONIC` ns),
//! each log's wall-clock spans moved with its own clock pairs by the same
//! [`clock_of`] and [`ClockMap::to_monotonic`] the in-pipeline join uses,
//! so that a timeline drawn from them (`lotus trace view --format
//! firefox`) puts a span where the join credits its samples.

use lotus_sys::input::Dir;

use super::{clock_of, Error};
use lotus_protocol::ClockMap;
use lotus_trace::{Entry, Event, Item, LogFile, TraceFolder};

/// What [`for_each_clocked_event`] hands on: a log as its events begin,
/// or one event with its times on the samples' clock.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClockedItem<'a> {
    /// A log file: the events that follow are its own.
    Log(&'a LogFile),
    /// An event of the last log, with its start and end on the samples'
    /// clock (ns; `None` where its log's clock cannot place them: a log
    /// without clock pairs); `id` is its place in reading order among
    /// every event of the folder, as the join and `lotus trace view` count
    /// them.
    Event {
        /// The event as the log has it (wall-clock times).
        event: &'a Event,
        /// Its start on the samples' clock.
        start_ns: Option<u64>,
        /// Its end on the samples' clock.
        end_ns: Option<u64>,
        /// Its place in reading order.
        id: u64,
    },
}

/// What [`for_each_clocked_event`] read past: events its clock could not
/// place, bad lines, logs skipped (each with why).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClockedSummary {
    /// Events handed on.
    pub events: u64,
    /// Events whose start or end their log's clock could not place.
    pub unplaced: u64,
    /// Lines that are not events.
    pub bad_lines: u64,
    /// Logs that end in NUL bytes ([`lotus_trace::CUT_SHORT`]): their
    /// process was killed, or is still writing them (a run being read
    /// as it goes), not counted among the bad lines.
    pub cut_logs: u64,
    /// Logs skipped (nothing in them), each with why.
    pub skipped_logs: Vec<String>,
    /// `wall_ns - monotonic_ns` of the first clock pair read (where the
    /// samples' clock's zero was in wall-clock time), if any.
    pub wall_offset_ns: Option<i128>,
}

/// Reads every log of the trace folder `dir` through the reader `lotus
/// trace view` reads them with, and hands each log, then each of its
/// events with its times on the samples' clock, to `f`: the in-pipeline
/// join reads its spans through it. A log
/// without clock pairs is the join's error (an older lotus's header, the
/// original format); an empty one is skipped and said in the summary.
pub fn for_each_clocked_event<'a, F>(
    dir: impl Into<Dir<'a>>,
    mut f: F,
) -> Result<ClockedSummary, Error>
where
    F: FnMut(ClockedItem<'_>) -> Result<(), Error>,
{
    let dir: Dir<'_> = dir.into();
    let folder = TraceFolder::scan(dir)?;
    let mut clock = ClockMap::new(Vec::new());
    let mut summary = ClockedSummary::default();
    let mut next_id = 0u64;
    folder.read_all(|item| -> Result<(), Error> {
        let e = match item {
            Item::File(log) => {
                clock = match clock_of(log)? {
                    Ok(clock) => clock,
                    Err(why) => {
                        summary.skipped_logs.push(format!(
                            "{}: {why}; skipped, the other logs are analysed",
                            lotus_sys::input::escaped(&log.display)
                        ));
                        ClockMap::new(Vec::new())
                    }
                };
                if summary.wall_offset_ns.is_none() {
                    summary.wall_offset_ns = clock.pairs().first().map(|p| p.offset_ns());
                }
                return f(ClockedItem::Log(log));
            }
            Item::Entry(Entry::Bad(bad)) => {
                match bad.message == lotus_trace::CUT_SHORT {
                    true => summary.cut_logs += 1,
                    false => summary.bad_lines += 1,
                }
                return Ok(());
            }
            Item::Entry(Entry::Event(e)) => e,
        };
        let id = next_id;
        next_id += 1;
        let (start_ns, end_ns) = (
            clock.to_monotonic(e.start_ns),
            clock.to_monotonic(e.end_ns()),
        );
        summary.events += 1;
        summary.unplaced += u64::from(start_ns.is_none() || end_ns.is_none());
        f(ClockedItem::Event {
            event: &e,
            start_ns,
            end_ns,
            id,
        })
    })?;
    Ok(summary)
}
