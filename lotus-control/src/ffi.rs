//! The C ABI (`include/lotus.h`). Every export catches panics so none
//! unwinds into C, and reports failures through `lotus_last_error`.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use crate::backend::{Call, Control};
use crate::error::ControlError;

thread_local! {
    /// The message of this thread's last failed call.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: String) {
    let message = CString::new(message).unwrap_or_else(|e| {
        let mut bytes = e.into_vec();
        bytes.retain(|b| *b != 0);
        CString::new(bytes).unwrap_or_default()
    });
    // `try_with`: during thread teardown the slot may be gone; the caller
    // still gets -1.
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = message);
}

/// Runs `f`, turning its error or a panic into -1 and a last-error message.
fn guarded(f: impl FnOnce() -> Result<(), ControlError>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(err)) => {
            set_last_error(err.to_string());
            -1
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_string());
            set_last_error(ControlError::Internal(what).to_string());
            -1
        }
    }
}

/// Opens a measurement window for `op` (NULL or "" when unnamed).
///
/// # Safety
/// `op` is NULL or points to a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn lotus_resume(op: *const c_char) -> c_int {
    guarded(|| {
        let name = if op.is_null() {
            std::borrow::Cow::Borrowed("")
        } else {
            // SAFETY: the caller passes a NUL-terminated string.
            unsafe { CStr::from_ptr(op) }.to_string_lossy()
        };
        Control::get().call(Call::Resume(&name))
    })
}

/// Closes the open measurement window.
#[no_mangle]
pub extern "C" fn lotus_pause() -> c_int {
    guarded(|| Control::get().call(Call::Pause))
}

/// No window will open again in this process.
#[no_mangle]
pub extern "C" fn lotus_detach() -> c_int {
    guarded(|| Control::get().call(Call::Detach))
}

/// Stops (`on` 0) or restarts (`on` non-zero) sampling this process
/// outside windows, and returns once lotus has done it: the process can
/// then time code unsampled (`lotus map`'s unsampled calls, the reference
/// for what sampling costs the op). Not inside a window. Under VTune and
/// uProf, and outside lotus, a no-op. 0, or -1 (see `lotus_last_error`).
#[no_mangle]
pub extern "C" fn lotus_sampling(on: c_int) -> c_int {
    guarded(|| Control::get().call(Call::Sampling(on != 0)))
}

/// After fork: this process becomes the control channel's owner (the
/// parent must not call the library until this child is done). 0.
#[no_mangle]
pub extern "C" fn lotus_adopt() -> c_int {
    catch_unwind(crate::adopt).map_or(-1, |()| 0)
}

/// 1 when running under lotus, else 0.
#[no_mangle]
pub extern "C" fn lotus_active() -> c_int {
    catch_unwind(|| c_int::from(Control::get().active())).unwrap_or(0)
}

/// `LOTUS_BACKEND`, or NULL.
#[no_mangle]
pub extern "C" fn lotus_backend() -> *const c_char {
    catch_unwind(|| {
        Control::get()
            .backend_name
            .as_ref()
            .map_or(ptr::null(), |name| name.as_ptr())
    })
    .unwrap_or(ptr::null())
}

/// The message of this thread's last failed call ("" when none failed).
#[no_mangle]
pub extern "C" fn lotus_last_error() -> *const c_char {
    static EMPTY: &CStr = c"";
    LAST_ERROR
        .try_with(|slot| slot.borrow().as_ptr())
        .unwrap_or(EMPTY.as_ptr())
}
