use super::*;

const MS: u64 = 1_000_000;

/// A tree of `A`, `A/B`, `A/C`: their path ids.
fn tree() -> (Tree, [u32; 3]) {
    let mut t = Tree::default();
    let a = t.intern(None, 0);
    let b = t.intern(Some(a), 1);
    let c = t.intern(Some(a), 2);
    (t, [a, b, c])
}

/// The slices of `samples` (times in ms) at a 1 ms interval, as (place,
/// depth, start ms, end ms, samples).
fn slices_of(t: &Tree, samples: &[(u64, Place)]) -> Vec<(Place, u32, u64, u64, u64)> {
    let samples: Vec<(u64, Place)> = samples.iter().map(|&(ms, p)| (ms * MS, p)).collect();
    thread_slices(&samples, |at, out| levels(t, at, out), MS)
        .into_iter()
        .map(|s| (s.at, s.depth, s.start_ns / MS, s.end_ns / MS, s.samples))
        .collect()
}

#[test]
fn consecutive_samples_on_one_stack_make_one_slice_per_level() {
    let (t, [a, b, _]) = tree();
    let s = slices_of(
        &t,
        &[(0, Place::Op(b)), (1, Place::Op(b)), (2, Place::Op(b))],
    );
    assert_eq!(
        s,
        vec![(Place::Op(a), 0, 0, 3, 3), (Place::Op(b), 1, 0, 3, 3)],
        "from the first sample to the last plus an interval"
    );
}

#[test]
fn a_gap_of_more_than_three_intervals_ends_the_slices() {
    let (t, [a, b, _]) = tree();
    // 1 -> 4 is 3 intervals: kept; 4 -> 8 is 4: a new slice.
    let s = slices_of(
        &t,
        &[
            (0, Place::Op(b)),
            (1, Place::Op(b)),
            (4, Place::Op(b)),
            (8, Place::Op(b)),
        ],
    );
    assert_eq!(
        s,
        vec![
            (Place::Op(a), 0, 0, 5, 3),
            (Place::Op(b), 1, 0, 5, 3),
            (Place::Op(a), 0, 8, 9, 1),
            (Place::Op(b), 1, 8, 9, 1),
        ]
    );
}

#[test]
fn children_change_under_one_parent_slice_and_nest_in_it() {
    let (t, [a, b, c]) = tree();
    let s = slices_of(
        &t,
        &[
            (0, Place::Op(b)),
            (1, Place::Op(b)),
            (2, Place::Op(a)),
            (3, Place::Op(c)),
            (4, Place::Op(c)),
        ],
    );
    assert_eq!(
        s,
        vec![
            (Place::Op(a), 0, 0, 5, 5),
            (Place::Op(b), 1, 0, 2, 2),
            (Place::Op(c), 1, 3, 5, 2),
        ],
        "A's own sample at 2 ms is in A alone"
    );
}

#[test]
fn a_sample_in_no_op_gets_no_slice_and_ends_the_open_ones() {
    let (t, [a, _, _]) = tree();
    let s = slices_of(
        &t,
        &[
            (0, Place::Op(a)),
            (1, Place::None),
            (2, Place::Op(a)),
            (3, Place::Next),
            (4, Place::Next),
        ],
    );
    assert_eq!(
        s,
        vec![
            (Place::Op(a), 0, 0, 1, 1),
            (Place::Op(a), 0, 2, 3, 1),
            (Place::Next, 0, 3, 5, 2),
        ]
    );
    assert!(slices_of(&t, &[(0, Place::None), (1, Place::None)]).is_empty());
}

#[test]
fn a_slice_ends_at_the_next_sample_where_it_came_within_an_interval() {
    let (t, [a, b, c]) = tree();
    let samples = [(0, Place::Op(b)), (MS / 2, Place::Op(c))];
    let s = thread_slices(&samples, |at, out| levels(&t, at, out), MS);
    let ends: Vec<(Place, u64, u64)> = s.iter().map(|s| (s.at, s.start_ns, s.end_ns)).collect();
    assert_eq!(
        ends,
        vec![
            (Place::Op(a), 0, MS / 2 + MS),
            (Place::Op(b), 0, MS / 2),
            (Place::Op(c), MS / 2, MS / 2 + MS),
        ],
        "siblings never overlap"
    );
}

