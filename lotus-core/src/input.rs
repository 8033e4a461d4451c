//! Opening the files users name (mappings, profiles, reports, op times,
//! trace logs) for reading.
//!
//! A path that is not a regular file must be refused before reading it:
//! `/dev/zero` never ends, a fifo blocks the open until some writer comes
//! (forever, if none does), and a folder fails later with a vaguer error.
//! [`open_regular`] opens without blocking (`O_NONBLOCK`, which regular
//! files ignore), then checks what the descriptor is, so a path swapped
//! between a check and the open cannot slip through.

use std::fs::{File, FileType, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What a file that is not a regular file is, in words ("a fifo (named
/// pipe)"); `None` for a regular file.
pub fn not_regular(file_type: FileType) -> Option<&'static str> {
    if file_type.is_file() {
        None
    } else if file_type.is_dir() {
        Some("a folder")
    } else if file_type.is_fifo() {
        Some("a fifo (named pipe)")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else if file_type.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// Opens `path` for reading if it is a regular file (symbolic links are
/// followed). Anything else is an error of kind `InvalidInput` whose text
/// says what it is: "is a fifo (named pipe), not a regular file".
pub fn open_regular(path: &Path) -> io::Result<File> {
    // Only the constant comes from libc: no foreign call is made here.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    match not_regular(file.metadata()?.file_type()) {
        None => Ok(file),
        Some(what) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("is {what}, not a regular file"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_and_folders_are_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let e = open_regular(&fifo).expect_err("fifo");
        assert_eq!(e.to_string(), "is a fifo (named pipe), not a regular file");
        let e = open_regular(Path::new("/dev/zero")).expect_err("device");
        assert!(e.to_string().contains("character device"), "{e}");
        let e = open_regular(dir.path()).expect_err("folder");
        assert!(e.to_string().contains("a folder"), "{e}");
        let file = dir.path().join("f");
        std::fs::write(&file, "x").expect("write");
        let mut text = String::new();
        io::Read::read_to_string(&mut open_regular(&file).expect("file"), &mut text).expect("read");
        assert_eq!(text, "x");
    }
}
