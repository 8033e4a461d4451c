//! The log grammar pinned on both sides: `fixtures/trace/golden/
//! tracer_lines.txt` holds what the tracer's Python writers give for fixed
//! inputs (checked by `lotus-tracer/python/tests/test_tracer.py`, class
//! `Golden`); here the reader parses each line into the fields it means,
//! and each header of `tracer_headers.txt` into the job fields it names.

use crate::common;
use lotus_trace::{parse_event_line, HandedBy, Kind};

/// Each golden line, as the reader must read it: (name, kind, start,
/// duration, batch, sample, tid, cpu, hook, hook_in, task).
type Want = (
    &'static str,
    Kind,
    u64,
    u64,
    Option<u64>,
    Option<u64>,
    Option<u32>,
    Option<u64>,
    Option<u64>,
    Option<u64>,
    Option<HandedBy>,
);

#[test]
fn the_readers_read_the_tracers_golden_lines() {
    let text = std::fs::read_to_string(common::fixture("trace").join("golden/tracer_lines.txt"))
        .expect("golden lines");
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    let t = Some(4243);
    let want: [Want; 7] = [
        (
            "Blur",
            Kind::Op,
            100,
            50,
            Some(3),
            Some(7),
            t,
            Some(40),
            Some(3),
            Some(1),
            None,
        ),
        (
            "Collation",
            Kind::Op,
            200,
            60,
            Some(3),
            None,
            t,
            Some(55),
            None,
            None,
            None,
        ),
        (
            "Decode",
            Kind::Op,
            300,
            20,
            None,
            Some(9),
            t,
            None,
            None,
            None,
            None,
        ),
        (
            "gc",
            Kind::Op,
            400,
            100,
            None,
            None,
            t,
            Some(90),
            None,
            None,
            None,
        ),
        (
            "crunch",
            Kind::Task,
            600,
            100,
            None,
            None,
            Some(4244),
            None,
            None,
            None,
            Some(HandedBy {
                by: 4243,
                at_ns: 550,
            }),
        ),
        (
            "Wait",
            Kind::Wait,
            800,
            100,
            Some(4),
            None,
            t,
            None,
            None,
            None,
            None,
        ),
        (
            "Wait",
            Kind::Wait,
            1000,
            100,
            Some(5),
            None,
            None,
            None,
            None,
            None,
            None,
        ),
    ];
    assert_eq!(lines.len(), want.len(), "{lines:?}");
    for (line, w) in lines.iter().zip(want) {
        let e = parse_event_line(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        let got: Want = (
            w.0,
            e.kind,
            e.start_ns,
            e.dur_ns,
            e.batch,
            e.sample,
            e.tid,
            e.cpu_ns,
            e.hook_ns,
            e.hook_in_ns,
            e.task,
        );
        assert_eq!(e.name, w.0, "{line}");
        assert_eq!(got, w, "{line}");
    }
    // The waits say whether the batch was ready.
    let ready: Vec<Option<bool>> = lines[5..]
        .iter()
        .map(|l| parse_event_line(l).expect("wait").ready)
        .collect();
    assert_eq!(ready, [Some(true), Some(false)]);
}

/// The header's job fields pinned on both sides:
/// `fixtures/trace/golden/tracer_headers.txt` holds what the tracer's
/// `job_fields` gives for the launchers' environments of its test; here
/// each is read as a header: (rank, world size, node, job).
#[test]
fn the_reader_reads_the_tracers_golden_headers() {
    use lotus_trace::LogHeader;
    let text = std::fs::read_to_string(common::fixture("trace").join("golden/tracer_headers.txt"))
        .expect("golden headers");
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    type Head = (Option<u32>, Option<u32>, Option<u32>, Option<&'static str>);
    let want: [Head; 7] = [
        (
            Some(3),
            Some(4),
            Some(1),
            Some("torchrun:job7@10.0.0.1:29500"),
        ),
        (
            Some(0),
            Some(2),
            Some(0),
            Some("torchrun:none@localhost:41000"),
        ),
        (Some(5), Some(8), Some(2), Some("slurm:9001.0")),
        (Some(6), Some(8), Some(1), Some("torchrun:r@n0:1")),
        (None, None, None, Some("ray:02000000")),
        (None, None, None, None),
        (None, None, None, Some("torchrun:has_space@a_b:-")),
    ];
    assert_eq!(lines.len(), want.len(), "{lines:?}");
    for (line, want) in lines.iter().zip(want) {
        let (h, problems) = LogHeader::parse(&format!("#lotus-trace v1 role=main pid=1 {line}"));
        assert!(problems.is_empty(), "{line}: {problems:?}");
        assert_eq!(
            (h.rank, h.world_size, h.node, h.job.as_deref()),
            want,
            "{line}"
        );
    }
}
