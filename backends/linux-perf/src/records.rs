//! Parsing the few kernel record types lotus asks for, from raw bytes.
//!
//! Every event lotus opens uses the same `sample_type` ([`SAMPLE_TYPE`]:
//! IP, TID, TIME) with `sample_id_all`, so every record's layout is fixed:
//! a SAMPLE body is `ip, pid, tid, time`, and every other record ends with a
//! 16-byte `pid, tid, time` trailer. Samplers that read a counter group
//! with each sample ([`SAMPLE_TYPE_READ`], `read_format` [`READ_FORMAT`])
//! append the group: `nr`, then `nr` pairs of `value, id`, the sampler
//! (the group's leader) first. Samplers that take call chains
//! ([`SampleFlag::CALLCHAIN`], `--stacks fp`) append the kernel's chain
//! after that: `nr`, then `nr` addresses, in which context markers
//! ([`PERF_CONTEXT_KERNEL`], [`PERF_CONTEXT_USER`], ...) open the kernel's
//! and the user's frames, each innermost first, the first address of a
//! context the interrupted instruction and the others return addresses;
//! the kernel stops at `sample_max_stack` frames ([`MAX_CHAIN`]). Since
//! the chain follows the read values, whose length the record does not
//! say, those records are parsed knowing their sampler's [`ReadKind`]
//! ([`parse_with`]). Parsing by hand keeps this total (no
//! panics on a short record) and keeps the trailer's timestamp, which the
//! ordering of side-band and sample records depends on.

use lotus_samples::{CounterValues, MAX_COUNTERS};
use perf_event::{ReadFormat, SampleFlag};

/// The sample fields of every event lotus opens.
pub(crate) const SAMPLE_TYPE: SampleFlag = SampleFlag::IP
    .union(SampleFlag::TID)
    .union(SampleFlag::TIME);

/// The sample fields of a sampler that reads its counter group with each
/// sample.
pub(crate) const SAMPLE_TYPE_READ: SampleFlag = SAMPLE_TYPE.union(SampleFlag::READ);
/// The read format of such a sampler: every member's value and id.
pub(crate) const READ_FORMAT: ReadFormat = ReadFormat::GROUP.union(ReadFormat::ID);

/// The most frames of a call chain the kernel is asked for
/// (`sample_max_stack`): the kernel's default cap
/// (`kernel.perf_event_max_stack`), kernel and user frames and their
/// context markers together. Deeper chains keep their innermost frames.
pub(crate) const MAX_CHAIN: u16 = 127;
/// Call-chain context marker: the kernel's frames follow.
pub(crate) const PERF_CONTEXT_KERNEL: u64 = (-128i64) as u64;
/// Call-chain context marker: the user's frames follow.
pub(crate) const PERF_CONTEXT_USER: u64 = (-512i64) as u64;
/// Call-chain addresses from here up are context markers
/// (`PERF_CONTEXT_MAX`); the hypervisor's and guests' are skipped.
pub(crate) const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;

/// The user registers a sampler with user stacks takes
/// (`sample_regs_user`, `--stacks dwarf`): x86-64's bp, sp and ip (bits 6,
/// 7, 8 of the kernel's `perf_event_x86_regs`), written in that order.
pub(crate) const USER_REGS_X86_64: u64 = (1 << 6) | (1 << 7) | (1 << 8);
/// The most bytes of user stack copied with each sample
/// (`sample_stack_user`, `--stacks dwarf`): the kernel's limit (under
/// 65535 and a multiple of 8; the kernel trims the copy so that the record
/// fits its 16-bit size). perf's default for `--call-graph dwarf`, 8 KiB,
/// is too little on Python 3.12+: a single native frame of numpy's
/// (`PyUFunc_GeneralizedFunctionInternal`, under FFTs and matmul) holds
/// over 16 KiB of locals, and each Python call under CPython's perf
/// trampolines is several C frames. Measured on an STFT + mel op in a
/// DataLoader worker (`tests/stacks.rs`): the op's own `py::` frame in 16%
/// of its samples at 8 KiB, 20% at 16 KiB, 99% at 32 KiB (none of them up
/// to the thread's root), 100% at 64 KiB (99% up to `_start`). Less where
/// the ring buffer is small (`events::user_stack_bytes`); a deeper stack
/// keeps its innermost frames.
pub(crate) const USER_STACK_BYTES: u32 = 65528;

