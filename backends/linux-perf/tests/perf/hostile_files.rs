//! The symbolizer against the files a traced process controls (the
//! process may run as another user, and lotus as root): a library swapped
//! for a FIFO after it was mapped, a sparse ELF whose headers claim 10^8
//! symbols, and a `ulimit -n` too low to keep every library open. Each
//! ends in bounded time and small memory, with the functions named or a
//! note that says how many samples could not be named and why.

use std::ffi::OsString;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use crate::common::*;
use lotus_backend_perf::{LinuxPerf, PerfCollection, PerfOptions, PerfReport};
use lotus_core::{CollectOptions, Collection};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

/// The unprivileged user of the hostile-user tests.
const NOBODY: u32 = 65534;

/// How long `finish` may take: a bound for a hang (symbolizing these
/// targets takes milliseconds), not a timing.
const FINISH_LIMIT: Duration = Duration::from_secs(60);

fn skip(test: &str, reason: &str) {
    eprintln!("skipped: {test}: {reason}");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run build tool");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A temporary folder every user can reach (the tests' own TMPDIR
/// folders are private to root).
fn reachable_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("lotus-symbols-")
        .tempdir_in(std::env::temp_dir())
        .expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

/// Builds `lib_dir/libhot.so` (symbols kept: `hot_kernel` in `.symtab`)
/// and `exe_dir/burn` linked to it.
fn build_lib_and_burn(lib_dir: &Path, exe_dir: &Path) -> (PathBuf, PathBuf) {
    let lib = lib_dir.join("libhot.so");
    run(Command::new("gcc")
        .args(["-O1", "-fPIC", "-shared", "-o"])
        .arg(&lib)
        .arg(Path::new(DATA).join("libhot.c")));
    let exe = exe_dir.join("burn");
    run(Command::new("gcc")
        .args(["-O1", "-pthread", "-DWITH_LIB", "-o"])
        .arg(&exe)
        .arg(Path::new(DATA).join("burn.c"))
        .arg(format!("-L{}", lib_dir.display()))
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-lhot"));
    (lib, exe)
}

/// `c.finish()` on a thread of its own: the report, or a failure when it
/// has not returned within [`FINISH_LIMIT`] (symbolization hangs).
fn finish_within_limit(c: PerfCollection) -> PerfReport {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(c.finish());
    });
    match rx.recv_timeout(FINISH_LIMIT) {
        Ok(report) => report.expect("finish"),
        Err(_) => panic!("finish did not return within {FINISH_LIMIT:?}: symbolization hangs"),
    }
}

/// The samples in `module` and the note about them, if any.
fn unnamed_in<'r>(report: &'r PerfReport, module: &str) -> (f64, Option<&'r String>) {
    let samples = report
        .report
        .rows
        .iter()
        .filter(|r| r.module_path.as_deref() == Some(module))
        .map(|r| r.value)
        .sum();
    let note = report
        .notes
        .iter()
        .find(|n| n.contains(&format!(" in {module} could not be named: ")));
    (samples, note)
}

