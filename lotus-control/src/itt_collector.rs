//! An ITT collector: `liblotus_control.so` exports `__itt_api_init`, so the
//! ITT static part linked into any program (Intel's `ittnotify`, as built
//! into the `ittapi` Python package or the `ittapi` crate) can load it
//! through `INTEL_LIBITTNOTIFY64` the way it loads VTune's collector.
//!
//! An op script written the original Lotus way (`ittapi.resume()` ...
//! `ittapi.pause()` / `ittapi.detach()`) then reaches the control
//! library's normal dispatch, so its ITT windows become the active
//! backend's windows (under `--backend perf`, requests over the control
//! channel).
//!
//! # The table protocol
//!
//! When the static part first needs its collector it `dlopen`s the library
//! named by `INTEL_LIBITTNOTIFY64`, finds `__itt_api_init` and calls it with
//! its descriptor (`__itt_global*`) and the groups it wants
//! (`__itt_group_id`, normally all). The descriptor starts with an 8-byte
//! magic and the static part's version, and points (`api_list_ptr`) at an
//! array of entries, one per API function, ended by an entry whose name is
//! NULL. Each entry holds the function's exported name (`"__itt_resume"`),
//! the address of the static part's function pointer for it (`func_ptr`),
//! and its group. A collector writes its own function into `*func_ptr` for
//! each name it implements. Entries it leaves alone keep the static part's
//! initial stub, which does nothing once initialization has finished.
//!
//! Entries gained a `null_func` field after the 2010-10-01 build, so their
//! size depends on the static part's build date (`version_build`). This
//! collector reads the table only when the magic and major version (3) are
//! the ones it knows, checks every entry before writing any (a name that
//! starts with `__itt_`, an aligned non-null `func_ptr`, at most
//! [`MAX_ENTRIES`] entries), and otherwise writes nothing: ITT calls then
//! stay no-ops, and a note goes to stderr when running under lotus.
//!
//! Under `lotus trace run` it also takes the task entries (domains, string
//! handles, task begin and end), turning ITT tasks into trace spans: see
//! [`itt_tasks`].
//!
//! # Under VTune
//!
//! With `LOTUS_BACKEND=vtune` the control library itself calls ITT to reach
//! VTune's collector. Were `INTEL_LIBITTNOTIFY64` to name this library
//! then, each call would come straight back here: the collector declines
//! (writes nothing) and [`declined_under_vtune`] tells the VTune path to
//! fail with the reason.

use std::ffi::{c_char, c_int, c_long, c_ulong, c_void, CStr};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::backend::{Backend, Call, Control, Vendor};
use crate::itt_tasks;

/// The magic bytes that start every `__itt_global`.
const ITT_MAGIC: [u8; 8] = [0xED, 0xAB, 0xAB, 0xEC, 0x0D, 0xEE, 0xDA, 0x30];
/// The only major version whose descriptor layout this collector knows.
const ITT_MAJOR: c_ulong = 3;
/// Static parts built on or before this date use entries without
/// `null_func` (`__itt_api_info_20101001`).
const LAST_SHORT_ENTRY_BUILD: c_ulong = 20101001;
/// No static part has anywhere near this many API functions; a table that
/// does not end before it is not a table.
const MAX_ENTRIES: usize = 4096;
/// `__itt_group_control`: pause, resume, detach and their scoped forms.
const GROUP_CONTROL: c_int = 1 << 1;
/// `__itt_group_structure`: domains, string handles, tasks.
const GROUP_STRUCTURE: c_int = 1 << 12;
/// `__itt_collection_scope_host`: the CPU side, which lotus measures.
const SCOPE_HOST: c_int = 1 << 0;
/// Pointers below this are small integers read as pointers, never strings.
const LOWEST_POINTER: usize = 0x1_0000;

/// The start of `__itt_global` (ittnotify_config.h), up to the fields this
/// collector reads. The static part packs it to 8, which on the 64-bit
/// Linux targets is every field's natural alignment, as `repr(C)` lays it
/// out.
#[repr(C)]
struct IttGlobalHead {
    magic: [u8; 8],
    version_major: c_ulong,
    version_minor: c_ulong,
    version_build: c_ulong,
    api_initialized: c_long,
    mutex_initialized: c_long,
    atomic_counter: c_long,
    mutex: libc::pthread_mutex_t,
    lib: *mut c_void,
    error_handler: *mut c_void,
    dll_path_ptr: *mut *const c_char,
    api_list_ptr: *mut u8,
}