/// A sample's user registers and its copy of the user stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UserCopy<'a> {
    /// The frame pointer register.
    pub bp: u64,
    /// The stack pointer: the address of `stack[0]`.
    pub sp: u64,
    /// The instruction pointer in user mode (where a kernel-mode sample
    /// entered the kernel).
    pub ip: u64,
    /// The stack from `sp` up, as much as the kernel could copy.
    pub stack: &'a [u8],
}

/// The user registers and stack that follow the call chain at `at` in a
/// sample of a sampler with user stacks; `None` for a kernel thread's
/// sample (no user registers: ABI 0) or where cut.
fn user_copy(body: &[u8], at: usize) -> Option<UserCopy<'_>> {
    let abi = u64_at(body, at)?;
    if abi == 0 {
        return None;
    }
    let regs = at + 8;
    let (bp, sp, ip) = (
        u64_at(body, regs)?,
        u64_at(body, regs + 8)?,
        u64_at(body, regs + 16)?,
    );
    let size_at = regs + 24;
    let size = usize::try_from(u64_at(body, size_at)?).ok()?;
    let data = size_at + 8;
    let stack = body.get(data..data.checked_add(size)?)?;
    let valid = if size == 0 {
        0
    } else {
        usize::try_from(u64_at(body, data + size)?).ok()?.min(size)
    };
    Some(UserCopy {
        bp,
        sp,
        ip,
        stack: &stack[..valid],
    })
}

/// What a sampler reads with each sample, which decides where its call
/// chain starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ReadKind {
    /// Nothing.
    #[default]
    Nothing,
    /// Its own count (8 bytes).
    Own,
    /// Its group ([`READ_FORMAT`]: `nr`, then `nr` pairs).
    Group,
}

/// The addresses of a raw call chain (as [`Record::Sample`] holds it).
pub(crate) fn chain_addresses(chain: &[u8]) -> impl Iterator<Item = u64> + '_ {
    chain
        .chunks_exact(8)
        .map(|b| u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
}

const RECORD_MMAP: u32 = 1;
const RECORD_LOST: u32 = 2;
const RECORD_COMM: u32 = 3;
const RECORD_EXIT: u32 = 4;
const RECORD_THROTTLE: u32 = 5;
const RECORD_FORK: u32 = 7;
const RECORD_READ: u32 = 8;
const RECORD_SAMPLE: u32 = 9;
const RECORD_MMAP2: u32 = 10;
/// `misc` bits saying which mode the CPU was in (`PERF_RECORD_MISC_CPUMODE_MASK`).
const MISC_CPUMODE_MASK: u16 = 7;
/// The CPU was in the kernel (`PERF_RECORD_MISC_KERNEL`).
const MISC_KERNEL: u16 = 1;
/// `misc` bit of a COMM record caused by exec.
const MISC_COMM_EXEC: u16 = 1 << 13;
/// `PERF_RECORD_MISC_MMAP_BUILD_ID`: an MMAP2 record carries a build ID
/// where the device and inode would be.
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
/// The `pid, tid, time` trailer `sample_id_all` adds to non-sample records.
const SAMPLE_ID_LEN: usize = 16;

