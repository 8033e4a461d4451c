//! The terminal standard output is, where it is one.

use std::io::IsTerminal;

/// The columns of the terminal standard output writes to; `None` where
/// standard output is no terminal (a file, a pipe) or the terminal does
/// not say (a width of 0).
pub fn terminal_columns() -> Option<usize> {
    let out = std::io::stdout();
    if !out.is_terminal() {
        return None;
    }
    let size = rustix::termios::tcgetwinsize(&out).ok()?;
    Some(usize::from(size.ws_col)).filter(|&c| c > 0)
}
