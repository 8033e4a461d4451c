//! Every event's duration under its key (see [`TraceIndex::keys`]), for
//! exact percentiles and deviations, kept as *how many events had each
//! value*: a key's durations are whole ns, and a trace repeats the same
//! values over and over (an op that takes 20 to 70 µs has at most 50,000
//! distinct durations however many times it runs), so counting each
//! distinct value holds far fewer entries than keeping every event and
//! needs no sort of every event, only of the distinct values at the end.
//! Profiling `trace stats` at 10 million events showed the sort and merge
//! of every duration to be more than a quarter of its time.
//!
//! The counts are kept in memory up to the [`Budget`]; past it (a trace
//! with more distinct values than fit) they are handed to a [`Sorter`] as
//! (key, value, count) records and counted again from empty, and
//! [`Durations::finish`] adds up the counts of one value met in several
//! runs. Either way the values come out in the same order with the same
//! counts, so the figures are the same whether or not anything went to
//! disk (tested in `stats`).
//!
//! [`TraceIndex::keys`]: super::TraceIndex::keys

use std::collections::hash_map::Entry;

use rustc_hash::FxHashMap;

use lotus_sort::bytes::{Get, Put};
use lotus_sort::{Budget, Record, Sorted, Sorter, SpillError};

/// One duration of one key and how many events had it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct DurCount {
    /// The key: an index into [`super::TraceIndex::keys`].
    pub key: u32,
    /// The duration, ns.
    pub dur: i64,
    /// How many events of the key lasted `dur`.
    pub count: u64,
}

impl Record for DurCount {
    const SIZE: usize = 20;
    fn encode(&self, out: &mut [u8]) {
        Put::new(out).u32(self.key).i64(self.dur).u64(self.count);
    }
    fn decode(b: &[u8]) -> Self {
        let mut g = Get::new(b);
        DurCount {
            key: g.u32(),
            dur: g.i64(),
            count: g.u64(),
        }
    }
}

/// The memory one distinct value is counted as: a table entry and its
/// control byte, in a table that doubles when it is 7/8 full (so at worst
/// a little under half full). A value and a count that fit 32 bits each
/// (nearly all: durations under 4.3 s) take an entry of 8 bytes.
const SMALL_ENTRY_BYTES: usize = 20;
/// The same for an entry of 16 bytes (a value or a count past 32 bits).
const WIDE_ENTRY_BYTES: usize = 40;

/// Distinct values of a key's table at which a window of counts is
/// considered for it.
const WINDOW_CHECK: usize = 4096;
/// How much wider than the number of its distinct values a key's values
/// may spread to get a window: a window takes 4 bytes per value of its
/// span, a table 20 per distinct value, and a short op's values fill
/// their span as the trace goes on.
const WINDOW_SPREAD: usize = 16;

/// One key's counts. Most values and counts fit 32 bits: their table has
/// entries half the size, so twice as many of them stay in the caches and
/// in the budget (profiled at 10 million events, the counting was bound
/// by cache misses). A key whose values are close together (a short op's
/// durations: 50,000 values between 20 and 70 µs) gets a window instead: a
/// count per value of its span, found with no hashing or probing, in a
/// quarter of the memory once the span fills.
#[derive(Debug, Default)]
struct KeyCounts {
    /// The counts of the values `window_lo..window_lo + window.len()`.
    window: Vec<u32>,
    window_lo: i64,
    /// Whether a window was considered since the last drain.
    window_checked: bool,
    /// Values and counts of 32 bits. A count that would pass `u32::MAX`
    /// moves to `wide` and starts again from 0 here.
    small: FxHashMap<u32, u32>,
    /// The other values, and the counts moved from `small`.
    wide: FxHashMap<i64, u64>,
}

