//! The fast path of the event-line parser: a line of clean ASCII read field by field, eight digits at a time, without the general parser's checks (which it falls back to wherever it is unsure).
use super::*;

/// Whether `text` is printable ASCII with no spaces, but for line
/// breaks: then each of its lines is UTF-8, needs no trimming and holds no
/// NUL or control character, and [`fast_fields`] may read it. One pass
/// with no early exit, so that it vectorizes: over a whole block of lines
/// it costs less than a check of each line.
pub(crate) fn clean_text(text: &[u8]) -> bool {
    text.iter().fold(0u8, |odd, &b| {
        odd | u8::from(b.wrapping_sub(0x21) > 0x7e - 0x21 && b != b'\n')
    }) == 0
}

/// The common event line, read on bytes: printable ASCII with no spaces,
/// plain numbers and known field values. `None` for anything else, which
/// [`parse_event_line`] then reads (and explains when it is bad): this
/// only takes lines that it reads the same way, so the two never disagree
/// (tested, and fuzzed in `tests/prop_trace.rs`). Most of the time of
/// reading a trace was spent on `char`s: decoding, trimming and splitting
/// them.
pub(super) fn fast_event_line(raw: &[u8]) -> Option<LineEvent<'_>> {
    if !clean_text(raw) || raw.contains(&b'\n') {
        return None;
    }
    fast_fields(std::str::from_utf8(raw).ok()?)
}

/// The digits of a number field from `at` to the next comma or the end:
/// 1 to 19 plain digits (which always fit a `u64`), and where the field
/// ends. `None` for anything else. Finding the field's end and reading
/// its digits are one pass (a search for the comma, then a loop over the
/// digits, was a fifth of the parsing threads' time).
pub(super) fn number_field(b: &[u8], at: usize) -> Option<(u64, usize)> {
    let mut v = 0u64;
    let mut i = at;
    // Eight digits at a time while there are eight (a start time has 19):
    // a loop per digit is a chain of multiplies.
    while let Some(word) = b.get(i..).and_then(<[u8]>::first_chunk::<8>) {
        let w = u64::from_le_bytes(*word);
        if !eight_ascii_digits(w) {
            break;
        }
        v = v.wrapping_mul(100_000_000).wrapping_add(eight_digits(w));
        i += 8;
    }
    while let Some(&c) = b.get(i) {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            if c == b',' {
                break;
            }
            return None;
        }
        // Wrapping: past 19 digits the value is not used.
        v = v.wrapping_mul(10).wrapping_add(u64::from(d));
        i += 1;
    }
    (1..=19).contains(&(i - at)).then_some((v, i))
}

/// Eight bytes of `c`.
pub(super) const fn splat(c: u8) -> u64 {
    u64::from_le_bytes([c; 8])
}

/// Whether the eight ASCII bytes of `w` (a line [`clean_text`] passed)
/// are all digits: a byte below `0` sets its high bit when `0` is taken
/// away (borrowing), one above `9` when 0x46 is added.
pub(super) fn eight_ascii_digits(w: u64) -> bool {
    (w.wrapping_sub(splat(b'0')) | w.wrapping_add(splat(0x46))) & splat(0x80) == 0
}

/// Eight ASCII digits, the first in the lowest byte, as a number: pairs,
/// then fours, then the eight, with one multiply each.
pub(super) fn eight_digits(w: u64) -> u64 {
    let pairs = ((w & 0x0f00_0f00_0f00_0f00) >> 8) + (w & 0x000f_000f_000f_000f) * 10;
    let fours = ((pairs & 0x00ff_0000_00ff_0000) >> 16) + (pairs & 0x0000_00ff_0000_00ff) * 100;
    ((fours & 0x0000_ffff_0000_0000) >> 32) + (fours & 0x0000_0000_0000_ffff) * 10_000
}