/// One record, borrowed from the ring buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record<'a> {
    /// A sample: the thread group `pid` was at `ip`.
    Sample {
        /// Process (thread group) id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// Instruction pointer.
        ip: u64,
        /// The CPU was in kernel mode (`ip` is a kernel address).
        kernel: bool,
        /// Timestamp (CLOCK_MONOTONIC ns).
        time: u64,
        /// The group's members' running totals on this thread (and this
        /// sampler's CPU), the leader left out; empty without a group.
        counters: CounterValues,
        /// The call chain's addresses, raw (8 bytes each, markers
        /// included: see [`chain_addresses`]); empty without one.
        chain: &'a [u8],
        /// The user registers and stack copy, for a sampler that takes
        /// them (`--stacks dwarf`) and a sample of a user thread.
        user: Option<UserCopy<'a>>,
    },
    /// Thread `tid` of `pid` exited.
    Exit {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// Timestamp.
        time: u64,
    },
    /// A thread's sampler copy on one CPU ended with the thread
    /// (`PERF_RECORD_READ`, written at its exit because the samplers set
    /// `inherit_stat`): the CPU time `ns` it counted, which is the CPU
    /// time thread `tid` of `pid` ran on that CPU while sampling was on.
    ThreadCpu {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// The sampler's `cpu-clock` count: nanoseconds.
        ns: u64,
        /// Timestamp (the thread's exit).
        time: u64,
    },
    /// An executable mapping appeared in `pid`.
    Mmap {
        /// Process id.
        pid: u32,
        /// First address.
        start: u64,
        /// Length in bytes.
        len: u64,
        /// Offset in the file of `start`.
        pgoff: u64,
        /// Path or pseudo-name (`//anon`, `[vdso]`), without the NULs.
        filename: &'a [u8],
        /// (device, inode) of the mapped file, as `stat` numbers them
        /// (MMAP2 records that carry them, not a build ID).
        file_id: Option<(u64, u64)>,
        /// Timestamp.
        time: u64,
    },
    /// `pid` was created by `ppid` (a thread when they are equal).
    Fork {
        /// New process id.
        pid: u32,
        /// Parent process id.
        ppid: u32,
        /// New thread id.
        tid: u32,
        /// Timestamp.
        time: u64,
    },
    /// `pid` exec'd: its old mappings are gone.
    Exec {
        /// Process id.
        pid: u32,
        /// Timestamp.
        time: u64,
    },
    /// The ring buffer was full: `count` records were dropped.
    Lost {
        /// How many.
        count: u64,
        /// Timestamp.
        time: u64,
    },
    /// The kernel throttled the sampler (too many interrupts).
    Throttle {
        /// Timestamp.
        time: u64,
    },
    /// A record lotus does not use (unthrottle, exit, plain comm...).
    Other,
}

impl Record<'_> {
    /// The record's timestamp; 0 for [`Record::Other`].
    pub(crate) fn time(&self) -> u64 {
        match self {
            Record::Sample { time, .. }
            | Record::Mmap { time, .. }
            | Record::Fork { time, .. }
            | Record::Exec { time, .. }
            | Record::Exit { time, .. }
            | Record::ThreadCpu { time, .. }
            | Record::Lost { time, .. }
            | Record::Throttle { time } => *time,
            Record::Other => 0,
        }
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let bytes = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes(bytes.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let bytes = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_ne_bytes(bytes.try_into().ok()?))
}

/// The trailer's timestamp (the last 8 bytes).
fn trailer_time(body: &[u8]) -> Option<u64> {
    u64_at(body, body.len().checked_sub(8)?)
}

/// The string in `b[at..end]`, cut at the first NUL.
fn c_str(b: &[u8], at: usize, end: usize) -> Option<&[u8]> {
    let raw = b.get(at..end)?;
    let len = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
    Some(&raw[..len])
}

/// The group read at `at` (`nr`, then `nr` (value, id) pairs), its leader
/// left out; empty when the body ends at `at` (no group read). `None`
/// when it is cut or holds more members than a sample can carry.
fn group_values(body: &[u8], at: usize) -> Option<CounterValues> {
    // Nothing read, or the sampler's own count alone (a sampler that reads
    // with each sample only to keep its threads' copies apart, see
    // `crate::events`).
    if body.len() <= at || body.len() == at + 8 {
        return Some(CounterValues::default());
    }
    let nr = usize::try_from(u64_at(body, at)?).ok()?;
    if nr == 0 || nr - 1 > MAX_COUNTERS || body.len() < at + 8 + 16 * nr {
        return None;
    }
    let mut values = [0u64; MAX_COUNTERS];
    for (k, v) in values.iter_mut().take(nr - 1).enumerate() {
        // Skip `nr` and the leader's pair.
        *v = u64_at(body, at + 8 + 16 * (k + 1))?;
    }
    CounterValues::new(&values[..nr - 1])
}

/// The leader's value in a `PERF_RECORD_READ` body: `pid, tid`, the read
/// values, the `sample_id_all` trailer. The samplers' read format is
/// either nothing (one value: the body is 32 bytes) or [`READ_FORMAT`]
/// (`nr`, then `nr` pairs of value and id, the leader first: 48 bytes or
/// more), so the length tells which.
fn read_value(body: &[u8]) -> Option<u64> {
    const PLAIN: usize = 8 + 8 + SAMPLE_ID_LEN;
    if body.len() == PLAIN {
        return u64_at(body, 8);
    }
    let nr = usize::try_from(u64_at(body, 8)?).ok()?;
    let len = nr.checked_mul(16)?.checked_add(PLAIN)?;
    (nr > 0 && body.len() == len).then_some(())?;
    u64_at(body, 16)
}