/// The fields every entry layout starts with (`__itt_api_info` and
/// `__itt_api_info_20101001`).
#[repr(C)]
struct IttApiEntryHead {
    name: *const c_char,
    func_ptr: *mut *mut c_void,
    init_func: *mut c_void,
}

/// `__itt_api_info` (after the 2010-10-01 build).
#[repr(C)]
#[allow(dead_code)] // Read through its size and the group's offset.
struct IttApiEntry {
    head: IttApiEntryHead,
    null_func: *mut c_void,
    group: c_int,
}

/// `__itt_api_info_20101001`.
#[repr(C)]
#[allow(dead_code)] // Read through its size and the group's offset.
struct IttApiEntryShort {
    head: IttApiEntryHead,
    group: c_int,
}

/// One table layout: the entry's size and where its group is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    stride: usize,
    group_offset: usize,
}

impl Layout {
    const LONG: Layout = Layout {
        stride: std::mem::size_of::<IttApiEntry>(),
        group_offset: std::mem::offset_of!(IttApiEntry, group),
    };
    const SHORT: Layout = Layout {
        stride: std::mem::size_of::<IttApiEntryShort>(),
        group_offset: std::mem::offset_of!(IttApiEntryShort, group),
    };

    fn for_build(build: c_ulong) -> Layout {
        if build <= LAST_SHORT_ENTRY_BUILD {
            Layout::SHORT
        } else {
            Layout::LONG
        }
    }
}

/// Set when `__itt_api_init` declined because the VTune backend is active
/// (see the module docs).
static DECLINED_UNDER_VTUNE: AtomicBool = AtomicBool::new(false);
/// Whether a window opened through ITT is open (a detach closes it first).
static WINDOW_OPEN: AtomicBool = AtomicBool::new(false);

/// True when a static part in this process tried to use this library as its
/// ITT collector while the VTune backend is active.
pub(crate) fn declined_under_vtune() -> bool {
    DECLINED_UNDER_VTUNE.load(Ordering::SeqCst)
}

/// Writes a note to stderr (never panics).
fn note(message: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "lotus ITT collector: {message}");
}

/// Performs an ITT control call through the control library's dispatch,
/// saying on stderr when it fails (ITT functions return nothing).
fn route(call: Call<'_>, itt_name: &str) {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let control = Control::get();
        if call == Call::Detach && WINDOW_OPEN.load(Ordering::SeqCst) {
            // VTune stops collecting at a detach: close the window first.
            if control.call(Call::Pause).is_ok() {
                WINDOW_OPEN.store(false, Ordering::SeqCst);
            }
        }
        let result = control.call(call);
        if result.is_ok() {
            match call {
                Call::Resume(_) => WINDOW_OPEN.store(true, Ordering::SeqCst),
                Call::Pause | Call::Detach => WINDOW_OPEN.store(false, Ordering::SeqCst),
                Call::Sampling(_) => {}
            }
        }
        result
    }));
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(err)) => note(format_args!("{itt_name}: {err}")),
        Err(_) => note(format_args!(
            "{itt_name}: internal error (a panic was caught)"
        )),
    }
}

extern "C" fn itt_resume() {
    route(Call::Resume(""), "__itt_resume");
}

extern "C" fn itt_pause() {
    route(Call::Pause, "__itt_pause");
}

extern "C" fn itt_detach() {
    route(Call::Detach, "__itt_detach");
}

extern "C" fn itt_resume_scoped(scope: c_int) {
    if scope & SCOPE_HOST != 0 {
        route(Call::Resume(""), "__itt_resume_scoped");
    }
}

extern "C" fn itt_pause_scoped(scope: c_int) {
    if scope & SCOPE_HOST != 0 {
        route(Call::Pause, "__itt_pause_scoped");
    }
}

