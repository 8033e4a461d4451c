//! Opening the sampling events: per online CPU, one `cpu-clock` sampler
//! and one side-band `dummy` event (always on) that records mappings, forks
//! and execs. The samplers include kernel mode when asked and allowed (a
//! refusal on permission grounds falls back to user mode only). They run
//! from the start (windows are time ranges) or are created disabled and
//! switched by ioctl, as [`crate::WindowSwitch`] says.
//!
//! Both observe the target with `inherit`, so every process and thread it
//! starts is covered: each gets its own copy of every event, whose
//! samples go to the original's ring buffer. The samplers set
//! `inherit_stat`, so a copy writes its count (the thread's CPU time on
//! that CPU) when its thread exits, and read with each sample (where the
//! kernel allows it with `inherit`, Linux 6.12), which keeps the kernel
//! from swapping two threads' copies at a switch between them: see
//! `crate::coverage` for why both matter to short-lived threads. A disabled event emits no side-band records, which is
//! why mappings come from the separate always-enabled dummy event (what
//! `perf record --delay` does too). Both stamp records with
//! `CLOCK_MONOTONIC`, so records from different buffers can be put in one
//! order and samples can be matched to windows by time.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use lotus_core::Error as CoreError;
use perf_event::events::Software;
use perf_event::{Builder, Clock, Counter, ReadFormat, Sampler};

use crate::counting::CounterKind;
use crate::error::{event_io, is_permission, mmap_error, open_error};
use crate::records;
use crate::records::{ReadKind, MAX_CHAIN, READ_FORMAT, SAMPLE_TYPE, SAMPLE_TYPE_READ};
use crate::sample_read::{SampleCounters, UnsupportedCounters};
use perf_event::SampleFlag;

/// Ring buffer data size per CPU for samples: 256 KiB holds about 5,000
/// samples, half a second at 10 kHz, while the drain thread reads every
/// 25 ms. Sized so that both buffers fit the default unprivileged
/// `perf_event_mlock_kb` allowance (516 KiB per CPU).
pub(crate) const SAMPLE_BUFFER: usize = 256 * 1024;
/// The ring buffer of a sampler that copies user stacks (`--stacks
/// dwarf`): each sample is [`records::USER_STACK_BYTES`] larger, so the
/// buffer is too, to hold as many samples between two drains (perf
/// record's `--call-graph dwarf` takes 512 KiB plus a page by default).
/// For root only ([`buffer_for`]); the least a CPU gets.
pub(crate) const USER_STACK_BUFFER: usize = 2 * 1024 * 1024;
/// The most a CPU's sampler with user stacks gets ([`buffer_for`]).
pub(crate) const USER_STACK_BUFFER_MAX: usize = 8 * 1024 * 1024;
/// All CPUs' samplers with user stacks together, at most (past
/// [`USER_STACK_BUFFER`] each).
pub(crate) const USER_STACK_BUFFERS_TOTAL: usize = 64 * 1024 * 1024;
/// Ring buffer data size per CPU for side-band records.
pub(crate) const SIDEBAND_BUFFER: usize = 64 * 1024;

/// The opened events.
pub(crate) struct Streams {
    /// One `cpu-clock` sampler per CPU, disabled.
    pub samplers: Vec<Sampler>,
    /// One side-band event per CPU, enabled.
    pub sideband: Vec<Sampler>,
    /// Duplicates of the samplers' descriptors, to switch them from the
    /// control thread while the drain thread owns the samplers.
    pub switch: Switch,
    /// Whether the samplers sample kernel mode too.
    pub kernel: bool,
    /// Whether the samplers read with each sample (Linux 6.12 or later),
    /// which keeps each thread's timer its own (see `crate::coverage`).
    pub separate_threads: bool,
    /// The members of the samplers' counter groups (kept open).
    pub members: Vec<Counter>,
    /// The counters read with each sample.
    pub counters: SampleCounters,
    /// Where the samplers take call chains: after read values of this
    /// kind (the same on every CPU).
    pub chain: Option<ReadKind>,
    /// Call chains were asked for and the kernel refused them: its
    /// reason (the samplers opened without them).
    pub chain_refused: Option<String>,
    /// The samplers copy each sample's user registers and stack
    /// (`--stacks dwarf`), after the chain.
    pub user_stacks: bool,
    /// User stacks were asked for and the kernel refused them: its reason
    /// (the samplers take frame-pointer chains instead).
    pub user_refused: Option<String>,
    /// How the samplers were opened, to open more of the same.
    pub attrs: SamplerAttrs,
}