/// Parses a record body (without its 8-byte header) of type `ty`. `None`
/// for a record too short for its type (which the kernel never writes).
#[cfg(test)]
pub(crate) fn parse(ty: u32, misc: u16, body: &[u8]) -> Option<Record<'_>> {
    parse_with(ty, misc, body, None, false)
}

/// The samples' read values and call chain in `body`: the read values end
/// where the body does without a chain (`chain` is `None`: the read kind
/// is told by the length); with one, they are of the kind `chain` says and
/// the chain follows them. `None` when cut.
fn read_and_chain(body: &[u8], chain: Option<ReadKind>) -> Option<(CounterValues, &[u8])> {
    const AT: usize = 24;
    let Some(kind) = chain else {
        return Some((group_values(body, AT)?, &[]));
    };
    let read_len = match kind {
        ReadKind::Nothing => 0,
        ReadKind::Own => 8,
        ReadKind::Group => usize::try_from(u64_at(body, AT)?)
            .ok()?
            .checked_mul(16)?
            .checked_add(8)?,
    };
    let chain_at = AT.checked_add(read_len)?;
    let counters = group_values(body.get(..chain_at)?, AT)?;
    let nr = usize::try_from(u64_at(body, chain_at)?).ok()?;
    let start = chain_at + 8;
    let ips = body.get(start..start.checked_add(nr.checked_mul(8)?)?)?;
    Some((counters, ips))
}

/// Where a sample's call chain ends in `body`, given its addresses.
fn chain_end(body: &[u8], chain: &[u8]) -> usize {
    (chain.as_ptr() as usize - body.as_ptr() as usize) + chain.len()
}