/// The function this collector provides for an ITT API name, and the
/// group it belongs to; the task functions only when `tasks` (the process
/// records ITT tasks into a trace, see [`itt_tasks`]).
fn provided(name: &[u8], tasks: bool) -> Option<(*mut c_void, c_int)> {
    if tasks {
        if let Some(f) = itt_tasks::provided(name) {
            return Some((f, GROUP_STRUCTURE));
        }
    }
    let f: *mut c_void = match name {
        b"__itt_resume" => itt_resume as extern "C" fn() as *mut c_void,
        b"__itt_pause" => itt_pause as extern "C" fn() as *mut c_void,
        b"__itt_detach" => itt_detach as extern "C" fn() as *mut c_void,
        b"__itt_resume_scoped" => itt_resume_scoped as extern "C" fn(c_int) as *mut c_void,
        b"__itt_pause_scoped" => itt_pause_scoped as extern "C" fn(c_int) as *mut c_void,
        _ => return None,
    };
    Some((f, GROUP_CONTROL))
}

/// Whether `name` points at a string that starts with `__itt_`, reading no
/// byte past the first that differs.
///
/// # Safety
/// `name` is at least [`LOWEST_POINTER`] and points into readable memory.
unsafe fn starts_with_itt(name: *const c_char) -> bool {
    b"__itt_".iter().enumerate().all(|(i, want)| {
        // SAFETY: bytes are read one at a time and only while they match,
        // so the read never passes the string's terminating NUL.
        unsafe { *name.add(i).cast::<u8>() == *want }
    })
}

/// Why a table was not used.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// NULL descriptor.
    Null,
    /// Not an ITT descriptor.
    Magic,
    /// A major version whose layout is unknown.
    Major(c_ulong),
    /// The table pointer is NULL.
    NoTable,
    /// An entry did not look like one (index).
    BadEntry(usize),
    /// No end within [`MAX_ENTRIES`].
    TooLong,
}

/// Fills the control entries (and, with `tasks`, the task entries) of the
/// table `global` describes, for the groups in `groups`; returns how many
/// entries were filled.
///
/// # Safety
/// `global` is NULL or points to a static part's `__itt_global`, as the
/// static part passes it to `__itt_api_init`.
pub(crate) unsafe fn fill_table(
    global: *mut c_void,
    groups: c_int,
    tasks: bool,
) -> Result<usize, Refusal> {
    if global.is_null() {
        return Err(Refusal::Null);
    }
    // SAFETY: the caller passes a descriptor; its head is read before
    // anything that depends on its version.
    let head = unsafe { &*global.cast::<IttGlobalHead>() };
    if head.magic != ITT_MAGIC {
        return Err(Refusal::Magic);
    }
    if head.version_major != ITT_MAJOR {
        return Err(Refusal::Major(head.version_major));
    }
    let table = head.api_list_ptr;
    if table.is_null() {
        return Err(Refusal::NoTable);
    }
    let layout = Layout::for_build(head.version_build);
    // SAFETY (both passes): entry `i` lies at `table + i * stride`; the
    // table goes on until an entry with a NULL name, which the first pass
    // finds (within MAX_ENTRIES) before the second writes anything.
    let entry = |i: usize| unsafe { &*table.add(i * layout.stride).cast::<IttApiEntryHead>() };
    let mut count = None;
    for i in 0..MAX_ENTRIES {
        let e = entry(i);
        if e.name.is_null() {
            count = Some(i);
            break;
        }
        let aligned = e.func_ptr.is_aligned();
        // SAFETY: a pointer at or above LOWEST_POINTER in a table that
        // passed so far is read only while it matches `__itt_`.
        let named = (e.name as usize) >= LOWEST_POINTER && unsafe { starts_with_itt(e.name) };
        if e.func_ptr.is_null() || !aligned || !named {
            return Err(Refusal::BadEntry(i));
        }
    }
    let count = count.ok_or(Refusal::TooLong)?;
    let mut filled = 0;
    for i in 0..count {
        let e = entry(i);
        // SAFETY: checked above: a string that starts with `__itt_`.
        let name = unsafe { CStr::from_ptr(e.name) }.to_bytes();
        let Some((f, needs)) = provided(name, tasks) else {
            continue;
        };
        // SAFETY: the group lies at this layout's offset in entry `i`.
        let group = unsafe {
            table
                .add(i * layout.stride + layout.group_offset)
                .cast::<c_int>()
                .read_unaligned()
        };
        if group & groups & needs == 0 {
            continue;
        }
        // SAFETY: `func_ptr` is the static part's pointer for this API,
        // checked non-null and aligned; the static part holds its lock
        // while it calls `__itt_api_init`.
        unsafe { e.func_ptr.write(f) };
        filled += 1;
    }
    Ok(filled)
}