impl KeyCounts {
    /// Counts one `dur`; what the memory of its counts grew by (a new
    /// entry, a window made).
    fn add(&mut self, dur: i64) -> isize {
        // Outside the window (below it too, wrapping), `get_mut` is `None`.
        let at = dur.wrapping_sub(self.window_lo) as u64;
        if let Some(count) = usize::try_from(at)
            .ok()
            .and_then(|i| self.window.get_mut(i))
        {
            match count.checked_add(1) {
                Some(c) => *count = c,
                None => {
                    *count = 0;
                    *self.wide.entry(dur).or_insert(0) += u64::from(u32::MAX) + 1;
                }
            }
            return 0;
        }
        let grew = self.add_to_tables(dur);
        if grew > 0 && !self.window_checked && self.small.len() >= WINDOW_CHECK {
            return grew + self.make_window();
        }
        grew
    }

    /// Makes a window of the values of `small`, where they are close
    /// enough together (checked once per drain); what memory grew by.
    fn make_window(&mut self) -> isize {
        self.window_checked = true;
        let (Some(&lo), Some(&hi)) = (self.small.keys().min(), self.small.keys().max()) else {
            return 0;
        };
        let span = (hi - lo) as usize + 1;
        if span > WINDOW_SPREAD * self.small.len() {
            return 0;
        }
        let moved = std::mem::take(&mut self.small);
        let mut window = vec![0u32; span];
        for (&d, &c) in &moved {
            window[(d - lo) as usize] = c;
        }
        self.window = window;
        self.window_lo = i64::from(lo);
        (span * 4) as isize - (moved.len() * SMALL_ENTRY_BYTES) as isize
    }

    /// Counts one `dur` in the tables; the bytes its entry takes when it
    /// is a new one.
    fn add_to_tables(&mut self, dur: i64) -> isize {
        if let Ok(small) = u32::try_from(dur) {
            match self.small.entry(small) {
                Entry::Occupied(mut e) => {
                    let count = e.get_mut();
                    match count.checked_add(1) {
                        Some(c) => *count = c,
                        None => {
                            *count = 0;
                            *self.wide.entry(dur).or_insert(0) += u64::from(u32::MAX) + 1;
                        }
                    }
                    0
                }
                Entry::Vacant(e) => {
                    e.insert(1);
                    SMALL_ENTRY_BYTES as isize
                }
            }
        } else {
            match self.wide.entry(dur) {
                Entry::Occupied(mut e) => {
                    *e.get_mut() += 1;
                    0
                }
                Entry::Vacant(e) => {
                    e.insert(1);
                    WIDE_ENTRY_BYTES as isize
                }
            }
        }
    }

    /// Every value with its count, ascending, each once; emptied.
    fn drain_sorted(&mut self) -> Vec<(i64, u64)> {
        let lo = self.window_lo;
        let window = std::mem::take(&mut self.window);
        self.window_checked = false;
        let mut all: Vec<(i64, u64)> = window
            .into_iter()
            .enumerate()
            .map(|(i, c)| (lo + i as i64, u64::from(c)))
            .chain(
                self.small
                    .drain()
                    .map(|(d, c)| (i64::from(d), u64::from(c))),
            )
            .chain(self.wide.drain())
            .filter(|&(_, c)| c > 0)
            .collect();
        all.sort_unstable();
        // A value whose count moved to `wide` is in both tables.
        all.dedup_by(|next, kept| {
            let same = next.0 == kept.0;
            if same {
                kept.1 += next.1;
            }
            same
        });
        all
    }
}

/// Every duration of every key, counted per value (see the module
/// documentation).
#[derive(Debug)]
pub(crate) struct Durations {
    budget: Budget,
    /// Per key, each value met and how many times. Hashed with `FxHash`
    /// (`rustc-hash`): the keys are plain integers from our own logs'
    /// fields, and SipHash would cost more than the rest of the counting.
    by_key: Vec<KeyCounts>,
    /// The memory the entries of `by_key` take, all keys together.
    bytes: usize,
    /// The counts handed over each time the budget was full.
    spilled: Option<Sorter<DurCount>>,
    /// Durations added.
    len: u64,
}