/// Enables and disables a set of events by ioctl, and reads their counts.
#[derive(Debug)]
pub(crate) struct Switch {
    fds: Vec<OwnedFd>,
    /// The events read their counter group ([`READ_FORMAT`]): a read
    /// gives `nr`, then value and id pairs, the leader's first.
    group: bool,
    /// For an attached tree ([`Switch::adopt`]): each descriptor's
    /// process and ring buffer (CPU), one per `fds`; empty otherwise (a
    /// descriptor per CPU, in order).
    owners: Vec<(u32, u32)>,
}

impl Switch {
    /// `PERF_EVENT_IOC_ENABLE` on every event (and, through `inherit`, on
    /// every copy in the target's descendants).
    pub(crate) fn enable(&self) -> Result<(), CoreError> {
        for fd in &self.fds {
            // SAFETY: a plain ioctl on a descriptor this struct owns.
            if unsafe { perf_event_open_sys::ioctls::ENABLE(fd.as_raw_fd(), 0) } < 0 {
                return Err(event_io(
                    "enabling the samplers",
                    io::Error::last_os_error(),
                ));
            }
        }
        Ok(())
    }

    /// The descriptors so far belong to process `pid`, one per ring
    /// buffer in order; more are added with [`Switch::add`]. Then
    /// [`Switch::counts`] sums by ring buffer and
    /// [`Switch::counts_by_process`] by process.
    pub(crate) fn adopt(&mut self, pid: u32) {
        self.owners = (0..self.fds.len() as u32).map(|i| (pid, i)).collect();
    }

    /// One more event, of process `pid`, whose records go to ring buffer
    /// `stream` (see [`Switch::adopt`]).
    pub(crate) fn add(&mut self, fd: OwnedFd, pid: u32, stream: u32) {
        self.fds.push(fd);
        self.owners.push((pid, stream));
    }

    /// What each ring buffer's events counted ([`Switch::each_count`]),
    /// summed by ring buffer: one figure per CPU, in order. `None` if one
    /// cannot be read.
    pub(crate) fn counts(&self) -> Option<Vec<u64>> {
        let each = self.each_count()?;
        if self.owners.is_empty() {
            return Some(each);
        }
        let streams = self
            .owners
            .iter()
            .map(|o| o.1 as usize + 1)
            .max()
            .unwrap_or(0);
        let mut sums = vec![0u64; streams];
        for (&(_, s), n) in self.owners.iter().zip(each) {
            sums[s as usize] = sums[s as usize].saturating_add(n);
        }
        Some(sums)
    }

    /// For an attached tree: what the events opened on each process's
    /// threads counted, summed by process (its threads that were there at
    /// the attach, with all they started since); `None` otherwise, or if
    /// one cannot be read.
    pub(crate) fn counts_by_process(&self) -> Option<Vec<(u32, u64)>> {
        if self.owners.is_empty() {
            return None;
        }
        let mut sums: Vec<(u32, u64)> = Vec::new();
        for (&(pid, _), n) in self.owners.iter().zip(self.each_count()?) {
            match sums.iter_mut().find(|(p, _)| *p == pid) {
                Some((_, sum)) => *sum = sum.saturating_add(n),
                None => sums.push((pid, n)),
            }
        }
        Some(sums)
    }