/// The collector entry point the ITT static part calls after loading this
/// library from `INTEL_LIBITTNOTIFY64`.
///
/// # Safety
/// `global` is NULL or the static part's `__itt_global` descriptor.
#[no_mangle]
pub unsafe extern "C" fn __itt_api_init(global: *mut c_void, groups: c_int) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let control = Control::get();
        if matches!(control.backend, Backend::InProcess(Vendor::Vtune)) {
            DECLINED_UNDER_VTUNE.store(true, Ordering::SeqCst);
            return;
        }
        // SAFETY: as the caller guarantees.
        match unsafe { fill_table(global, groups, itt_tasks::recording_tasks()) } {
            Ok(_) => {}
            Err(why) if control.active() => note(format_args!(
                "the ITT static part's API table was not used ({why:?}): ITT calls in this \
                 process do nothing"
            )),
            Err(_) => {}
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    /// A static part's table, built the way ittnotify lays it out.
    struct FakeStaticPart {
        global: Box<IttGlobalHead>,
        _names: Vec<CString>,
        slots: Box<[*mut c_void]>,
        _table: Vec<u8>,
    }

    const STUB: *mut c_void = 0x5eed as *mut c_void;

    fn fake(names: &[&str], groups: &[c_int], build: c_ulong, major: c_ulong) -> FakeStaticPart {
        let layout = Layout::for_build(build);
        let names: Vec<CString> = names
            .iter()
            .map(|n| CString::new(*n).expect("name"))
            .collect();
        let mut slots: Box<[*mut c_void]> = vec![STUB; names.len()].into_boxed_slice();
        let mut table = vec![0u8; layout.stride * (names.len() + 1) + 8];
        // Align the table's start like the static part's array.
        let offset = table.as_ptr().align_offset(8);
        for (i, name) in names.iter().enumerate() {
            let at = offset + i * layout.stride;
            let head = IttApiEntryHead {
                name: name.as_ptr(),
                func_ptr: &mut slots[i],
                init_func: STUB,
            };
            // SAFETY: `at` is 8-aligned and inside the buffer.
            unsafe {
                table
                    .as_mut_ptr()
                    .add(at)
                    .cast::<IttApiEntryHead>()
                    .write(head);
                table
                    .as_mut_ptr()
                    .add(at + layout.group_offset)
                    .cast::<c_int>()
                    .write_unaligned(groups[i]);
            }
        }
        // SAFETY: all-zero is a valid value of every field.
        let mut global: Box<IttGlobalHead> = Box::new(unsafe { std::mem::zeroed() });
        global.magic = ITT_MAGIC;
        global.version_major = major;
        global.version_build = build;
        // SAFETY: `offset` is inside the buffer.
        global.api_list_ptr = unsafe { table.as_mut_ptr().add(offset) };
        FakeStaticPart {
            global,
            _names: names,
            slots,
            _table: table,
        }
    }

    impl FakeStaticPart {
        fn fill(&mut self, groups: c_int) -> Result<usize, Refusal> {
            let p: *mut IttGlobalHead = &mut *self.global;
            // SAFETY: a well-formed fake descriptor.
            unsafe { fill_table(p.cast(), groups, false) }
        }
    }

    const NAMES: [&str; 6] = [
        "__itt_domain_create",
        "__itt_pause",
        "__itt_resume",
        "__itt_task_begin",
        "__itt_detach",
        "__itt_resume_scoped",
    ];
    const CONTROL: c_int = GROUP_CONTROL | (1 << 12);
    const GROUPS: [c_int; 6] = [1 << 12, CONTROL, CONTROL, 1 << 12, CONTROL, GROUP_CONTROL];

    #[test]
    fn fills_control_entries_by_name_and_leaves_the_rest() {
        for build in [20250807, 20101001, 20090101] {
            let mut part = fake(&NAMES, &GROUPS, build, 3);
            assert_eq!(part.fill(-1), Ok(4), "build {build}");
            assert_eq!(part.slots[0], STUB);
            assert_eq!(part.slots[1], itt_pause as extern "C" fn() as *mut c_void);
            assert_eq!(part.slots[2], itt_resume as extern "C" fn() as *mut c_void);
            assert_eq!(part.slots[3], STUB);
            assert_eq!(part.slots[4], itt_detach as extern "C" fn() as *mut c_void);
            assert_eq!(
                part.slots[5],
                itt_resume_scoped as extern "C" fn(c_int) as *mut c_void
            );
        }
    }

    #[test]
    fn task_entries_are_filled_only_when_tasks_are_recorded() {
        let mut part = fake(&NAMES, &GROUPS, 20250807, 3);
        let p: *mut IttGlobalHead = &mut *part.global;
        // SAFETY: a well-formed fake descriptor.
        assert_eq!(unsafe { fill_table(p.cast(), -1, true) }, Ok(6));
        assert_eq!(
            part.slots[0],
            itt_tasks::provided(b"__itt_domain_create").unwrap()
        );
        assert_eq!(
            part.slots[3],
            itt_tasks::provided(b"__itt_task_begin").unwrap()
        );
        // Not when the static part leaves the structure group out.
        let mut part = fake(&NAMES, &GROUPS, 20250807, 3);
        let p: *mut IttGlobalHead = &mut *part.global;
        // SAFETY: as above.
        assert_eq!(unsafe { fill_table(p.cast(), GROUP_CONTROL, true) }, Ok(4));
        assert_eq!(part.slots[0], STUB);
        assert_eq!(part.slots[3], STUB);
    }

    #[test]
    fn groups_not_asked_for_stay_untouched() {
        let mut part = fake(&NAMES, &GROUPS, 20250807, 3);
        assert_eq!(part.fill(1 << 12), Ok(0));
        assert!(part.slots.iter().all(|s| *s == STUB));
    }

    #[test]
    fn unknown_descriptors_are_not_touched() {
        let mut part = fake(&NAMES, &GROUPS, 20250807, 4);
        assert_eq!(part.fill(-1), Err(Refusal::Major(4)));
        part.global.version_major = 3;
        part.global.magic[0] = 0;
        assert_eq!(part.fill(-1), Err(Refusal::Magic));
        part.global.magic = ITT_MAGIC;
        part.global.api_list_ptr = std::ptr::null_mut();
        assert_eq!(part.fill(-1), Err(Refusal::NoTable));
        assert!(part.slots.iter().all(|s| *s == STUB));
        // SAFETY: NULL is allowed.
        assert_eq!(
            unsafe { fill_table(std::ptr::null_mut(), -1, false) },
            Err(Refusal::Null)
        );
    }

    #[test]
    fn a_table_of_the_other_layout_is_refused_before_any_write() {
        // Entries laid out long, described as a 2009 build (short entries):
        // entry 1 is read from the wrong offset and fails the checks.
        let mut part = fake(&NAMES, &GROUPS, 20250807, 3);
        part.global.version_build = 20090101;
        assert!(matches!(part.fill(-1), Err(Refusal::BadEntry(_))));
        assert!(part.slots.iter().all(|s| *s == STUB));
        // And the other way round.
        let mut part = fake(&NAMES, &GROUPS, 20090101, 3);
        part.global.version_build = 20250807;
        assert!(matches!(part.fill(-1), Err(Refusal::BadEntry(_))));
        assert!(part.slots.iter().all(|s| *s == STUB));
    }

    #[test]
    fn names_that_are_not_itt_names_are_refused() {
        let mut part = fake(&["__itt_pause", "bogus"], &[CONTROL, CONTROL], 20250807, 3);
        assert_eq!(part.fill(-1), Err(Refusal::BadEntry(1)));
        assert!(part.slots.iter().all(|s| *s == STUB));
    }
}
