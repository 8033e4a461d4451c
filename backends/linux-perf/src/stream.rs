//! Every sample as it comes, to a [`SampleSink`] (`lotus trace run
//! --sample`): the drain thread hands each round's samples, already placed
//! in their module, to a writer thread that names the new locations, gives
//! each (function, module) an id, and writes symbols then samples.
//!
//! A thread of its own because naming code (reading ELF symbol tables) is
//! slow next to draining ring buffers: the drain thread must not fall
//! behind. The channel between them is bounded, so memory is too: if the
//! writer cannot keep up, the drain thread waits, and the kernel counts
//! what it could not buffer as lost samples.

use std::collections::HashMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use lotus_core::trace::samples::{CounterValues, Sample, SampleSink, Symbol};
use lotus_core::ProfilerError;

use crate::model::{Location, Module};
use crate::symbolize::LocationNamer;

/// Rounds queued between the drain thread and the writer.
const QUEUED_ROUNDS: usize = 64;

/// One sample placed in its module.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placed {
    pub time: u64,
    pub pid: u32,
    pub tid: u32,
    pub loc: Location,
    pub kernel: bool,
    /// The counters' deltas since the thread's previous sample.
    pub counters: CounterValues,
}

enum Message {
    /// Modules first seen since the last message, in id order.
    Modules(Vec<Module>),
    /// One round's samples, in time order.
    Samples(Vec<Placed>),
}

/// What the writer did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamSummary {
    /// Samples written.
    pub samples: u64,
    /// Distinct (function, module) symbols written.
    pub symbols: u64,
    /// The first write error, after which nothing more was written.
    pub error: Option<String>,
    /// Why kernel functions are unnamed, where they are.
    pub kernel_note: Option<String>,
}

/// The drain thread's end of the stream.
pub(crate) struct Stream {
    tx: SyncSender<Message>,
    modules_sent: usize,
    round: Vec<Placed>,
}

impl Stream {
    /// Starts the writer thread, which owns `sink`; every sample carries
    /// `counters` counter values.
    pub(crate) fn start(
        mut sink: Box<dyn SampleSink>,
        counters: usize,
    ) -> Result<(Stream, JoinHandle<StreamSummary>), ProfilerError> {
        sink.counters(counters)
            .map_err(|source| ProfilerError::Io {
                context: "preparing the samples file for counters".into(),
                source,
            })?;
        let (tx, rx) = sync_channel(QUEUED_ROUNDS);
        let handle = std::thread::Builder::new()
            .name("lotus-perf-samples".into())
            .spawn(move || write(rx, sink))
            .map_err(|source| ProfilerError::Io {
                context: "starting the sample writer thread".into(),
                source,
            })?;
        Ok((
            Stream {
                tx,
                modules_sent: 0,
                round: Vec::new(),
            },
            handle,
        ))
    }

    /// Queues one sample of this round.
    pub(crate) fn push(&mut self, sample: Placed) {
        self.round.push(sample);
    }

    /// Sends the round's samples (and the modules they may need).
    pub(crate) fn end_round(&mut self, modules: &[Module]) {
        if self.round.is_empty() {
            return;
        }
        if modules.len() > self.modules_sent {
            let new = modules[self.modules_sent..].to_vec();
            self.modules_sent = modules.len();
            // A writer that is gone has reported why in its summary.
            let _ = self.tx.send(Message::Modules(new));
        }
        let round = std::mem::take(&mut self.round);
        let _ = self.tx.send(Message::Samples(round));
    }
}

fn write(rx: Receiver<Message>, mut sink: Box<dyn SampleSink>) -> StreamSummary {
    let mut summary = StreamSummary::default();
    let mut modules: Vec<Module> = Vec::new();
    let mut ids: HashMap<Location, u32> = HashMap::new();
    let mut by_symbol: HashMap<Symbol, u32> = HashMap::new();
    let mut namer = LocationNamer::new();
    let mut block: Vec<Sample> = Vec::new();
    // Keeps receiving after an error, so the drain thread never waits.
    for message in rx {
        let round = match message {
            Message::Modules(new) => {
                modules.extend(new);
                continue;
            }
            Message::Samples(round) => round,
        };
        if summary.error.is_some() {
            continue;
        }
        let mut new_locs: Vec<Location> = round
            .iter()
            .map(|p| p.loc)
            .filter(|l| !ids.contains_key(l))
            .collect();
        new_locs.sort_unstable();
        new_locs.dedup();
        let mut new_symbols = Vec::new();
        for (loc, (function, module)) in new_locs.iter().zip(namer.name(&modules, &new_locs)) {
            let symbol = Symbol::new(&function, &module);
            let next = by_symbol.len() as u32;
            let id = *by_symbol.entry(symbol.clone()).or_insert_with(|| {
                new_symbols.push((next, symbol));
                next
            });
            ids.insert(*loc, id);
        }
        block.clear();
        block.extend(round.iter().map(|p| Sample {
            time_ns: p.time,
            pid: p.pid,
            tid: p.tid,
            symbol: ids[&p.loc],
            kernel: p.kernel,
            counters: p.counters,
        }));
        let written = sink
            .symbols(&new_symbols)
            .and_then(|()| sink.samples(&block));
        match written {
            Ok(()) => {
                summary.samples += block.len() as u64;
                summary.symbols += new_symbols.len() as u64;
            }
            Err(e) => summary.error = Some(e.to_string()),
        }
    }
    if summary.error.is_none() {
        if let Err(e) = sink.finish() {
            summary.error = Some(e.to_string());
        }
    }
    summary.kernel_note = namer.kernel_note.take();
    summary
}