    /// What each event counted (its own and its inherited copies', those
    /// of exited threads included): for the samplers, the nanoseconds of
    /// CPU time the target ran on that CPU while sampling was on. `None`
    /// if one cannot be read.
    fn each_count(&self) -> Option<Vec<u64>> {
        // nr, then (value, id) for the leader and every member.
        let mut buf = [0u64; 2 + 2 * (1 + lotus_samples::MAX_COUNTERS)];
        self.fds
            .iter()
            .map(|fd| {
                // SAFETY: reads at most the buffer's size into it, from a
                // descriptor this struct owns.
                let n = unsafe {
                    libc::read(
                        fd.as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        std::mem::size_of_val(&buf),
                    )
                };
                let words = usize::try_from(n).ok()? / 8;
                let at = usize::from(self.group);
                (words > at).then(|| buf[at])
            })
            .collect()
    }

    /// `PERF_EVENT_IOC_DISABLE` on every event. Tries them all even when one
    /// fails, so a window never stays half open.
    pub(crate) fn disable(&self) -> Result<(), CoreError> {
        let mut first_err = None;
        for fd in &self.fds {
            // SAFETY: a plain ioctl on a descriptor this struct owns.
            if unsafe { perf_event_open_sys::ioctls::DISABLE(fd.as_raw_fd(), 0) } < 0 {
                first_err.get_or_insert_with(io::Error::last_os_error);
            }
        }
        match first_err {
            None => Ok(()),
            Some(e) => Err(event_io("disabling the samplers", e)),
        }
    }
}

/// The online CPUs, from `/sys/devices/system/cpu/online` (`0-3,6,8-9`).
pub(crate) fn online_cpus() -> Vec<usize> {
    if let Ok(text) = std::fs::read_to_string("/sys/devices/system/cpu/online") {
        if let Some(cpus) = parse_cpu_list(&text) {
            if !cpus.is_empty() {
                return cpus;
            }
        }
    }
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    (0..usize::try_from(n).unwrap_or(1).max(1)).collect()
}

fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    Some(cpus)
}

/// The kernel's limit on sampling frequency
/// (`/proc/sys/kernel/perf_event_max_sample_rate`).
pub(crate) fn max_sample_rate() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The most call-chain entries to ask the kernel for: [`MAX_CHAIN`], or
/// less where `kernel.perf_event_max_stack` is set lower (asking for more
/// than it allows is refused with `EOVERFLOW`).
pub(crate) fn max_chain() -> u16 {
    chain_cap(
        std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack")
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok()),
    )
}

fn chain_cap(sysctl: Option<u64>) -> u16 {
    match sysctl {
        Some(n) => u16::try_from(n).unwrap_or(u16::MAX).clamp(1, MAX_CHAIN),
        None => MAX_CHAIN,
    }
}

/// Opens the samplers and side-band events on `pid` for every CPU in
/// `cpus`, sampling at `frequency_hz`; the samplers start enabled when
/// `sampling` is true, and sample kernel mode too when `kernel` is true
/// and the kernel allows it ([`Streams::kernel`] says whether it did).
/// Each sampler reads `counters` with every sample where the kernel
/// allows it; where it does not, the samplers open without them and
/// [`Streams::counters`] says why. With `extra.separate`, the samplers
/// read with each sample anyway, where the kernel allows it, to keep each
/// thread's timer its own ([`crate::ThreadTimers`]); with `extra.chains`
/// they take the call chain ([`Streams::chain`]).
pub(crate) fn open(
    pid: u32,
    cpus: &[usize],
    frequency_hz: u64,
    sampling: bool,
    kernel: bool,
    counters: &[CounterKind],
    extra: Extra,
) -> Result<Streams, CoreError> {
    let open = |counters: &[CounterKind]| {
        open_with(pid, cpus, frequency_hz, sampling, kernel, counters, extra)
    };
    match open(counters)? {
        Ok(streams) => Ok(streams),
        Err(reason) => {
            let mut streams = open(&[])?.map_err(|reason| CoreError::Other {
                backend: crate::BACKEND.into(),
                message: reason,
            })?;
            streams.counters.unsupported = Some(UnsupportedCounters {
                asked: counters.to_vec(),
                reason,
            });
            Ok(streams)
        }
    }
}