/// A process running as `nobody` maps a library from a folder it owns,
/// is sampled in it, then replaces the library file with a FIFO before
/// lotus (root) symbolizes: lotus must not open the FIFO and wait for a
/// writer (it used to, for ever, deaf to SIGTERM). It finishes, and names
/// the functions from the file the process mapped or says, with the
/// figure, that it could not and why.
#[test]
fn a_library_swapped_for_a_fifo_is_refused_not_waited_on() {
    let test = "a_library_swapped_for_a_fifo_is_refused_not_waited_on";
    if !is_root() {
        skip(test, "not root: cannot act as another user");
        return;
    }
    let Ok(setpriv) = which("setpriv") else {
        skip(test, "no setpriv to run the target as nobody");
        return;
    };
    let _serial = serial();
    let dir = reachable_dir();
    let owned = dir.path().join("owned");
    std::fs::create_dir(&owned).expect("mkdir");
    let (lib, exe) = build_lib_and_burn(&owned, dir.path());
    for p in [&owned, &lib] {
        std::os::unix::fs::chown(p, Some(NOBODY), Some(NOBODY)).expect("chown");
    }

    let mut ch = Channel::new();
    let mut target = ch.target(&exe, "lib", 0.5);
    let setpriv_args: Vec<OsString> = ["--reuid=65534", "--regid=65534", "--clear-groups", "--"]
        .into_iter()
        .map(OsString::from)
        .chain([exe.clone().into_os_string()])
        .collect();
    target.args.splice(0..0, setpriv_args);
    target.program = setpriv;
    let mut c = start(&mut ch, &target);
    ch.expect(b'r');
    c.resume().expect("resume");
    ch.go();
    ch.expect(b'd');
    c.pause().expect("pause");
    // The owner swaps its library for a FIFO; the process keeps the
    // inode it mapped.
    run(Command::new("sh")
        .args(["-c", "rm -f \"$1\" && mkfifo \"$1\"", "sh"])
        .arg(&lib)
        .uid(NOBODY)
        .gid(NOBODY));
    ch.go();
    wait_exit(&mut c);

    let report = finish_within_limit(c);
    let module = lib.to_string_lossy();
    eprintln!("{}\nnotes: {:#?}", top(&report, 8), report.notes);
    let named = samples_of(&report, "hot_kernel", "libhot.so");
    let (in_module, note) = unnamed_in(&report, &module);
    assert!(
        in_module >= 20.0,
        "too few samples in {module}:\n{}",
        top(&report, 8)
    );
    match note {
        // Named from the very file the process mapped.
        None => assert!(named >= 0.9 * in_module, "{}", top(&report, 8)),
        // Or said why not, with how many samples.
        Some(note) => {
            assert!(
                note.starts_with(&format!("{in_module} samples (")),
                "{note}"
            );
            assert!(note.contains("FIFO"), "{note}");
        }
    }
}

fn which(program: &str) -> Result<PathBuf, ()> {
    let path = std::env::var_os("PATH").ok_or(())?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .ok_or(())
}

/// Offset of the code in the crafted ELF file.
const CODE_AT: u64 = 0x1000;
/// Offset of its symbol table.
const SYMTAB_AT: u64 = 0x3000;
/// The symbols its header claims.
const CLAIMED_SYMBOLS: u64 = 100_000_000;