impl Durations {
    /// None yet; counts kept in memory up to `budget`.
    pub(crate) fn new(budget: Budget) -> Durations {
        Durations {
            budget,
            by_key: Vec::new(),
            bytes: 0,
            spilled: None,
            len: 0,
        }
    }

    /// Adds `durs`, each one event of `key`. An error only when a
    /// temporary file cannot be written.
    pub(crate) fn add(&mut self, key: u32, durs: &[i64]) -> Result<(), SpillError> {
        let k = key as usize;
        if self.by_key.len() <= k {
            self.by_key.resize_with(k + 1, KeyCounts::default);
        }
        self.len += durs.len() as u64;
        for &dur in durs {
            let grew = self.by_key[k].add(dur);
            if grew != 0 {
                self.bytes = self.bytes.saturating_add_signed(grew);
                // At least 16 entries, however small the budget.
                if self.bytes >= self.budget.bytes.max(16 * WIDE_ENTRY_BYTES) {
                    self.spill()?;
                }
            }
        }
        Ok(())
    }

    /// Hands every count over to the sorter (which writes them to disk
    /// past its own budget) and starts counting from empty.
    fn spill(&mut self) -> Result<(), SpillError> {
        let budget = self.budget;
        let sorter = self.spilled.get_or_insert_with(|| Sorter::new(budget));
        for (key, counts) in self.by_key.iter_mut().enumerate() {
            for (dur, count) in counts.drain_sorted() {
                sorter.push(DurCount {
                    key: key as u32,
                    dur,
                    count,
                })?;
            }
        }
        self.bytes = 0;
        Ok(())
    }

    /// How many durations were added.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Every distinct (key, duration) with its count, ascending by key
    /// then duration, each pair once.
    pub(crate) fn finish(mut self) -> Result<SortedDurations, SpillError> {
        if self.spilled.is_some() {
            self.spill()?;
        }
        Ok(SortedDurations {
            inner: match self.spilled {
                Some(sorter) => Inner::Merged {
                    sorted: sorter.finish()?,
                    next: None,
                },
                None => Inner::Memory {
                    keys: std::mem::take(&mut self.by_key).into_iter(),
                    key: 0,
                    values: Vec::new().into_iter(),
                },
            },
        })
    }
}

#[derive(Debug)]
enum Inner {
    /// Nothing spilled: each key's values sorted in turn.
    Memory {
        keys: std::vec::IntoIter<KeyCounts>,
        /// The key of `values`, plus one.
        key: u32,
        values: std::vec::IntoIter<(i64, u64)>,
    },
    /// Spilled: the sorter's records, one value's runs added up.
    Merged {
        sorted: Sorted<DurCount>,
        /// The record read past the last one handed out.
        next: Option<DurCount>,
    },
}

/// [`Durations::finish`]'s counts, ascending. An item is an error only
/// when a temporary file cannot be read back.
#[derive(Debug)]
pub(crate) struct SortedDurations {
    inner: Inner,
}