/// What else the samplers take with each sample.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Extra {
    /// Read their own count, where the kernel allows it, to keep each
    /// thread's timer its own ([`crate::ThreadTimers`]).
    pub separate: bool,
    /// The call chain ([`crate::CallStacks::FramePointers`]).
    pub chains: bool,
    /// With the chain, the user registers and stack, for unwinding by the
    /// unwind tables ([`crate::CallStacks::Dwarf`]): the chain keeps the
    /// kernel's frames only.
    pub user_stacks: bool,
}

/// [`open`]; the inner `Err` is the kernel's refusal of the counters
/// (everything opened is closed again then).
fn open_with(
    pid: u32,
    cpus: &[usize],
    frequency_hz: u64,
    sampling: bool,
    mut kernel: bool,
    counters: &[CounterKind],
    Extra {
        separate,
        mut chains,
        mut user_stacks,
    }: Extra,
) -> Result<Result<Streams, String>, CoreError> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| CoreError::Other {
        backend: crate::BACKEND.into(),
        message: format!("pid {pid} out of range"),
    })?;
    let mut samplers = Vec::with_capacity(cpus.len());
    let mut sideband = Vec::with_capacity(cpus.len());
    let mut fds = Vec::with_capacity(cpus.len());
    let mut members = Vec::with_capacity(cpus.len() * counters.len());
    let read = !counters.is_empty();
    let mut own_read = separate;
    let mut chain_kind: Option<ReadKind> = None;
    let mut chain_refused = None;
    let mut user_refused = None;
    // Registers are read for x86-64 only (the unwinder's one architecture).
    if !cfg!(target_arch = "x86_64") && user_stacks {
        user_stacks = false;
        user_refused = Some("user stacks are unwound on x86-64 only".to_string());
    }
    user_stacks &= chains;
    let max_stack = max_chain();
    for &cpu in cpus {
        let what = format!("cpu-clock sampling of pid {pid} on CPU {cpu}");
        let build = |kernel: bool, own_read: bool, chains: bool, user: bool| {
            let attrs = SamplerAttrs {
                frequency_hz,
                sampling,
                kernel,
                own_read,
                chains,
                user_stacks: user,
                read,
                max_stack,
            };
            open_sampler(pid, cpu, &attrs)
        };
        let mut counter = build(kernel, own_read, chains, user_stacks);
        // Kernel mode needs perf_event_paranoid <= 1 or CAP_PERFMON:
        // without, sample user mode only (on every CPU: the first refusal
        // decides).
        if kernel && matches!(&counter, Err(e) if is_permission(e)) {
            kernel = false;
            counter = build(false, own_read, chains, user_stacks);
        }
        // User stacks refused: frame-pointer chains instead (the first
        // CPU decides, as below).
        if user_stacks && chain_kind.is_none() {
            let refused;
            (counter, refused) =
                without_chains_if_refused(counter, || build(kernel, own_read, chains, false));
            if let Some(reason) = refused {
                user_stacks = false;
                user_refused = Some(reason);
            }
        }
        // Call chains refused: the samples go on without them (the first
        // CPU decides, so that every sampler's records read the same).
        if chains && chain_kind.is_none() {
            let refused;
            (counter, refused) =
                without_chains_if_refused(counter, || build(kernel, own_read, false, false));
            if let Some(reason) = refused {
                chains = false;
                user_stacks = false;
                chain_refused = Some(reason);
            }
        }
        // Reading with each sample of an inherited event needs Linux 6.12.
        if !read && own_read && matches!(&counter, Err(e) if e.raw_os_error() == Some(libc::EINVAL))
        {
            own_read = false;
            counter = build(kernel, false, chains, user_stacks);
        }
        let kind = if read {
            ReadKind::Group
        } else if own_read {
            ReadKind::Own
        } else {
            ReadKind::Nothing
        };
        if chains && *chain_kind.get_or_insert(kind) != kind {
            // Never so far: the first CPU's fallback holds for the rest.
            return Err(CoreError::Other {
                backend: crate::BACKEND.into(),
                message: format!("{what}: the samplers read differently on different CPUs"),
            });
        }
        let mut counter = match counter {
            Ok(c) => c,
            Err(e) if read && plain_sampler_opens(pid, cpu, kernel) => {
                return Ok(Err(format!(
                    "reading counters with each sample of inherited events: {e} \
                     (the kernel needs PERF_SAMPLE_READ with inherit, Linux 6.12 or later)"
                )));
            }
            Err(e) => return Err(open_error(&what, e)),
        };
        for &kind in counters {
            match member(kind, pid, cpu, kernel).build_with_group(&mut counter) {
                Ok(m) => members.push(m),
                Err(e) => return Ok(Err(counter_refused(kind, &e))),
            }
        }
        let sampler = counter
            .sampled(buffer_for(user_stacks))
            .map_err(|e| mmap_error(&what, e))?;
        // Switched by ioctl from the control thread while the drain thread
        // owns the sampler (each window in the ioctl mode; sampling stopped
        // for a process's unsampled calls in either): keep a duplicate
        // descriptor.
        // SAFETY: the descriptor is open for as long as `sampler` lives,
        // and it is only borrowed here to duplicate it.
        let dup = unsafe { BorrowedFd::borrow_raw(sampler.as_raw_fd()) }
            .try_clone_to_owned()
            .map_err(|e| open_error(&format!("a second descriptor for {what}"), e))?;
        fds.push(dup);
        samplers.push(sampler);

        let what = format!("side-band tracking (mmap, fork, exec) of pid {pid} on CPU {cpu}");
        let counter = open_sideband(pid, cpu).map_err(|e| open_error(&what, e))?;
        sideband.push(
            counter
                .sampled(SIDEBAND_BUFFER)
                .map_err(|e| mmap_error(&what, e))?,
        );
    }
    Ok(Ok(Streams {
        samplers,
        sideband,
        switch: Switch {
            fds,
            group: read,
            owners: Vec::new(),
        },
        kernel,
        separate_threads: read || own_read,
        members,
        counters: SampleCounters {
            read: counters.to_vec(),
            unsupported: None,
        },
        chain: chain_kind,
        chain_refused,
        user_stacks,
        user_refused,
        attrs: SamplerAttrs {
            frequency_hz,
            sampling,
            kernel,
            own_read,
            chains,
            user_stacks,
            read,
            max_stack,
        },
    }))
}

