//! The walk, the writer and the private folders, on real files.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::{check_writable, create_dir_all, write_file, Error, OutputFile, PrivateDir};

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn is_root() -> bool {
    crate::sys::euid() == 0
}

/// Gives `path` (not what it links to) to `nobody`.
fn give_to_nobody(path: &Path) {
    std::os::unix::fs::lchown(path, Some(65534), Some(65534)).expect("lchown");
}

#[test]
fn a_new_file_and_a_replaced_one_get_the_umask_mode_not_the_old_one() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("out.txt");
    write_file(&out, b"one\n").expect("write");
    assert_eq!(std::fs::read_to_string(&out).expect("read"), "one\n");
    // A file another user could make: setuid, setgid, writable by all.
    chmod(&out, 0o6777);
    write_file(&out, b"two\n").expect("replace");
    assert_eq!(std::fs::read_to_string(&out).expect("read"), "two\n");
    let mode = std::fs::metadata(&out).expect("meta").mode() & 0o7777;
    assert_eq!(mode & 0o7111, 0, "mode {mode:o}");
    // Nothing else was left in the folder.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("ls")
        .flatten()
        .collect();
    assert_eq!(names.len(), 1);
}

#[test]
fn a_dropped_output_leaves_the_old_text_and_no_temporary_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("out.txt");
    std::fs::write(&out, "old").expect("write");
    let mut f = OutputFile::create(&out).expect("create");
    f.write_all(b"half").expect("write");
    drop(f);
    assert_eq!(std::fs::read_to_string(&out).expect("read"), "old");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("ls")
        .flatten()
        .collect();
    assert_eq!(names.len(), 1);
}

#[test]
fn own_links_are_followed_and_dot_dot_is_the_real_parent() {
    let dir = tempfile::tempdir().expect("tmp");
    let real = dir.path().join("real");
    std::fs::create_dir_all(real.join("inner")).expect("mkdir");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(real.join("inner"), &link).expect("link");
    // The file at the end a link too, relative.
    std::os::unix::fs::symlink("target.txt", real.join("name.txt")).expect("link");
    write_file(&link.join("../name.txt"), b"x").expect("write");
    assert_eq!(
        std::fs::read_to_string(real.join("target.txt")).expect("t"),
        "x"
    );
    assert!(real
        .join("name.txt")
        .symlink_metadata()
        .expect("link")
        .file_type()
        .is_symlink());
    // A link to a missing file makes the file where it points.
    std::os::unix::fs::symlink("new.txt", dir.path().join("dangling")).expect("link");
    write_file(&dir.path().join("dangling"), b"y").expect("write");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("new.txt")).expect("n"),
        "y"
    );
    // `..` above `/` stays at `/`.
    let up = format!("/../../{}", dir.path().join("up.txt").display());
    write_file(Path::new(&up), b"z").expect("write");
    assert!(dir.path().join("up.txt").is_file());
}

#[test]
fn a_folder_others_can_write_on_the_way_is_refused_a_sticky_one_is_not() {
    let dir = tempfile::tempdir().expect("tmp");
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    let out = shared.join("out.txt");
    for mode in [0o777, 0o775] {
        chmod(&shared, mode);
        match write_file(&out, b"x") {
            Err(Error::Untrusted { component, why, .. }) => {
                assert_eq!(component, format!("the folder {}", shared.display()));
                assert!(why.contains("can be written by"), "{why}");
            }
            other => panic!("mode {mode:o}: {other:?}"),
        }
        assert!(!out.exists());
        assert!(check_writable(&out).is_err());
    }
    chmod(&shared, 0o1777);
    write_file(&out, b"x").expect("a sticky folder");
    chmod(&shared, 0o700);
}