/// Writes a 64-bit ELF file whose `.symtab` header claims
/// [`CLAIMED_SYMBOLS`] symbols (2.4 GB) where the file holds 16 KiB of
/// them: a sparse file of some 20 KiB on disk. Its first page is
/// loadable and executable and holds, at [`CODE_AT`], a function that
/// counts down and returns.
fn write_sparse_elf(path: &Path) {
    fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
        buf[at..at + bytes.len()].copy_from_slice(bytes);
    }
    let shstrtab: &[u8] = b"\0.text\0.symtab\0.shstrtab\0";
    let (text_name, symtab_name, shstrtab_name) = (1u32, 7u32, 15u32);
    let shoff = 0x2000usize;
    let shstrtab_at = 0x2100usize;
    let mut head = vec![0u8; SYMTAB_AT as usize];
    // ELF header.
    put(&mut head, 0, b"\x7fELF\x02\x01\x01");
    put(&mut head, 16, &3u16.to_le_bytes()); // ET_DYN
    put(&mut head, 18, &62u16.to_le_bytes()); // EM_X86_64
    put(&mut head, 20, &1u32.to_le_bytes());
    put(&mut head, 32, &64u64.to_le_bytes()); // e_phoff
    put(&mut head, 40, &(shoff as u64).to_le_bytes()); // e_shoff
    put(&mut head, 52, &64u16.to_le_bytes()); // e_ehsize
    put(&mut head, 54, &56u16.to_le_bytes()); // e_phentsize
    put(&mut head, 56, &1u16.to_le_bytes()); // e_phnum
    put(&mut head, 58, &64u16.to_le_bytes()); // e_shentsize
    put(&mut head, 60, &4u16.to_le_bytes()); // e_shnum
    put(&mut head, 62, &3u16.to_le_bytes()); // e_shstrndx
                                             // PT_LOAD, R+X, the first two pages.
    let ph = 64;
    put(&mut head, ph, &1u32.to_le_bytes());
    put(&mut head, ph + 4, &5u32.to_le_bytes());
    put(&mut head, ph + 32, &0x2000u64.to_le_bytes()); // p_filesz
    put(&mut head, ph + 40, &0x2000u64.to_le_bytes()); // p_memsz
    put(&mut head, ph + 48, &0x1000u64.to_le_bytes()); // p_align
                                                       // mov ecx, 100000; 1: dec ecx; jnz 1b; ret
    put(
        &mut head,
        CODE_AT as usize,
        &[0xb9, 0xa0, 0x86, 0x01, 0x00, 0xff, 0xc9, 0x75, 0xfc, 0xc3],
    );
    // Section headers: null, .text, .symtab, .shstrtab.
    let section = |head: &mut Vec<u8>, i: usize, fields: [u64; 8]| {
        let at = shoff + 64 * i;
        put(head, at, &(fields[0] as u32).to_le_bytes()); // sh_name
        put(head, at + 4, &(fields[1] as u32).to_le_bytes()); // sh_type
        put(head, at + 8, &fields[2].to_le_bytes()); // sh_flags
        put(head, at + 16, &fields[3].to_le_bytes()); // sh_addr
        put(head, at + 24, &fields[4].to_le_bytes()); // sh_offset
        put(head, at + 32, &fields[5].to_le_bytes()); // sh_size
        put(head, at + 40, &(fields[6] as u32).to_le_bytes()); // sh_link
        put(head, at + 56, &fields[7].to_le_bytes()); // sh_entsize
    };
    let (alloc_exec, progbits, symtab, strtab) = (0x6, 1, 2, 3);
    section(
        &mut head,
        1,
        [
            u64::from(text_name),
            progbits,
            alloc_exec,
            CODE_AT,
            CODE_AT,
            0x100,
            0,
            0,
        ],
    );
    section(
        &mut head,
        2,
        [
            u64::from(symtab_name),
            symtab,
            0,
            0,
            SYMTAB_AT,
            CLAIMED_SYMBOLS * 24,
            3,
            24,
        ],
    );
    section(
        &mut head,
        3,
        [
            u64::from(shstrtab_name),
            strtab,
            0,
            0,
            shstrtab_at as u64,
            shstrtab.len() as u64,
            0,
            0,
        ],
    );
    put(&mut head, shstrtab_at, shstrtab);
    // 16 KiB of real symbols (all `.text`, a function at CODE_AT), then
    // nothing: the rest of the claimed table is a hole.
    let mut symbols = Vec::new();
    for _ in 0..(16 << 10) / 24 {
        symbols.extend_from_slice(&text_name.to_le_bytes());
        symbols.push(0x12); // STB_GLOBAL, STT_FUNC
        symbols.push(0);
        symbols.extend_from_slice(&1u16.to_le_bytes());
        symbols.extend_from_slice(&CODE_AT.to_le_bytes());
        symbols.extend_from_slice(&16u64.to_le_bytes());
    }
    let file = std::fs::File::create(path).expect("create");
    file.write_all_at(&head, 0).expect("write");
    file.write_all_at(&symbols, SYMTAB_AT).expect("write");
    file.set_len(SYMTAB_AT + CLAIMED_SYMBOLS * 24)
        .expect("a sparse 2.4 GB file");
}

/// This process's peak resident memory (VmHWM) in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kb * 1024
}