/// Every slice of a thread lies inside the one open at its start (the
/// nesting a trace viewer needs of complete events on one track).
fn assert_nested(t: &FrameThread, ops: &[FrameOp]) {
    let mut open: Vec<&FrameSlice> = Vec::new();
    for s in &t.slices {
        assert!(s.start_ns <= s.end_ns, "{s:?}");
        while open.last().is_some_and(|p| p.end_ns <= s.start_ns) {
            open.pop();
        }
        let depth = ops[s.op as usize].depth as usize;
        assert_eq!(open.len(), depth, "{s:?} under {open:?}");
        if let Some(p) = open.last() {
            assert!(s.end_ns <= p.end_ns, "{s:?} past its parent {p:?}");
            let (child, parent) = (&ops[s.op as usize].path, &ops[p.op as usize].path);
            assert!(
                child.starts_with(&format!("{parent}/")),
                "{child} in {parent}"
            );
        }
        open.push(s);
    }
}

#[test]
fn a_folders_slices_add_up_to_its_rows_and_nest() {
    let dir = super::super::frame_ops::tests::pipeline();
    let spans = frame_spans(dir.path(), "lotus").expect("spans");
    let a = attribute_frames(dir.path(), "lotus", 5).expect("rows");
    assert_eq!(spans.total_samples, a.total_samples);
    let mut by_path: HashMap<&str, u64> = HashMap::new();
    for t in &spans.threads {
        assert_nested(t, &spans.ops);
        for s in &t.slices {
            *by_path.entry(&spans.ops[s.op as usize].path).or_default() += s.samples;
        }
    }
    let mut in_rows = 0;
    for r in &a.rows {
        let want = match r.kind {
            RowKind::Op => r.inclusive_samples,
            _ if r.name == NEXT_ROW => r.samples,
            _ => continue,
        };
        in_rows += if r.kind == RowKind::Op {
            r.samples
        } else {
            want
        };
        assert_eq!(by_path.remove(r.path.as_str()), Some(want), "{}", r.path);
    }
    assert!(by_path.is_empty(), "slices of no row: {by_path:?}");
    assert_eq!(spans.in_slices, in_rows);
    assert!(in_rows > 0 && in_rows < spans.total_samples);
    // The worker (its loop) and the main process (its next(loader)).
    assert_eq!(spans.roles.get(&20), Some(&Role::Worker));
    assert_eq!(spans.roles.get(&10), Some(&Role::Main));
    let worker = spans.threads.iter().find(|t| t.pid == 20).expect("worker");
    let main = spans.threads.iter().find(|t| t.pid == 10).expect("main");
    assert!(worker
        .slices
        .iter()
        .any(|s| spans.ops[s.op as usize].depth == 1));
    assert!(main
        .slices
        .iter()
        .all(|s| spans.ops[s.op as usize].name == NEXT_SLICE));
    // The top level alone: no slice below it.
    let top = spans.clone().top_level();
    assert!(top
        .threads
        .iter()
        .flat_map(|t| &t.slices)
        .all(|s| top.ops[s.op as usize].depth == 0));
    assert!(top.threads.iter().map(|t| t.slices.len()).sum::<usize>() > 0);
}

#[test]
fn a_folder_without_call_stacks_is_an_error_naming_its_samples() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut w = lotus_samples::SamplesWriter::create(dir.path(), "lotus").expect("w");
    let symbol = lotus_samples::Symbol::new("f", "/k.so");
    lotus_samples::SampleSink::symbols(&mut w, &[(0, symbol)]).expect("s");
    let sample = crate::in_pipeline::tests::sample_at(5, 1, 0);
    lotus_samples::SampleSink::samples(&mut w, &[sample]).expect("samples");
    lotus_samples::SampleSink::finish(&mut w).expect("finish");
    match frame_spans(dir.path(), "lotus") {
        Err(Error::NoStacks { path }) => assert!(path.ends_with("lotus.samples"), "{path}"),
        other => panic!("{other:?}"),
    }
}
