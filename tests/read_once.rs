//! `lotus report` of a sampled trace folder reads each of the folder's
//! files once, whatever number of rows, views and figures read it: the
//! statistics, the predictions (twice: from the logs, then with the
//! samples' CPU), the samples' attribution, the timeline and the flame
//! graphs all read through one copy of the folder. Counted by the kernel:
//! an inotify watch on the folder sees every open of a file in it.

use std::collections::BTreeMap;
use std::mem::MaybeUninit;
use std::path::Path;

use rustix::fs::inotify;
use rustix::io::Errno;

use crate::common::{lotus_ok, s};

/// The files in `dir` opened while `f` ran, with how many times each was
/// (opens for reading or writing; an `O_PATH` handle reads nothing and is
/// not an open to inotify).
fn opens_while(dir: &Path, f: impl FnOnce()) -> BTreeMap<String, u64> {
    let fd = inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC)
        .expect("inotify_init1");
    // Reads and closes are watched too: the kernel merges an event into
    // the one before it when the two are alike and unread, so two opens in
    // a row would count once; with each read and close between them they
    // never follow each other.
    inotify::add_watch(
        &fd,
        dir,
        inotify::WatchFlags::OPEN
            | inotify::WatchFlags::ACCESS
            | inotify::WatchFlags::CLOSE_NOWRITE
            | inotify::WatchFlags::CLOSE_WRITE,
    )
    .expect("inotify_add_watch");
    f();
    let mut counts = BTreeMap::new();
    let mut buf = [MaybeUninit::uninit(); 1 << 16];
    let mut events = inotify::Reader::new(&fd, &mut buf);
    loop {
        let e = match events.next() {
            Ok(e) => e,
            Err(Errno::WOULDBLOCK) => break,
            Err(e) => panic!("reading inotify events: {e}"),
        };
        assert!(
            !e.events().contains(inotify::ReadFlags::QUEUE_OVERFLOW),
            "the inotify queue overflowed: opens were lost"
        );
        if e.events().contains(inotify::ReadFlags::OPEN) {
            let name = e
                .file_name()
                .map_or_else(|| ".".to_string(), |n| n.to_string_lossy().into_owned());
            *counts.entry(name).or_insert(0) += 1;
        }
    }
    counts
}

/// A real sampled run with call stacks (tests/stacks.rs's job: Python
/// calling a C library in an op), then `lotus report` of its folder: every
/// file of the folder it reads (the log, the samples, their symbols,
/// stacks and sampling description, the run record) is opened once. It
/// was opened 10 to 14 times each while every reader opened the folder
/// anew.
#[test]
fn a_report_opens_each_file_of_a_sampled_folder_once() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = crate::stacks::trace(tmp.path(), "fp");
    let dir = Path::new(&out);
    let page = tmp.path().join("report.html");
    let opens = opens_while(dir, || {
        lotus_ok(&["report", "--trace", &out, "--out", s(&page)]);
    });
    let files: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    for expected in [
        "lotus.samples",
        "lotus.stacks",
        "lotus.symbols",
        "lotus.sampling",
    ] {
        assert!(
            files.iter().any(|f| f == expected),
            "{expected} missing from {files:?}"
        );
    }
    let logs: Vec<&String> = files.iter().filter(|f| f.starts_with("lotus_")).collect();
    assert!(!logs.is_empty(), "no log in {files:?}");
    let mut wrong = Vec::new();
    for f in &files {
        let n = opens.get(f).copied().unwrap_or(0);
        // Each file the report reads, once; the page's flame graphs show
        // the stacks were read (and the samples, the logs: the rows).
        if n != 1 {
            wrong.push(format!("{f}: opened {n} times"));
        }
    }
    assert!(
        wrong.is_empty(),
        "each file of the folder should be opened once: {}\n(all opens: {opens:?})",
        wrong.join(", ")
    );
    let html = std::fs::read_to_string(&page).expect("page");
    assert!(html.contains("Spin"), "the op is not on the page");
}