/// How a collection's samplers are opened: what [`open`] settled on the
/// first CPU (fallbacks included), to open more of the same on other
/// threads ([`open_more`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SamplerAttrs {
    /// The sampling frequency (Hz).
    pub frequency_hz: u64,
    /// The samplers start enabled.
    pub sampling: bool,
    /// Kernel mode is sampled.
    pub kernel: bool,
    /// Each sample reads the sampler's own count (separate thread timers).
    pub own_read: bool,
    /// Each sample takes the call chain.
    pub chains: bool,
    /// And the user registers and stack.
    pub user_stacks: bool,
    /// Each sample reads the counter group.
    pub read: bool,
    /// The most call-chain entries asked for.
    pub max_stack: u16,
}

/// One `cpu-clock` sampler on `pid` (a process or a thread, with what it
/// starts later: `inherit`) on `cpu`, as `a` says.
fn open_sampler(pid: libc::pid_t, cpu: usize, a: &SamplerAttrs) -> io::Result<Counter> {
    let mut b = Builder::new(Software::CPU_CLOCK);
    b.observe_pid(pid)
        .one_cpu(cpu)
        .inherit(true)
        .exclude_kernel(!a.kernel)
        .exclude_hv(true)
        .sample_frequency(a.frequency_hz)
        .sample(SAMPLE_TYPE)
        .sample_id_all(true)
        // Each thread's copy writes its count when the thread
        // exits (PERF_RECORD_READ): its exact CPU time, against
        // which its samples are checked (see `crate::coverage`).
        .inherit_stat(true)
        .clockid(Clock::MONOTONIC)
        // A wakeup per quarter of the buffer, at most 512 KiB:
        // a larger buffer is headroom, not longer waits.
        .wakeup_watermark((buffer_for(a.user_stacks) / 4).min(512 << 10))
        .enabled(a.sampling);
    // Call chains follow every other field of a sample: their
    // own flag, the kernel asked for no more than MAX_CHAIN frames.
    let chain = if a.chains && a.user_stacks {
        // The kernel's frames from the chain, the user's from the
        // copy of the stack (their frame pointers are not trusted).
        b.sample_max_stack(a.max_stack)
            .exclude_callchain_user(true)
            .sample_regs_user(records::USER_REGS_X86_64)
            .sample_stack_user(user_stack_bytes(buffer_for(true)));
        SampleFlag::CALLCHAIN | SampleFlag::REGS_USER | SampleFlag::STACK_USER
    } else if a.chains {
        b.sample_max_stack(a.max_stack);
        SampleFlag::CALLCHAIN
    } else {
        SampleFlag::empty()
    };
    b.sample(SAMPLE_TYPE | chain);
    if a.read {
        b.sample(SAMPLE_TYPE_READ | chain).read_format(READ_FORMAT);
    } else {
        // The count alone (the crate's default adds the enabled
        // and running times): what the thread's exit record and
        // `Switch::counts` read.
        b.read_format(ReadFormat::empty());
        if a.own_read {
            // Each sample reads its thread's count too: unused,
            // but an inherited event that does keeps the kernel
            // from swapping two threads' copies at a switch
            // between them (Linux 6.12 or later), which would let
            // a thread that exits take away the timer progress
            // of the one that ran before it (see
            // `crate::coverage`).
            b.sample(SAMPLE_TYPE_READ | chain);
        }
    }
    b.build()
}