/// [`parse`] for a record of a sampler that takes call chains after read
/// values of kind `chain` (`None`: a sampler without chains), and after
/// them user registers and a stack copy where `user`.
pub(crate) fn parse_with(
    ty: u32,
    misc: u16,
    body: &[u8],
    chain: Option<ReadKind>,
    user: bool,
) -> Option<Record<'_>> {
    let trailer_start = body.len().checked_sub(SAMPLE_ID_LEN);
    Some(match ty {
        RECORD_SAMPLE => {
            let (counters, chain_bytes) = read_and_chain(body, chain)?;
            let user = if user && chain.is_some() {
                user_copy(body, chain_end(body, chain_bytes))
            } else {
                None
            };
            let chain = chain_bytes;
            Record::Sample {
                user,
                ip: u64_at(body, 0)?,
                kernel: misc & MISC_CPUMODE_MASK == MISC_KERNEL,
                pid: u32_at(body, 8)?,
                tid: u32_at(body, 12)?,
                time: u64_at(body, 16)?,
                counters,
                chain,
            }
        }
        RECORD_EXIT => Record::Exit {
            pid: u32_at(body, 0)?,
            tid: u32_at(body, 8)?,
            time: u64_at(body, 16)?,
        },
        RECORD_READ => Record::ThreadCpu {
            pid: u32_at(body, 0)?,
            tid: u32_at(body, 4)?,
            ns: read_value(body)?,
            time: trailer_time(body)?,
        },
        RECORD_MMAP2 => Record::Mmap {
            pid: u32_at(body, 0)?,
            start: u64_at(body, 8)?,
            len: u64_at(body, 16)?,
            pgoff: u64_at(body, 24)?,
            // maj, min, ino, ino_generation (or the build id): 24 bytes;
            // prot, flags: 8 bytes; then the name.
            filename: c_str(body, 64, trailer_start?)?,
            file_id: if misc & MISC_MMAP_BUILD_ID == 0 {
                Some((
                    libc::makedev(u32_at(body, 32)?, u32_at(body, 36)?),
                    u64_at(body, 40)?,
                ))
            } else {
                None
            },
            time: trailer_time(body)?,
        },
        RECORD_MMAP => Record::Mmap {
            pid: u32_at(body, 0)?,
            start: u64_at(body, 8)?,
            len: u64_at(body, 16)?,
            pgoff: u64_at(body, 24)?,
            filename: c_str(body, 32, trailer_start?)?,
            file_id: None,
            time: trailer_time(body)?,
        },
        RECORD_FORK => Record::Fork {
            pid: u32_at(body, 0)?,
            ppid: u32_at(body, 4)?,
            tid: u32_at(body, 8)?,
            time: u64_at(body, 16)?,
        },
        RECORD_COMM if misc & MISC_COMM_EXEC != 0 => Record::Exec {
            pid: u32_at(body, 0)?,
            time: trailer_time(body)?,
        },
        RECORD_LOST => Record::Lost {
            count: u64_at(body, 8)?,
            time: trailer_time(body)?,
        },
        RECORD_THROTTLE => Record::Throttle {
            time: u64_at(body, 0)?,
        },
        _ => Record::Other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push32(v: &mut Vec<u8>, x: u32) {
        v.extend_from_slice(&x.to_ne_bytes());
    }
    fn push64(v: &mut Vec<u8>, x: u64) {
        v.extend_from_slice(&x.to_ne_bytes());
    }
    fn trailer(v: &mut Vec<u8>, pid: u32, time: u64) {
        push32(v, pid);
        push32(v, pid);
        push64(v, time);
    }

    #[test]
    fn sample() {
        let mut b = Vec::new();
        push64(&mut b, 0x401234);
        push32(&mut b, 42);
        push32(&mut b, 43);
        push64(&mut b, 1_000);
        assert_eq!(
            parse(RECORD_SAMPLE, 0, &b),
            Some(Record::Sample {
                pid: 42,
                tid: 43,
                ip: 0x401234,
                kernel: false,
                time: 1_000,
                counters: CounterValues::default(),
                chain: &[],
                user: None,
            })
        );
        // PERF_RECORD_MISC_KERNEL; PERF_RECORD_MISC_USER (2) is not.
        assert!(matches!(
            parse(RECORD_SAMPLE, 1, &b),
            Some(Record::Sample { kernel: true, .. })
        ));
        assert!(matches!(
            parse(RECORD_SAMPLE, 2, &b),
            Some(Record::Sample { kernel: false, .. })
        ));
        assert_eq!(parse(RECORD_SAMPLE, 0, &b[..20]), None);

        // With a group read: nr = 3 (the leader, then two members).
        let mut g = b.clone();
        push64(&mut g, 3);
        for (value, id) in [(500, 1), (7_000, 2), (9, 3)] {
            push64(&mut g, value);
            push64(&mut g, id);
        }
        assert!(matches!(
            parse(RECORD_SAMPLE, 0, &g),
            Some(Record::Sample { counters, .. }) if counters.as_slice() == [7_000, 9]
        ));
        // The sampler's own count alone (no group): no counters.
        let mut own = b.clone();
        push64(&mut own, 500);
        assert!(matches!(
            parse(RECORD_SAMPLE, 0, &own),
            Some(Record::Sample { counters, .. }) if counters.is_empty()
        ));
        // Cut inside the group: not read as a sample with wrong values.
        assert_eq!(parse(RECORD_SAMPLE, 0, &g[..g.len() - 8]), None);
    }

    #[test]
    fn sample_with_a_call_chain_after_each_read_kind() {
        let mut head = Vec::new();
        push64(&mut head, 0x401234);
        push32(&mut head, 42);
        push32(&mut head, 43);
        push64(&mut head, 1_000);
        let chain = [PERF_CONTEXT_USER, 0x401234, 0x401300, 0x401400];
        let mut chain_bytes = Vec::new();
        push64(&mut chain_bytes, chain.len() as u64);
        for a in chain {
            push64(&mut chain_bytes, a);
        }
        let mut group = Vec::new();
        push64(&mut group, 2);
        for (value, id) in [(500, 1), (7_000, 2)] {
            push64(&mut group, value);
            push64(&mut group, id);
        }
        for (kind, read, want) in [
            (ReadKind::Nothing, Vec::new(), Vec::<u64>::new()),
            (ReadKind::Own, 500u64.to_ne_bytes().to_vec(), Vec::new()),
            (ReadKind::Group, group.clone(), vec![7_000]),
        ] {
            let body = [head.clone(), read, chain_bytes.clone()].concat();
            match parse_with(RECORD_SAMPLE, 0, &body, Some(kind), false) {
                Some(Record::Sample {
                    ip,
                    counters,
                    chain: got,
                    ..
                }) => {
                    assert_eq!(ip, 0x401234);
                    assert_eq!(counters.as_slice(), &want[..], "{kind:?}");
                    assert_eq!(chain_addresses(got).collect::<Vec<_>>(), chain, "{kind:?}");
                }
                other => panic!("{kind:?}: {other:?}"),
            }
            // Cut inside the chain, or a chain longer than the record.
            assert_eq!(
                parse_with(RECORD_SAMPLE, 0, &body[..body.len() - 8], Some(kind), false),
                None
            );
            let mut long = body.clone();
            let at = long.len() - chain_bytes.len();
            long[at..at + 8].copy_from_slice(&u64::MAX.to_ne_bytes());
            assert_eq!(parse_with(RECORD_SAMPLE, 0, &long, Some(kind), false), None);
        }
        // An empty chain.
        let mut body = head.clone();
        push64(&mut body, 0);
        assert!(matches!(
            parse_with(RECORD_SAMPLE, 0, &body, Some(ReadKind::Nothing), false),
            Some(Record::Sample { chain: [], .. })
        ));
    }

    /// After the chain, a sampler with user stacks gets the registers (ABI,
    /// bp, sp, ip) and the stack (size, bytes, the size really copied):
    /// the copy is cut to what was copied; a kernel thread's sample (ABI
    /// 0) has none; a cut record is not a sample.
    #[test]
    fn sample_with_user_registers_and_stack_after_the_chain() {
        let mut body = Vec::new();
        push64(&mut body, 0x401234);
        push32(&mut body, 42);
        push32(&mut body, 43);
        push64(&mut body, 1_000);
        push64(&mut body, 2);
        push64(&mut body, PERF_CONTEXT_USER);
        push64(&mut body, 0x401234);
        let chain_end = body.len();
        push64(&mut body, 2); // PERF_SAMPLE_REGS_ABI_64
        for reg in [0x7ff0_0100u64, 0x7ff0_0000, 0x401234] {
            push64(&mut body, reg);
        }
        push64(&mut body, 32);
        body.extend((0u8..32).collect::<Vec<_>>());
        push64(&mut body, 24);
        match parse_with(RECORD_SAMPLE, 0, &body, Some(ReadKind::Nothing), true) {
            Some(Record::Sample {
                user: Some(user),
                chain,
                ..
            }) => {
                assert_eq!(
                    (user.bp, user.sp, user.ip),
                    (0x7ff0_0100, 0x7ff0_0000, 0x401234)
                );
                assert_eq!(user.stack, &(0u8..24).collect::<Vec<_>>()[..]);
                assert_eq!(chain_addresses(chain).count(), 2);
            }
            other => panic!("{other:?}"),
        }
        // Without asking for user stacks, the same bytes are not read.
        assert!(matches!(
            parse_with(RECORD_SAMPLE, 0, &body, Some(ReadKind::Nothing), false),
            Some(Record::Sample { user: None, .. })
        ));
        // A kernel thread: ABI 0, no registers, an empty stack.
        let mut kthread = body[..chain_end].to_vec();
        push64(&mut kthread, 0);
        push64(&mut kthread, 0);
        assert!(matches!(
            parse_with(RECORD_SAMPLE, 0, &kthread, Some(ReadKind::Nothing), true),
            Some(Record::Sample { user: None, .. })
        ));
        // Cut inside the stack: the sample keeps its chain, not the copy.
        assert!(matches!(
            parse_with(
                RECORD_SAMPLE,
                0,
                &body[..body.len() - 16],
                Some(ReadKind::Nothing),
                true
            ),
            Some(Record::Sample { user: None, .. })
        ));
    }

    #[test]
    fn thread_cpu_plain_and_grouped() {
        // read_format 0: pid, tid, value, trailer.
        let mut b = Vec::new();
        push32(&mut b, 10);
        push32(&mut b, 12);
        push64(&mut b, 345_678);
        trailer(&mut b, 10, 88);
        let want = Some(Record::ThreadCpu {
            pid: 10,
            tid: 12,
            ns: 345_678,
            time: 88,
        });
        assert_eq!(parse(RECORD_READ, 0, &b), want);
        // GROUP | ID: nr, then (value, id) pairs, the leader first.
        let mut g = Vec::new();
        push32(&mut g, 10);
        push32(&mut g, 12);
        push64(&mut g, 2);
        for (value, id) in [(345_678, 1), (9_000, 2)] {
            push64(&mut g, value);
            push64(&mut g, id);
        }
        trailer(&mut g, 10, 88);
        assert_eq!(parse(RECORD_READ, 0, &g), want);
        // A group cut short, or an nr that does not fit: unreadable.
        assert_eq!(parse(RECORD_READ, 0, &g[..g.len() - 8]), None);
        assert_eq!(parse(RECORD_READ, 0, &b[..24]), None);
    }

    #[test]
    fn exit() {
        let mut b = Vec::new();
        for x in [10, 1, 12, 10] {
            push32(&mut b, x);
        }
        push64(&mut b, 77);
        trailer(&mut b, 10, 77);
        assert_eq!(
            parse(RECORD_EXIT, 0, &b),
            Some(Record::Exit {
                pid: 10,
                tid: 12,
                time: 77
            })
        );
    }

    #[test]
    fn mmap2_with_padded_name() {
        let mut b = Vec::new();
        push32(&mut b, 7);
        push32(&mut b, 7);
        push64(&mut b, 0x7f00_0000_1000);
        push64(&mut b, 0x2000);
        push64(&mut b, 0x1000);
        push32(&mut b, 0xfe); // maj
        push32(&mut b, 1); // min
        push64(&mut b, 326_970); // ino
        push64(&mut b, 0); // generation
        push32(&mut b, 5); // prot
        push32(&mut b, 2); // flags
        b.extend_from_slice(b"/lib/libz.so\0\0\0\0");
        trailer(&mut b, 7, 99);
        assert_eq!(
            parse(RECORD_MMAP2, 0, &b),
            Some(Record::Mmap {
                pid: 7,
                start: 0x7f00_0000_1000,
                len: 0x2000,
                pgoff: 0x1000,
                filename: b"/lib/libz.so",
                file_id: Some((libc::makedev(0xfe, 1), 326_970)),
                time: 99
            })
        );
        // With a build ID where the device and inode would be: none.
        match parse(RECORD_MMAP2, MISC_MMAP_BUILD_ID, &b) {
            Some(Record::Mmap { file_id, .. }) => assert_eq!(file_id, None),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn comm_is_exec_only_with_the_flag() {
        let mut b = Vec::new();
        push32(&mut b, 9);
        push32(&mut b, 9);
        b.extend_from_slice(b"python3\0");
        trailer(&mut b, 9, 5);
        assert_eq!(
            parse(RECORD_COMM, MISC_COMM_EXEC, &b),
            Some(Record::Exec { pid: 9, time: 5 })
        );
        assert_eq!(parse(RECORD_COMM, 0, &b), Some(Record::Other));
    }

    #[test]
    fn fork_lost_throttle() {
        let mut b = Vec::new();
        for x in [10, 1, 10, 1] {
            push32(&mut b, x);
        }
        push64(&mut b, 77);
        trailer(&mut b, 10, 77);
        assert_eq!(
            parse(RECORD_FORK, 0, &b),
            Some(Record::Fork {
                pid: 10,
                ppid: 1,
                tid: 10,
                time: 77
            })
        );
        let mut b = Vec::new();
        push64(&mut b, 1234); // id
        push64(&mut b, 17); // lost
        trailer(&mut b, 0, 88);
        assert_eq!(
            parse(RECORD_LOST, 0, &b),
            Some(Record::Lost {
                count: 17,
                time: 88
            })
        );
        let mut b = Vec::new();
        push64(&mut b, 66);
        push64(&mut b, 1);
        push64(&mut b, 1);
        trailer(&mut b, 0, 66);
        assert_eq!(
            parse(RECORD_THROTTLE, 0, &b),
            Some(Record::Throttle { time: 66 })
        );
    }

    #[test]
    fn truncated_records_are_none_not_panics() {
        for ty in [
            RECORD_SAMPLE,
            RECORD_EXIT,
            RECORD_MMAP,
            RECORD_MMAP2,
            RECORD_LOST,
            RECORD_FORK,
            RECORD_THROTTLE,
        ] {
            for len in 0..40 {
                let _ = parse(ty, MISC_COMM_EXEC, &vec![0u8; len]);
            }
        }
        assert_eq!(parse(RECORD_COMM, MISC_COMM_EXEC, &[0u8; 4]), None);
    }
}
