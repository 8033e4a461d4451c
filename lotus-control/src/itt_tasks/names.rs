//! The names of ITT tasks: domains and string handles, interned in
//! lock-free lists (a fork at any moment leaves the child no lock to wait
//! for), and the names lines carry.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

/// `__itt_domain` (ittnotify.h).
#[repr(C)]
pub(super) struct IttDomain {
    flags: c_int,
    name_a: *const c_char,
    name_w: *mut c_void,
    extra1: c_int,
    extra2: *mut c_void,
    next: *mut IttDomain,
}

/// `__itt_string_handle` (ittnotify.h).
#[repr(C)]
pub(super) struct IttStringHandle {
    str_a: *const c_char,
    str_w: *mut c_void,
    extra1: c_int,
    extra2: *mut c_void,
    next: *mut IttStringHandle,
}

/// What names an open task.
#[derive(Clone, Copy)]
pub(super) enum TaskName {
    Handle(*const IttStringHandle),
    Function(*const c_void),
}

/// `text` as it may stand in a log line: no commas, spaces or control
/// characters (those at either end dropped, those inside each `_`; the
/// name's own underscores stay: `Cls.__call__`), `empty` when nothing is
/// left (the tracer's `clean_name`).
pub(super) fn clean(text: &str, empty: &str) -> String {
    let unfit = |c: char| c == ',' || c.is_whitespace() || c.is_control();
    let out: String = text
        .trim_matches(unfit)
        .chars()
        .map(|c| if unfit(c) { '_' } else { c })
        .collect();
    if out.is_empty() {
        empty.to_string()
    } else {
        out
    }
}

/// An interned domain: the ITT struct first, so a pointer to the node is
/// a pointer to the struct the caller gets.
#[repr(C)]
struct DomainNode {
    itt: IttDomain,
    name: Box<CStr>,
    next: *mut DomainNode,
}

#[repr(C)]
struct HandleNode {
    itt: IttStringHandle,
    name: Box<CStr>,
    next: *mut HandleNode,
}

static DOMAINS: AtomicPtr<DomainNode> = AtomicPtr::new(ptr::null_mut());
static HANDLES: AtomicPtr<HandleNode> = AtomicPtr::new(ptr::null_mut());

/// A node of a lock-free, append-only list (ITT never frees domains or
/// string handles, so neither does this).
trait Interned: Sized {
    fn name(&self) -> &CStr;
    fn next(&self) -> *mut Self;
    fn set_next(&mut self, next: *mut Self);
    fn new(name: &CStr) -> Box<Self>;
}

impl Interned for DomainNode {
    fn name(&self) -> &CStr {
        &self.name
    }
    fn next(&self) -> *mut Self {
        self.next
    }
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
    fn new(name: &CStr) -> Box<Self> {
        let name: Box<CStr> = name.into();
        Box::new(DomainNode {
            itt: IttDomain {
                // Enabled: the static part skips task calls of a domain
                // whose flags are 0.
                flags: 1,
                name_a: name.as_ptr(),
                name_w: ptr::null_mut(),
                extra1: 0,
                extra2: ptr::null_mut(),
                next: ptr::null_mut(),
            },
            name,
            next: ptr::null_mut(),
        })
    }
}

impl Interned for HandleNode {
    fn name(&self) -> &CStr {
        &self.name
    }
    fn next(&self) -> *mut Self {
        self.next
    }
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
    fn new(name: &CStr) -> Box<Self> {
        let name: Box<CStr> = name.into();
        Box::new(HandleNode {
            itt: IttStringHandle {
                str_a: name.as_ptr(),
                str_w: ptr::null_mut(),
                extra1: 0,
                extra2: ptr::null_mut(),
                next: ptr::null_mut(),
            },
            name,
            next: ptr::null_mut(),
        })
    }
}

/// The node named `name` in `list`, added when missing: ITT hands out one
/// handle per name.
fn intern<T: Interned>(list: &AtomicPtr<T>, name: &CStr) -> *mut T {
    let find = |mut at: *mut T, until: *mut T| {
        while !at.is_null() && at != until {
            // SAFETY: nodes are leaked boxes, published fully built.
            let node = unsafe { &*at };
            if node.name() == name {
                return Some(at);
            }
            at = node.next();
        }
        None
    };
    let mut head = list.load(Ordering::Acquire);
    if let Some(found) = find(head, ptr::null_mut()) {
        return found;
    }
    let mut node = T::new(name);
    loop {
        node.set_next(head);
        let raw = Box::into_raw(node);
        match list.compare_exchange(head, raw, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return raw,
            Err(newer) => {
                // SAFETY: `raw` was not published; it is ours again.
                node = unsafe { Box::from_raw(raw) };
                // Only the nodes added since need a look.
                if let Some(found) = find(newer, head) {
                    return found;
                }
                head = newer;
            }
        }
    }
}