/// Where the first comma is in `b` from `at` (at most `b.len()`) on, or
/// `b.len()`, eight bytes at a time (a comma is a zero byte of the word
/// xor commas, and the lowest zero byte of a word is found exactly by the
/// borrow trick): for a name, whose length varies from line to line, a
/// loop per byte ends on a mispredicted branch at a different place each
/// time.
pub(super) fn comma_from(b: &[u8], at: usize) -> usize {
    let mut i = at;
    while let Some(word) = b.get(i..).and_then(<[u8]>::first_chunk::<8>) {
        let x = u64::from_le_bytes(*word) ^ splat(b',');
        let zero = x.wrapping_sub(splat(0x01)) & !x & splat(0x80);
        if zero != 0 {
            return i + (zero.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    field_end(b, i.min(b.len()))
}

/// Where the field starting at `at` ends: the next comma, or the end.
pub(super) fn field_end(b: &[u8], at: usize) -> usize {
    b[at..]
        .iter()
        .position(|&c| c == b',')
        .map_or(b.len(), |i| at + i)
}

/// [`fast_event_line`] of a line known to be printable ASCII with no
/// spaces (see [`clean_text`]).
#[inline(always)]
pub(crate) fn fast_fields(line: &str) -> Option<LineEvent<'_>> {
    let b = line.as_bytes();
    if b.first() != Some(&b'S') {
        return None;
    }
    let name_end = comma_from(b, 1);
    if name_end == 1 || name_end == b.len() {
        return None;
    }
    // ASCII: every index is a character boundary.
    let name = &line[1..name_end];
    let (start_ns, start_end) = number_field(b, name_end + 1)?;
    if start_end == b.len() {
        return None;
    }
    let (dur_ns, dur_end) = number_field(b, start_end + 1)?;
    start_ns.checked_add(dur_ns)?;
    let (mut kind, mut batch, mut sample, mut ready, mut tid) = (None, None, None, None, None);
    let (mut cpu, mut hook, mut hook_in) = (None, None, None);
    let (mut usage, mut gc) = (Usage::default(), None);
    let mut at = dur_end + 1;
    while at < b.len() {
        // The keys the tracer writes on every line are known by their
        // first bytes and read in place (matching the key again after
        // finding its `=` was a call to `memcmp` per field); others are
        // found byte by byte.
        let rest = &b[at..];
        let end = if rest.starts_with(b"kind=") {
            let v = at + 5;
            let end = comma_from(b, v);
            kind = Some(Kind::parse_bytes(&b[v..end])?);
            end
        } else if rest.starts_with(b"batch=") {
            let (n, end) = number_field(b, at + 6)?;
            batch = Some(n);
            end
        } else if rest.starts_with(b"sample=") {
            let (n, end) = number_field(b, at + 7)?;
            sample = Some(n);
            end
        } else {
            let mut eq = at;
            while eq < b.len() && b[eq] != b'=' && b[eq] != b',' {
                eq += 1;
            }
            if eq == b.len() || b[eq] == b',' {
                if eq == at {
                    // An empty field.
                    at = eq + 1;
                    continue;
                }
                return None;
            }
            let v = eq + 1;
            match &b[at..eq] {
                b"tid" => {
                    let (n, end) = number_field(b, v)?;
                    tid = Some(u32::try_from(n).ok()?);
                    end
                }
                b"cpu" => {
                    let (n, end) = number_field(b, v)?;
                    cpu = Some(cpu_within(n, dur_ns).ok()?);
                    end
                }
                b"hook" => {
                    let (n, end) = number_field(b, v)?;
                    hook = Some(n);
                    end
                }
                b"hook_in" => {
                    let (n, end) = number_field(b, v)?;
                    hook_in = Some(n);
                    end
                }
                // A few events' (batch, wait, consume, start, stop, gc)
                // fields: read in place all the same.
                b"pcpu" | b"delay" | b"pcpu_at" | b"delay_at" | b"psys" => {
                    let (n, end) = number_field(b, v)?;
                    *usage_field(&mut usage, &b[at..eq])? = Some(n);
                    end
                }
                b"gen" => {
                    let (n, end) = number_field(b, v)?;
                    gc = Some(u8::try_from(n).ok().filter(|g| *g <= MAX_GC_GENERATION)?);
                    end
                }
                key => {
                    let end = field_end(b, v);
                    if key == b"ready" {
                        ready = Some(match &b[v..end] {
                            b"1" | b"true" => true,
                            b"0" | b"false" => false,
                            _ => return None,
                        });
                    }
                    end
                }
            }
        };
        at = end + 1;
    }
    if matches!(kind, Some(Kind::Config | Kind::Task)) {
        // Its settings (a task's hand-over) are read (and checked) by
        // `parse_event_line`.
        return None;
    }
    let fields = Fields {
        batch,
        sample,
        ready,
        tid,
        cpu,
        hook,
        hook_in,
        usage: boxed_usage(usage),
        config: None,
        gc,
        task: None,
    };
    Some(event(name, kind, start_ns, dur_ns, fields))
}