/// CPU time this process has used.
fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) },
        0
    );
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A sparse ELF file (20 KiB on disk) whose symbol table header claims
/// 10^8 entries, mapped and run by the target: symbolizing it must stay
/// small and quick (it used to allocate and zero the 2.4 GB the header
/// claims), and the samples in it are reported as unnamed, with why.
#[test]
fn a_sparse_elf_claiming_1e8_symbols_is_refused_with_little_memory() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let elf = dir.path().join("sparse.so");
    write_sparse_elf(&elf);
    let meta = std::fs::metadata(&elf).expect("stat");
    assert!(meta.len() > 2_000_000_000, "{}", meta.len());
    if meta.blocks() * 512 > 64 << 10 {
        skip(
            "a_sparse_elf_claiming_1e8_symbols_is_refused_with_little_memory",
            &format!(
                "the temp folder's filesystem keeps no holes ({} bytes on disk)",
                meta.blocks() * 512
            ),
        );
        return;
    }
    let exe = dir.path().join("map_exec");
    run(Command::new("gcc")
        .args(["-O1", "-o"])
        .arg(&exe)
        .arg(Path::new(DATA).join("map_exec.c")));

    let mut ch = Channel::new();
    let mut target = ch.target(&exe, &elf.to_string_lossy(), 0.3);
    target.args.insert(3, format!("{CODE_AT:x}").into());
    let mut c = start(&mut ch, &target);
    ch.expect(b'r');
    c.resume().expect("resume");
    ch.go();
    ch.expect(b'd');
    c.pause().expect("pause");
    ch.go();
    wait_exit(&mut c);

    // Peak memory from here on: "5" resets VmHWM to the current RSS.
    std::fs::write("/proc/self/clear_refs", "5").expect("reset VmHWM");
    let before = peak_rss();
    let cpu = process_cpu();
    let report = finish_within_limit(c);
    let cpu = process_cpu() - cpu;
    let peak = peak_rss();
    let module = elf.to_string_lossy();
    eprintln!(
        "VmHWM {before} -> {peak} bytes, {cpu:?} CPU\n{}\nnotes: {:#?}",
        top(&report, 8),
        report.notes
    );
    assert!(
        peak < before + (128 << 20),
        "symbolizing took {} MiB more memory",
        (peak - before) >> 20
    );
    assert!(cpu < Duration::from_secs(3), "symbolizing took {cpu:?} CPU");
    let (in_module, note) = unnamed_in(&report, &module);
    assert!(
        in_module >= 20.0,
        "too few samples in {module}:\n{}",
        top(&report, 8)
    );
    let note = note.unwrap_or_else(|| panic!("no note for {module}: {:#?}", report.notes));
    assert!(
        note.starts_with(&format!("{in_module} samples (")),
        "{note}"
    );
    assert!(
        note.contains(".symtab") && note.contains("sparse"),
        "{note}"
    );
}

/// Set in the child of [`at_ulimit_n_20_library_functions_are_named_or_counted`].
const FD_CHILD: &str = "LOTUS_TEST_FD_LIMIT_CHILD";

/// The libraries `many_libs` burns CPU in.
const LIBS: usize = 6;

/// Builds `dir/libhotN.so` (N = 1..=6, libhot.c with its functions
/// renamed `hot_entry_N`, `hot_kernel_N`; symbols kept) and
/// `dir/many_libs` linked to all of them.
fn build_many_libs(dir: &Path) -> Vec<PathBuf> {
    let mut libs = Vec::new();
    for n in 1..=LIBS {
        let lib = dir.join(format!("libhot{n}.so"));
        run(Command::new("gcc")
            .args(["-O1", "-fPIC", "-shared"])
            .arg(format!("-Dhot_entry=hot_entry_{n}"))
            .arg(format!("-Dhot_kernel=hot_kernel_{n}"))
            .arg(format!("-Dhot_sink=hot_sink_{n}"))
            .arg("-o")
            .arg(&lib)
            .arg(Path::new(DATA).join("libhot.c")));
        libs.push(lib);
    }
    let mut link = Command::new("gcc");
    link.args(["-O1", "-o"])
        .arg(dir.join("many_libs"))
        .arg(Path::new(DATA).join("many_libs.c"))
        .arg(format!("-L{}", dir.display()))
        .arg(format!("-Wl,-rpath,{}", dir.display()));
    for n in 1..=LIBS {
        link.arg(format!("-lhot{n}"));
    }
    run(&mut link);
    libs
}

