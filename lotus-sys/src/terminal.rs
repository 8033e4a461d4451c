//! The terminal standard output is, where it is one.

use std::io::IsTerminal;

/// The columns of the terminal the user reads lotus's output on: standard
/// output's, else (standard output piped, as in `lotus attribute DIR |
/// less`, or sent to a file) standard error's; `None` where neither is a
/// terminal or the terminal does not say (a width of 0).
pub fn terminal_columns() -> Option<usize> {
    fn columns(fd: impl std::os::fd::AsFd + IsTerminal) -> Option<usize> {
        if !fd.is_terminal() {
            return None;
        }
        let size = rustix::termios::tcgetwinsize(&fd).ok()?;
        Some(usize::from(size.ws_col)).filter(|&c| c > 0)
    }
    columns(std::io::stdout()).or_else(|| columns(std::io::stderr()))
}

/// The rows of the terminal standard output is, where it is one and says
/// (`lotus top` cuts its view to them).
pub fn terminal_rows() -> Option<usize> {
    let out = std::io::stdout();
    if !out.is_terminal() {
        return None;
    }
    let size = rustix::termios::tcgetwinsize(&out).ok()?;
    Some(usize::from(size.ws_row)).filter(|&r| r > 0)
}
