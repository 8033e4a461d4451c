//! Where the CPU time of a pipeline went, per Python op: the two ways
//! lotus attributes it.
//!
//! - **Through a mapping** ([`attribute`], [`Attributor`]): a
//!   whole-pipeline profile (one row per native function, from VTune, uProf
//!   or perf) folded back onto the ops whose mapping lists each function.
//! - **In the pipeline** ([`attribute_folder`], [`InPipelineAttribution`]):
//!   a sampled trace folder (`lotus trace run --sample`), each sample
//!   credited to the op span that ran on its thread at its time, with the
//!   per-op stacks ([`folded_folder`]); or, from a folder's samples alone
//!   (no tracer logs: a job sampled without the tracer), each sample
//!   credited to the ops its Python frames show ([`attribute_frames`],
//!   [`attribute_folder_from`]), in the same rows; such a folder is told
//!   from a trace folder by [`samples_alone`].
//!
//! Beside them: a mapping made from a sampled trace ([`mapping_from_trace`]),
//! two mappings compared op by op ([`compare_mappings`]), the verdict
//! on a run ([`Verdict`]: did training wait for data, and what would help),
//! profiles read from disk by content and folded onto a mapping's ops
//! ([`load_profile`]), and a trace folder's views with its samples on its
//! spans: Chrome trace event JSON ([`ChromeView`]; of a folder of samples
//! alone, spans estimated from their frames, [`frame_spans`]) and a
//! Firefox Profiler profile ([`write_firefox_profile`]); and sampled
//! folders' samples as one pprof profile, each labelled with the op
//! attribute credits it to ([`write_pprof`]).
//!
//! # Through a mapping
//!
//! Each profile row (one native function) is matched against the functions
//! of every op ([`MatchMode`]):
//!
//! - no op maps it: the row goes to the [`UNEXPLAINED`] entry, never
//!   dropped, so the entries add up to the profile's total;
//! - one op maps it: the whole row is that op's **exclusive** time;
//! - several ops map it: the row is divided among them, in proportion to
//!   the ops' own times ([`OpTimes`], e.g. from a trace) or equally when no
//!   times are given ([`Split`]). That is the ops' **shared** time.
//!
//! Counters are divided in the same proportion as the time. Two kinds of
//! per-function figures are told apart by name ([`metric_kind`]): counts
//! (`Clockticks`, `Instructions Retired`, times) are summed; metrics
//! (top-down percentages, `Average CPU Frequency`) are averaged, weighted
//! by each row's clockticks (times the row's part in the op). CPI is
//! recomputed as clockticks / instructions from the sums; VTune's per-row
//! `CPI Rate` is not averaged. A profile without a clockticks counter gets
//! no CPI or metric averages, and a note saying so.
//!
//! ## Matching
//!
//! A row matches a mapping function when the function names are equal and
//! the modules are equal after [`normalize_module`] (version suffixes after
//! `.so` dropped: `libjpeg.so.9` = `libjpeg.so.9.5.0`). Where either side
//! does not know the module (`[Unknown]`, as in VTune GUI exports), or with
//! [`MatchMode::Name`], the function name alone decides. A row that
//! several mapping entries of one op match counts once for that op.
//!
//! ```
//! use lotus_attribute::{attribute, Options, UNEXPLAINED};
//! use lotus_core::{Mapping, OpAccumulator, Settings};
//! use lotus_core::{MergeRule, Report, Row, Unit};
//!
//! let op = |name: &str, funcs: &[(&str, &str)]| {
//!     let mut acc = OpAccumulator::new(name);
//!     let rows = funcs.iter().map(|(f, m)| Row::new(f, m, 1.0)).collect();
//!     acc.add_run(&Report::new(Unit::Seconds, rows));
//!     acc.finish(MergeRule::Union)
//! };
//! let mapping = Mapping::new("vtune", Unit::Seconds, Settings::default(), vec![
//!     op("Decode", &[("decode_mcu", "libjpeg.so.9"), ("memcpy", "libc.so.6")]),
//!     op("Crop", &[("resample", "_imaging.so"), ("memcpy", "libc.so.6")]),
//! ]);
//! let profile = Report::new(Unit::Seconds, vec![
//!     Row::new("decode_mcu", "libjpeg.so.9.5.0", 6.0),
//!     Row::new("memcpy", "libc.so.6", 2.0),
//!     Row::new("resample", "_imaging.so", 1.0),
//!     Row::new("PyEval", "python3", 1.0),
//! ]);
//! let a = attribute(&mapping, &profile, &Options::default()).unwrap();
//! let decode = a.op("Decode").unwrap();
//! assert_eq!((decode.value, decode.exclusive, decode.shared), (7.0, 6.0, 1.0));
//! assert_eq!(a.op(UNEXPLAINED).unwrap().value, 1.0);
//! assert_eq!(a.ops.iter().map(|o| o.value).sum::<f64>(), a.total);
//! ```
#![deny(missing_docs)]