/// A counter of `kind` read with each sample, to join a sampler's group
/// on `pid` and `cpu` (kernel side too when `kernel`).
fn member(kind: CounterKind, pid: libc::pid_t, cpu: usize, kernel: bool) -> Builder<'static> {
    let mut b = kind.builder();
    b.observe_pid(pid)
        .one_cpu(cpu)
        .inherit(true)
        // Context switches happen in the kernel: counted there only.
        .exclude_kernel(!kernel && kind != CounterKind::ContextSwitches)
        .exclude_hv(true)
        // The kernel groups only events on the same clock.
        .clockid(Clock::MONOTONIC)
        // The leader's state gates the group.
        .enabled(true);
    b
}

/// The side-band event on `pid` and `cpu`: mappings, forks, execs and
/// exits of it and of what it starts, always on.
fn open_sideband(pid: libc::pid_t, cpu: usize) -> io::Result<Counter> {
    Builder::new(Software::DUMMY)
        .observe_pid(pid)
        .one_cpu(cpu)
        .inherit(true)
        .exclude_kernel(true)
        .exclude_hv(true)
        .mmap(true)
        .mmap2(true)
        .comm(true)
        .comm_exec(true)
        .task(true)
        .sample(SAMPLE_TYPE)
        .sample_id_all(true)
        .clockid(Clock::MONOTONIC)
        .enabled(true)
        .build()
}