#[test]
fn another_users_link_or_folder_is_refused() {
    if !is_root() {
        eprintln!("skipped: another_users_link_or_folder_is_refused: not root");
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "root's").expect("write");
    let sticky = dir.path().join("sticky");
    std::fs::create_dir(&sticky).expect("mkdir");
    chmod(&sticky, 0o1777);
    // At the end, and on the way.
    let at_end = sticky.join("out.txt");
    std::os::unix::fs::symlink(&secret, &at_end).expect("link");
    give_to_nobody(&at_end);
    let on_way = sticky.join("way");
    std::os::unix::fs::symlink(dir.path(), &on_way).expect("link");
    give_to_nobody(&on_way);
    for path in [at_end.clone(), on_way.join("secret")] {
        let e = write_file(&path, b"x").expect_err("nobody's link");
        let text = e.to_string();
        assert!(
            text.contains("the symbolic link") && text.contains("owned by user 65534"),
            "{text}"
        );
    }
    assert_eq!(std::fs::read_to_string(&secret).expect("read"), "root's");
    // nobody's folder (not writable by others) on the way.
    let theirs = sticky.join("theirs");
    std::fs::create_dir(&theirs).expect("mkdir");
    give_to_nobody(&theirs);
    let e = write_file(&theirs.join("out"), b"x").expect_err("nobody's folder");
    assert!(e.to_string().contains("the folder"), "{e}");
    let e = create_dir_all(&theirs.join("a/b"), 0o755).expect_err("nobody's folder");
    assert!(e.to_string().contains("owned by user 65534"), "{e}");
    assert!(!theirs.join("a").exists());
    // nobody's FIFO at the name.
    let fifo = sticky.join("fifo");
    mkfifo(&fifo);
    give_to_nobody(&fifo);
    let e = write_file(&fifo, b"x").expect_err("nobody's fifo");
    assert!(e.to_string().contains("the FIFO"), "{e}");
}

fn mkfifo(path: &Path) {
    let c = crate::sys::cstr(path.as_os_str()).expect("path");
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

#[test]
fn a_fifo_with_no_reader_fails_at_once_one_with_a_reader_is_written() {
    let dir = tempfile::tempdir().expect("tmp");
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let started = Instant::now();
    let e = write_file(&fifo, b"x").expect_err("no reader");
    assert!(matches!(e, Error::NoReader { .. }), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));
    check_writable(&fifo).expect("checking opens nothing");
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).expect("read"))
    };
    // The reader may not have opened it yet.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match write_file(&fifo, b"through the pipe") {
            Ok(()) => break,
            Err(Error::NoReader { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(reader.join().expect("reader"), "through the pipe");
    assert!(std::fs::symlink_metadata(&fifo)
        .expect("fifo")
        .file_type()
        .is_fifo());
}

use std::os::unix::fs::FileTypeExt;

#[test]
fn devices_folders_and_missing_folders() {
    let dir = tempfile::tempdir().expect("tmp");
    // Root's /dev/null, through a link of ours.
    let null = dir.path().join("null");
    std::os::unix::fs::symlink("/dev/null", &null).expect("link");
    write_file(&null, b"x").expect("/dev/null");
    assert!(std::fs::symlink_metadata("/dev/null")
        .expect("null")
        .file_type()
        .is_char_device());
    let e = write_file(dir.path(), b"x").expect_err("a folder");
    assert!(matches!(e, Error::IsFolder { .. }), "{e}");
    let e = write_file(&dir.path().join("."), b"x").expect_err("a folder");
    assert!(matches!(e, Error::IsFolder { .. }), "{e}");
    let missing = dir.path().join("no/such/out.txt");
    let e = write_file(&missing, b"x").expect_err("missing folder");
    assert!(
        e.to_string().contains(&missing.display().to_string()),
        "{e}"
    );
    // A file on the way.
    std::fs::write(dir.path().join("file"), "").expect("write");
    let e = write_file(&dir.path().join("file/out"), b"x").expect_err("a file on the way");
    assert!(e.to_string().contains("Not a directory"), "{e}");
    create_dir_all(&dir.path().join("made/deeper"), 0o755).expect("mkdir");
    write_file(&dir.path().join("made/deeper/out"), b"x").expect("write");
    // Relative paths: joined to the working folder.
    let e = write_file(Path::new("no-such-folder-here/x"), b"x").expect_err("relative");
    assert!(e.to_string().contains("no-such-folder-here/x"), "{e}");
}

#[test]
fn private_folders_are_0700_removed_without_following_links_or_kept() {
    let dir = tempfile::tempdir().expect("tmp");
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).expect("mkdir");
    std::fs::write(outside.join("keep.txt"), "x").expect("write");
    let p = PrivateDir::new_in(&dir.path().join("kept"), "lotus-test-").expect("private");
    let path = p.path().to_path_buf();
    assert_eq!(
        std::fs::metadata(&path).expect("meta").mode() & 0o7777,
        0o700
    );
    p.create_dir(Path::new("sub")).expect("mkdir");
    let file = p.write(Path::new("sub/a.py"), b"x = 1\n").expect("write");
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "x = 1\n");
    assert!(p.write(Path::new("sub/a.py"), b"again").is_err(), "O_EXCL");
    assert!(p.write(Path::new("../escape"), b"x").is_err());
    std::os::unix::fs::symlink(&outside, path.join("sub/link")).expect("link");
    drop(p);
    assert!(!path.exists());
    assert!(outside.join("keep.txt").is_file());
    let kept = PrivateDir::new_in(dir.path(), "lotus-test-")
        .expect("private")
        .keep();
    assert!(kept.is_dir());
}