mod chrome_frames;
mod chrome_view;
mod documents;
mod error;
mod firefox;
mod from_trace;
mod in_pipeline;
mod in_pipeline_documents;
mod mapped;
mod mapping_compare;
mod pprof;
mod profiles;
mod rank_rows;
mod samples_alone;
mod span_samples;
mod timeline_spans;
mod trace_documents;
mod trace_figures;
mod verdict;

pub use chrome_view::{ChromeView, ChromeViewOptions, ChromeWritten, ViewMessage};
pub use documents::{
    attribution_document, function_attribution_document, AttributionDocument,
    FunctionAttributionDocument, OpFigures, ATTRIBUTION_SCHEMA, FUNCTION_ATTRIBUTION_SCHEMA,
};
pub use error::Error;
pub use firefox::{write_firefox_profile, FirefoxWritten};
pub use from_trace::{mapping_from_trace, mapping_from_trace_with_notes};
pub use in_pipeline::{
    attribute_and_fold, attribute_folder, attribute_folder_by, attribute_folder_from,
    attribute_frames, callers_folder, folded_folder, folded_frame, for_each_clocked_event,
    frame_spans, sampled_uncertainty_ns, unseen_work, AttributedRow, CallerNode, Callers,
    ClockedItem, ClockedSummary, CountersUnsupported, CpuSource, FoldedStacks, FrameOp, FrameSlice,
    FrameSpans, FrameThread, FunctionCallers, HelperRule, InPipelineAttribution, OpsFrom, RowKind,
    TopFunction, Unseen, CALLER_DEPTH, GAP_INTERVALS, MAX_DEPTH, NEXT_ROW, NEXT_SLICE, ROOT_FRAME,
    SPIN_ROW, TOP_FUNCTIONS, UNSEEN_PCT,
};
pub use in_pipeline_documents::{
    callers_csv, callers_document, comparison_csv, comparison_document, in_pipeline_csv,
    in_pipeline_document, CALLERS_SCHEMA, COMPARISON_SCHEMA, IN_PIPELINE_SCHEMA,
};
pub use mapped::{
    attribute, is_unknown_module, metric_kind, normalize_module, Attribution, Attributor,
    FunctionAttribution, FunctionMapping, FunctionShare, MatchMode, MetricKind, OpCredit, OpShare,
    OpTimes, Options, Split, CLOCKTICK_COUNTERS, INSTRUCTION_COUNTERS, TRACE_OP_TIMES, UNEXPLAINED,
};
pub use mapping_compare::{compare_mappings, ComparedFunction, MappingComparison, OpComparison};
pub use pprof::{write_pprof, PprofWritten};
pub use profiles::{load_profile, name_profiles, LoadedAttribution, LoadedProfile};
pub use rank_rows::{rows_by_rank, RankRow, RankRows, RowsBy, RANKS_SCHEMA};
pub use samples_alone::{is_samples_alone, samples_alone, SAMPLES_ALONE_NOTE};
pub use span_samples::{SpanFunction, SpanSample, SpanSamples};
pub use timeline_spans::{OpCpu, TimelineSpans};
pub use trace_documents::{
    trace_stats_csv, ConfigsDocument, StatsDocument, CONFIGS_SCHEMA, PERCENTILE_METHOD,
    STATS_SCHEMA,
};
pub use trace_figures::{cpus_here, observe_run, SampledFolder, TraceFigures};
pub use verdict::{is_spin_function, Advice, Basis, HeaviestOp, Rule, Spinning, Verdict, SPIN_PCT};

/// The crate README's examples, run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