/// The events of one more thread on one CPU, as [`open`] opened the
/// first's (`attrs`, reading `counters` with each sample): its sampler,
/// the sampler's group members, and its side-band event. None has a ring
/// buffer of its own: the caller redirects them ([`redirect`]).
pub(crate) fn open_more(
    tid: u32,
    cpu: usize,
    attrs: &SamplerAttrs,
    counters: &[CounterKind],
) -> io::Result<(Counter, Vec<Counter>, Counter)> {
    let tid = libc::pid_t::try_from(tid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    let mut leader = open_sampler(tid, cpu, attrs)?;
    let mut members = Vec::with_capacity(counters.len());
    for &kind in counters {
        members.push(member(kind, tid, cpu, attrs.kernel).build_with_group(&mut leader)?);
    }
    Ok((leader, members, open_sideband(tid, cpu)?))
}

/// Sends what event `fd` records into the ring buffer of event `into`
/// (`PERF_EVENT_IOC_SET_OUTPUT`: the same CPU, the same clock).
pub(crate) fn redirect(fd: &impl AsRawFd, into: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: a plain ioctl on two open perf event descriptors.
    let r = unsafe { perf_event_open_sys::ioctls::SET_OUTPUT(fd.as_raw_fd(), into.as_raw_fd()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The ring buffer of a sampler, with user stacks or not: the larger
/// buffer for user stacks only as root (whose locked memory the kernel
/// does not cap); an unprivileged user's `perf_event_mlock_kb` (516 KiB
/// by default) holds [`SAMPLE_BUFFER`] and the side band, not more. As
/// root, up to [`USER_STACK_BUFFER_MAX`] a CPU while all CPUs' buffers
/// together stay within [`USER_STACK_BUFFERS_TOTAL`] (a 2-CPU machine
/// gets 8 MiB each, 0.4 s of samples at 2 kHz; 64 CPUs 2 MiB each).
pub(crate) fn buffer_for(user_stacks: bool) -> usize {
    // SAFETY: geteuid has no preconditions.
    if !(user_stacks && unsafe { libc::geteuid() } == 0) {
        return SAMPLE_BUFFER;
    }
    let cpus = online_cpus().len().max(1);
    let share = (USER_STACK_BUFFERS_TOTAL / cpus).clamp(USER_STACK_BUFFER, USER_STACK_BUFFER_MAX);
    // perf wants a power of two: the largest that fits the share.
    1 << (usize::BITS - 1 - share.leading_zeros())
}

/// The fewest samples with user stacks a sampler's ring buffer holds.
const STACKS_PER_BUFFER: usize = 8;

/// The user stack copied with each sample of a sampler whose ring buffer
/// holds `buffer` bytes: [`records::USER_STACK_BYTES`], less where the
/// buffer would hold under [`STACKS_PER_BUFFER`] such samples (an
/// unprivileged user's 256 KiB, [`SAMPLE_BUFFER`]: 32 KiB).
pub(crate) fn user_stack_bytes(buffer: usize) -> u32 {
    let fits = u32::try_from(buffer / STACKS_PER_BUFFER).unwrap_or(u32::MAX) & !7;
    fits.min(records::USER_STACK_BYTES)
}

/// `built`, a sampler opened with call chains; where the kernel refused
/// it (other than on permission grounds, which lotus answers by sampling
/// user mode only) and the same sampler opens without chains, that one
/// instead, with the kernel's refusal. A run whose chains are refused thus
/// keeps its samples.
fn without_chains_if_refused<T>(
    built: io::Result<T>,
    without: impl FnOnce() -> io::Result<T>,
) -> (io::Result<T>, Option<String>) {
    match built {
        Err(e) if !is_permission(&e) => match without() {
            Ok(c) => (Ok(c), Some(e.to_string())),
            Err(_) => (Err(e), None),
        },
        other => (other, None),
    }
}

/// Whether a sampler without a group read opens: tells a refused group
/// read from a sampler the kernel refuses anyway.
fn plain_sampler_opens(pid: libc::pid_t, cpu: usize, kernel: bool) -> bool {
    Builder::new(Software::CPU_CLOCK)
        .observe_pid(pid)
        .one_cpu(cpu)
        .inherit(true)
        .exclude_kernel(!kernel)
        .exclude_hv(true)
        .sample_frequency(1)
        .sample(SAMPLE_TYPE)
        .build()
        .is_ok()
}

/// The kernel's refusal of counter `kind`, for the user.
fn counter_refused(kind: CounterKind, e: &io::Error) -> String {
    let hint = if kind.is_hardware()
        && matches!(
            e.raw_os_error(),
            Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV)
        ) {
        ": no hardware PMU visible to this kernel"
    } else if is_permission(e) {
        ": counting needs kernel.perf_event_paranoid <= 1 or CAP_PERFMON"
    } else {
        ""
    };
    format!("{}: {e}{hint}", kind.name())
}

/// Raises the soft limit on open files towards the hard one when `needed`
/// descriptors would not fit (a sampler and a side-band buffer per CPU add
/// up on machines with hundreds of CPUs).
pub(crate) fn ensure_open_files(needed: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return;
    }
    let needed = needed as libc::rlim_t;
    if lim.rlim_cur == libc::RLIM_INFINITY || lim.rlim_cur >= needed {
        return;
    }
    lim.rlim_cur = if lim.rlim_max == libc::RLIM_INFINITY {
        needed
    } else {
        needed.min(lim.rlim_max)
    };
    // SAFETY: lim is a valid rlimit; failure leaves the limit as it was
    // (the open then fails with EMFILE, which says to raise `ulimit -n`).
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock the records are stamped with.
pub(crate) fn monotonic_ns() -> u64 {
    lotus_sys::clock_ns(libc::CLOCK_MONOTONIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_chains_fall_back_to_samples_without_them() {
        let einval = || io::Error::from_raw_os_error(libc::EINVAL);
        // Opened with chains: kept, nothing retried.
        let (c, why) =
            without_chains_if_refused(Ok(1), || -> io::Result<i32> { panic!("not retried") });
        assert_eq!((c.ok(), why), (Some(1), None));
        // Refused, and opens without: the plain one, with the reason.
        let (c, why) = without_chains_if_refused(Err(einval()), || Ok(2));
        assert_eq!(c.ok(), Some(2));
        assert!(why.expect("reason").contains("Invalid argument"));
        // Refused either way: the first error stands, no reason.
        let (c, why) = without_chains_if_refused::<i32>(Err(einval()), || {
            Err(io::Error::from_raw_os_error(libc::ENOENT))
        });
        assert_eq!(c.expect_err("refused").raw_os_error(), Some(libc::EINVAL));
        assert_eq!(why, None);
        // Permission: left to the kernel-mode fallback, not retried here.
        let (c, why) = without_chains_if_refused::<i32>(
            Err(io::Error::from_raw_os_error(libc::EACCES)),
            || panic!("not retried"),
        );
        assert!(c.is_err() && why.is_none());
    }

    /// The stack copy is the kernel's most (8-byte aligned, under 64 KiB)
    /// in root's buffers, and shrinks so that a smaller buffer still holds
    /// [`STACKS_PER_BUFFER`] samples.
    #[test]
    fn the_stack_copy_is_the_kernels_most_unless_the_buffer_is_small() {
        assert_eq!(user_stack_bytes(USER_STACK_BUFFER), 65528);
        assert_eq!(user_stack_bytes(USER_STACK_BUFFER_MAX), 65528);
        assert_eq!(user_stack_bytes(SAMPLE_BUFFER), 32 << 10);
        assert_eq!(user_stack_bytes(100), 8);
        for b in [USER_STACK_BUFFER, SAMPLE_BUFFER, 12345, 8] {
            let n = user_stack_bytes(b);
            assert!(n.is_multiple_of(8) && n < u32::from(u16::MAX), "{b}: {n}");
        }
    }

    #[test]
    fn the_chain_cap_follows_a_lower_sysctl() {
        assert_eq!(chain_cap(None), MAX_CHAIN);
        assert_eq!(chain_cap(Some(64)), 64);
        assert_eq!(chain_cap(Some(1000)), MAX_CHAIN);
        assert_eq!(chain_cap(Some(0)), 1);
        assert_eq!(chain_cap(Some(u64::MAX)), MAX_CHAIN);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3\n"), Some(vec![0, 1, 2, 3]));
        assert_eq!(parse_cpu_list("0,2-3,7"), Some(vec![0, 2, 3, 7]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert!(!online_cpus().is_empty());
    }
}