/// The lotus side (this test binary, run again) at `ulimit -n 20` (or
/// the lowest limit perf can start under here: it needs some descriptors
/// per CPU), on a job whose samples land in six shared libraries: each
/// library's functions are named, or a note gives how many samples are
/// not and why. (Three descriptors were kept per library read, so the
/// libraries after the first few came out `[unknown]` without a word.)
#[test]
fn at_ulimit_n_20_library_functions_are_named_or_counted() {
    if std::env::var_os(FD_CHILD).is_some() {
        return;
    }
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let libs = build_many_libs(dir.path());
    let mut found = None;
    for limit in (20..=200).step_by(2) {
        let mut child = Command::new(std::env::current_exe().expect("own exe"));
        child
            .args([
                "--exact",
                "hostile_files::low_fd_limit_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(FD_CHILD, dir.path());
        // SAFETY: setrlimit is async-signal-safe.
        unsafe {
            child.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = child.output().expect("run the child");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        eprintln!(
            "ulimit -n {limit}:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "child failed at ulimit -n {limit}");
        // The child's name is its path in this binary: a renamed module
        // would run no test and pass.
        assert!(
            stdout.contains("test result: ok. 1 passed"),
            "no child test ran at ulimit -n {limit}"
        );
        if !stdout.contains("start-failed\t") {
            found = Some(stdout);
            break;
        }
    }
    let stdout = found.expect("perf could not start under any limit up to 200");
    let rows: Vec<(f64, &str, &str)> = stdout
        .lines()
        .filter_map(|l| {
            let mut f = l.strip_prefix("row\t")?.splitn(3, '\t');
            Some((f.next()?.parse().ok()?, f.next()?, f.next()?))
        })
        .collect();
    let notes: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("note\t"))
        .collect();
    // Kernel samples too: named from kallsyms, or counted in a note.
    let kernel: f64 = rows.iter().filter(|r| r.2 == "[kernel]").map(|r| r.0).sum();
    let kernel_unnamed: f64 = rows
        .iter()
        .filter(|r| r.2 == "[kernel]" && r.1 == "[kernel]")
        .map(|r| r.0)
        .sum();
    let kernel_noted = notes.iter().any(|n| {
        n.ends_with(&format!(
            ": {kernel_unnamed} samples ({:.1}%) in [kernel] could not be named",
            100.0 * kernel_unnamed / rows.iter().map(|r| r.0).sum::<f64>()
        ))
    });
    assert!(
        kernel_unnamed == 0.0 || kernel_noted,
        "{kernel_unnamed} of {kernel} kernel samples unnamed, no note with the figure: {notes:?}"
    );
    for (n, lib) in libs.iter().enumerate() {
        let module = lib.to_string_lossy();
        let in_module: f64 = rows.iter().filter(|r| r.2 == module).map(|r| r.0).sum();
        let function = format!("hot_kernel_{}", n + 1);
        let named: f64 = rows
            .iter()
            .filter(|r| r.2 == module && r.1 == function)
            .map(|r| r.0)
            .sum();
        assert!(in_module >= 20.0, "too few samples in {module}");
        let note = notes
            .iter()
            .find(|n| n.contains(&format!(" in {module} could not be named: ")));
        match note {
            None => assert!(
                named >= 0.9 * in_module,
                "{module}: {named} of {in_module} named, no note"
            ),
            Some(note) => assert!(
                note.starts_with(&format!("{in_module} samples (")),
                "{note}"
            ),
        }
    }
}

/// The child's part of [`at_ulimit_n_20_library_functions_are_named_or_counted`]
/// (does nothing in a normal run): profiles `many_libs` and prints the
/// rows and notes.
#[test]
fn low_fd_limit_child() {
    let Some(dir) = std::env::var_os(FD_CHILD) else {
        return;
    };
    let exe = Path::new(&dir).join("many_libs");
    let mut ch = Channel::new();
    // Channel::target passes a mode; many_libs takes OUT IN SECONDS.
    let mut target = ch.target(&exe, "", 0.6);
    target.args.remove(2);
    let started = LinuxPerf::default().start_with(
        &target,
        &CollectOptions::default(),
        &PerfOptions::default(),
    );
    let mut c = match started {
        Ok(c) => c,
        // Too few descriptors for perf itself: the parent tries a higher
        // limit.
        Err(e) => {
            println!("start-failed\t{e}");
            return;
        }
    };
    ch.spawned();
    ch.expect(b'r');
    c.resume().expect("resume");
    ch.go();
    ch.expect(b'd');
    c.pause().expect("pause");
    ch.go();
    wait_exit(&mut c);
    let report = c.finish().expect("finish");
    // The harness printed the test's name without a newline.
    println!();
    for r in &report.report.rows {
        let module = r.module_path.as_deref().unwrap_or(&r.module);
        println!("row\t{}\t{}\t{module}", r.value, r.function);
    }
    for n in &report.notes {
        println!("note\t{n}");
    }
}