#[test]
fn only_folders_of_a_lotus_that_is_gone_are_removed() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let folder = |name: &str, owner: Option<&str>| {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::write(dir.join("lotus_harness.py"), "").expect("write");
        if let Some(owner) = owner {
            std::fs::write(dir.join(crate::OWNER_FILE), owner).expect("write");
        }
        dir
    };
    let mut gone = std::process::Command::new("true").spawn().expect("true");
    gone.wait().expect("wait");
    let stale = folder("lotus-harness-stale", Some(&format!("{} 1", gone.id())));
    let reused = folder(
        "lotus-harness-reused",
        Some(&format!("{} 1", std::process::id())),
    );
    let live = folder(
        "lotus-harness-live",
        crate::owner_stamp(std::process::id()).as_deref(),
    );
    let unstamped = folder("lotus-harness-old", None);
    let other = folder("not-lotus", Some(&format!("{} 1", gone.id())));
    crate::remove_stale_folders(tmp.path(), "lotus-harness-");
    assert!(!stale.exists() && !reused.exists());
    assert!(live.exists() && unstamped.exists() && other.exists());
}

#[test]
fn temp_files_have_no_name_and_mode_0600() {
    let mut f = crate::temp_file().expect("temp file");
    f.write_all(b"spill").expect("write");
    let meta = f.metadata().expect("meta");
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert_eq!(meta.nlink(), 0);
}

#[test]
fn a_descriptor_named_in_proc_is_written_in_place() {
    // `/dev/stdout` leads to `/proc/self/fd/1`, the kernel's link to an open
    // file (here a pipe: its "text" is no path).
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: pipe(2) just gave us these descriptors.
    let (read, write) = unsafe {
        use std::os::fd::FromRawFd;
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    let path = format!("/proc/self/fd/{}", fds[1]);
    write_file(Path::new(&path), b"through /proc").expect("write");
    drop(write);
    let mut text = String::new();
    std::io::Read::read_to_string(&mut &read, &mut text).expect("read");
    assert_eq!(text, "through /proc");
}

#[test]
fn readable_by_all_opens_only_what_it_names_and_never_follows_a_link() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = PrivateDir::new_in(dir.path(), "lotus-test-").expect("private");
    let mode = |rel: &str| {
        std::fs::symlink_metadata(p.path().join(rel))
            .expect("meta")
            .mode()
            & 0o7777
    };
    p.create_dir(Path::new("pkg")).expect("mkdir");
    p.create_file(Path::new("pkg/a.py"), 0o600).expect("file");
    p.create_dir(Path::new("status")).expect("mkdir");
    p.readable_by_all(&[Path::new("pkg"), Path::new("pkg/a.py")])
        .expect("share");
    assert_eq!(
        (mode(""), mode("pkg"), mode("pkg/a.py"), mode("status")),
        (0o755, 0o755, 0o644, 0o700)
    );
    // A link among the names is refused, and what it points to untouched.
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, "x").expect("write");
    chmod(&outside, 0o600);
    std::os::unix::fs::symlink(&outside, p.path().join("pkg/link")).expect("link");
    assert!(p.readable_by_all(&[Path::new("pkg/link")]).is_err());
    assert_eq!(
        std::fs::metadata(&outside).expect("meta").mode() & 0o7777,
        0o600
    );
}

#[test]
fn a_failed_call_says_its_reason_once_in_a_printed_chain() {
    // Callers print the chain (`anyhow`'s `{:#}`: each error, then its
    // source's): the reason is in the message, so it must not be a source
    // too, or "Not a directory" would be printed twice.
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("file"), "").expect("write");
    let e = write_file(&dir.path().join("file/out"), b"x").expect_err("a file on the way");
    assert!(matches!(e, Error::Io { .. }), "{e}");
    let mut chain = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        chain = format!("{chain}: {s}");
        source = s.source();
    }
    assert_eq!(chain.matches("Not a directory").count(), 1, "{chain}");
}