impl Iterator for SortedDurations {
    type Item = Result<DurCount, SpillError>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            Inner::Memory { keys, key, values } => loop {
                if let Some((dur, count)) = values.next() {
                    return Some(Ok(DurCount {
                        key: *key - 1,
                        dur,
                        count,
                    }));
                }
                *values = keys.next()?.drain_sorted().into_iter();
                *key += 1;
            },
            Inner::Merged { sorted, next } => {
                let mut cur = match next.take() {
                    Some(c) => c,
                    None => match sorted.next()? {
                        Ok(c) => c,
                        Err(e) => return Some(Err(e)),
                    },
                };
                for r in sorted.by_ref() {
                    match r {
                        Ok(r) if (r.key, r.dur) == (cur.key, cur.dur) => cur.count += r.count,
                        Ok(r) => {
                            *next = Some(r);
                            break;
                        }
                        Err(e) => return Some(Err(e)),
                    }
                }
                Some(Ok(cur))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (key, duration) with its count, from a plain sort.
    fn counted(input: &[(u32, i64)]) -> Vec<DurCount> {
        let mut sorted = input.to_vec();
        sorted.sort_unstable();
        let mut out: Vec<DurCount> = Vec::new();
        for (key, dur) in sorted {
            match out.last_mut() {
                Some(last) if (last.key, last.dur) == (key, dur) => last.count += 1,
                _ => out.push(DurCount { key, dur, count: 1 }),
            }
        }
        out
    }

    /// Counts kept in memory and counts spilled many times over give the
    /// plain sort's: each value once, ascending, with its count.
    #[test]
    fn counts_in_memory_and_spilled_equal_a_plain_sort() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let input: Vec<(u32, i64)> = (0..30_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Keys with few and with many distinct values, one unused;
                // values past 32 bits, and negative ones (delays).
                let key = (x % 4) as u32 * 2;
                let spread = [3, 50, 5000, 1 << 40][(x >> 8) as usize % 4];
                let value = (x >> 16) as i64 % spread;
                (key, if x.is_multiple_of(7) { -value } else { value })
            })
            .collect();
        let want = counted(&input);
        for bytes in [1usize, 4096, 1 << 30] {
            let mut d = Durations::new(Budget::new(bytes));
            // Added a few at a time, as blocks hand them over.
            for chunk in input.chunks(7) {
                for &(key, dur) in chunk {
                    d.add(key, &[dur]).expect("add");
                }
            }
            assert_eq!(d.spilled.is_some(), bytes < 1 << 30, "budget {bytes}");
            assert_eq!(d.len(), input.len() as u64);
            let got: Vec<DurCount> = d
                .finish()
                .expect("finish")
                .collect::<Result<_, _>>()
                .expect("read");
            assert_eq!(got, want, "budget {bytes}");
        }
    }

    /// A count that passes 32 bits goes on in the wide table, and the
    /// value is handed out once with the whole count.
    #[test]
    fn a_count_past_32_bits_is_kept_whole() {
        let mut k = KeyCounts::default();
        k.small.insert(5, u32::MAX - 1);
        for _ in 0..3 {
            k.add(5);
        }
        k.add(7);
        assert_eq!(k.drain_sorted(), vec![(5, u64::from(u32::MAX) + 2), (7, 1)]);
        assert!(k.small.is_empty() && k.wide.is_empty());
    }

    /// A key whose values are close together gets a window of counts;
    /// values outside it (later, below, far above) still go to the
    /// tables, and the counts equal a plain sort's, in memory and spilled.
    #[test]
    fn a_window_counts_what_the_tables_count() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut input: Vec<(u32, i64)> = Vec::new();
        for i in 0..60_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            input.push((0, 20_000 + (x % 10_000) as i64));
            input.push((1, (x >> 20) as i64 % 1_000_000_000));
            if i > 30_000 && i % 100 == 0 {
                input.push((0, [-5, 3, 19_999, 30_000, 1 << 40][(i / 100 % 5) as usize]));
            }
        }
        let want = counted(&input);
        for bytes in [64 << 10, 1 << 30] {
            let mut d = Durations::new(Budget::new(bytes));
            for &(key, dur) in &input {
                d.add(key, &[dur]).expect("add");
            }
            if bytes == 1 << 30 {
                assert!(!d.by_key[0].window.is_empty(), "a window for key 0");
                assert!(d.by_key[1].window.is_empty(), "none for key 1");
            }
            let got: Vec<DurCount> = d
                .finish()
                .expect("finish")
                .collect::<Result<_, _>>()
                .expect("read");
            assert_eq!(got, want, "budget {bytes}");
        }
    }
}