/// `__itt_domain_create`.
pub(super) unsafe extern "C" fn domain_create(name: *const c_char) -> *mut c_void {
    if name.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: ITT passes a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(name) };
    intern(&DOMAINS, name).cast()
}

/// `__itt_string_handle_create`.
pub(super) unsafe extern "C" fn string_handle_create(name: *const c_char) -> *mut c_void {
    if name.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: ITT passes a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(name) };
    intern(&HANDLES, name).cast()
}

/// The task's name as it may stand in a line.
pub(super) fn task_name(name: TaskName) -> String {
    match name {
        TaskName::Handle(h) if !h.is_null() => {
            // SAFETY: a string handle (ours or the static part's), whose
            // name is a NUL-terminated string that lives as long as it.
            let s = unsafe { (*h).str_a };
            if s.is_null() {
                return "task".into();
            }
            // SAFETY: as above.
            clean(&unsafe { CStr::from_ptr(s) }.to_string_lossy(), "task")
        }
        TaskName::Handle(_) => "task".into(),
        TaskName::Function(f) => function_name(f),
    }
}

/// The symbol at `f` (`__itt_task_begin_fn`), else its address.
fn function_name(f: *const c_void) -> String {
    // SAFETY: dladdr only reads the loader's tables; a zeroed Dl_info is a
    // valid out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(f, &mut info) } != 0 && !info.dli_sname.is_null() {
        // SAFETY: dladdr's symbol name is a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(info.dli_sname) }.to_string_lossy();
        return clean(&name, "task");
    }
    format!("fn_{:x}", f as usize)
}

pub(super) fn domain_name(domain: *const IttDomain) -> String {
    if domain.is_null() {
        return "-".into();
    }
    // SAFETY: a domain (ours or the static part's) with a NUL-terminated
    // name that lives as long as it.
    let name = unsafe { (*domain).name_a };
    if name.is_null() {
        return "-".into();
    }
    // SAFETY: as above.
    clean(&unsafe { CStr::from_ptr(name) }.to_string_lossy(), "-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cleaned_like_the_tracers() {
        assert_eq!(clean("a,b c\td", "x"), "a_b_c_d");
        assert_eq!(clean(",,", "task"), "task");
        assert_eq!(clean("Résumé", "x"), "Résumé");
        // Dunders stay (issue 34: `Cls.__call__` was `Cls.__call`).
        assert_eq!(clean("Cls.__call__", "x"), "Cls.__call__");
        assert_eq!(clean(" _a b_ ", "x"), "_a_b_");
    }

    #[test]
    fn a_function_task_is_named_by_its_symbol() {
        // glibc's symbol for it is `getpid` or its alias `__getpid`,
        // whichever dladdr finds first; the name keeps its underscores.
        let name = function_name(libc::getpid as *const c_void);
        assert!(["getpid", "__getpid"].contains(&name.as_str()), "{name}");
        assert!(function_name(std::ptr::dangling::<c_void>()).starts_with("fn_"));
    }

    #[test]
    fn one_handle_per_name_from_many_threads() {
        let names: Vec<std::ffi::CString> = (0..20)
            .map(|i| std::ffi::CString::new(format!("name{i}")).unwrap())
            .collect();
        let got: Vec<Vec<usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        names
                            .iter()
                            .map(|n| intern(&HANDLES, n) as usize)
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(got.windows(2).all(|w| w[0] == w[1]));
        let mut distinct = got[0].clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), names.len());
        // SAFETY: a node of the list.
        let node = unsafe { &*(got[0][3] as *const HandleNode) };
        assert_eq!(node.name(), names[3].as_c_str());
        // SAFETY: the ITT struct's name is the node's.
        assert_eq!(
            unsafe { CStr::from_ptr(node.itt.str_a) },
            names[3].as_c_str()
        );
    }
}
