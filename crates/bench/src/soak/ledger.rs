//! The soak's accounting, with no I/O: which messages of each sender were acknowledged and
//! consumed (two bits per message), what that makes missing, duplicated and reordered, the
//! figures of each report interval, and the gaps (stretches of failures or silence) in them.

use std::collections::HashMap;

use serde::Serialize;

use crate::histogram::Percentiles;

/// A growable set of sequence numbers.
#[derive(Default)]
struct Bits(Vec<u64>);

impl Bits {
    pub(super) fn get(&self, index: u64) -> bool {
        self.0
            .get((index / 64) as usize)
            .is_some_and(|word| word & (1 << (index % 64)) != 0)
    }

    pub(super) fn set(&mut self, index: u64) {
        let word = (index / 64) as usize;
        if word >= self.0.len() {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << (index % 64);
    }
}

/// Counts over a run or an interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub sent: u64,
    pub acknowledged: u64,
    pub failed: u64,
    /// Messages of this run consumed at least once.
    pub consumed: u64,
    pub duplicated: u64,
    pub reordered: u64,
    /// Messages of other runs met in the topic (left out of everything else).
    pub foreign: u64,
}

impl Totals {
    pub(super) fn since(&self, earlier: &Totals) -> Totals {
        Totals {
            sent: self.sent - earlier.sent,
            acknowledged: self.acknowledged - earlier.acknowledged,
            failed: self.failed - earlier.failed,
            consumed: self.consumed - earlier.consumed,
            duplicated: self.duplicated - earlier.duplicated,
            reordered: self.reordered - earlier.reordered,
            foreign: self.foreign - earlier.foreign,
        }
    }
}

/// One sender's messages.
#[derive(Default)]
struct Book {
    acknowledged: Bits,
    consumed: Bits,
    /// Sequence numbers handed out so far.
    sent: u64,
}

/// Every message of the run: what was sent, acknowledged and consumed. No I/O: the senders
/// and the consumers' listener tell it what happened.
#[derive(Default)]
pub struct Ledger {
    books: Vec<Book>,
    /// The highest sequence consumed per (broker, queue, sender).
    last_in_queue: HashMap<(String, i32, u32), u64>,
    totals: Totals,
    /// Acknowledged and not yet consumed.
    pending: u64,
    /// The last send error, for the interval's line.
    last_error: Option<String>,
    /// Producing has stopped: no send may start. Kept here, under the ledger's lock, so that
    /// a drain that finds everything settled cannot miss a send that started just then.
    stopped: bool,
}

/// A run of missing sequence numbers of one sender, inclusive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Missing {
    pub sender: u32,
    pub first: u64,
    pub last: u64,
}

impl Ledger {
    pub fn new(senders: u32) -> Ledger {
        Ledger {
            books: (0..senders).map(|_| Book::default()).collect(),
            ..Ledger::default()
        }
    }

    fn book(&mut self, sender: u32) -> Option<&mut Book> {
        self.books.get_mut(sender as usize)
    }

    /// Records a send about to start; false, recording nothing, once producing has stopped.
    pub fn sent(&mut self, sender: u32, sequence: u64) -> bool {
        if self.stopped {
            return false;
        }
        if let Some(book) = self.book(sender) {
            book.sent = book.sent.max(sequence + 1);
            self.totals.sent += 1;
        }
        true
    }

    /// Producing stops: later sends are refused (`sent` answers false).
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    pub fn acknowledged(&mut self, sender: u32, sequence: u64) {
        let Some(book) = self.book(sender) else {
            return;
        };
        if book.acknowledged.get(sequence) {
            return;
        }
        book.acknowledged.set(sequence);
        // The consumer may see a message before its sender sees the answer.
        let consumed = book.consumed.get(sequence);
        self.totals.acknowledged += 1;
        if !consumed {
            self.pending += 1;
        }
    }

    pub fn failed(&mut self, error: String) {
        self.totals.failed += 1;
        self.last_error = Some(error);
    }

    /// A message of this run arrived from `queue`.
    pub fn consumed(&mut self, broker: &str, queue: i32, sender: u32, sequence: u64) {
        let Some(book) = self.books.get_mut(sender as usize) else {
            self.totals.foreign += 1;
            return;
        };
        if book.consumed.get(sequence) {
            self.totals.duplicated += 1;
            return;
        }
        book.consumed.set(sequence);
        let acknowledged = book.acknowledged.get(sequence);
        self.totals.consumed += 1;
        if acknowledged {
            self.pending = self.pending.saturating_sub(1);
        }
        let last = self
            .last_in_queue
            .entry((broker.to_owned(), queue, sender))
            .or_insert(sequence);
        if sequence < *last {
            self.totals.reordered += 1;
        } else {
            *last = sequence;
        }
    }

    pub fn foreign(&mut self) {
        self.totals.foreign += 1;
    }

    pub fn totals(&self) -> Totals {
        self.totals
    }

    pub fn pending(&self) -> u64 {
        self.pending
    }

    /// Every send answered (acknowledged or failed) and every acknowledged message consumed:
    /// a drain may end. Pending alone is not enough: a send still in flight when producing
    /// stopped is acknowledged later, and its message must be waited for too.
    pub fn settled(&self) -> bool {
        self.pending == 0 && self.totals.sent == self.totals.acknowledged + self.totals.failed
    }

    pub(super) fn take_error(&mut self) -> Option<String> {
        self.last_error.take()
    }

    /// Acknowledged and never consumed, as ranges per sender.
    pub fn missing(&self) -> Vec<Missing> {
        let mut missing = Vec::new();
        for (sender, book) in self.books.iter().enumerate() {
            let mut open: Option<(u64, u64)> = None;
            for sequence in 0..book.sent {
                let lost = book.acknowledged.get(sequence) && !book.consumed.get(sequence);
                open = match (open, lost) {
                    (Some((first, _)), true) => Some((first, sequence)),
                    (None, true) => Some((sequence, sequence)),
                    (Some((first, last)), false) => {
                        missing.push(Missing {
                            sender: sender as u32,
                            first,
                            last,
                        });
                        None
                    }
                    (None, false) => None,
                };
            }
            if let Some((first, last)) = open {
                missing.push(Missing {
                    sender: sender as u32,
                    first,
                    last,
                });
            }
        }
        missing
    }

    /// Consumed although the send was not acknowledged (a send whose answer was lost, as
    /// when the broker died after storing it): not a loss, but worth knowing.
    pub fn delivered_unacknowledged(&self) -> u64 {
        self.books
            .iter()
            .map(|book| {
                (0..book.sent)
                    .filter(|s| book.consumed.get(*s) && !book.acknowledged.get(*s))
                    .count() as u64
            })
            .sum()
    }
}

/// One report interval of a soak.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SoakInterval {
    pub elapsed_s: f64,
    pub producing: bool,
    #[serde(flatten)]
    pub counts: Totals,
    /// Acknowledged and not yet consumed at the end of the interval.
    pub pending: u64,
    pub send_latency: Percentiles,
    pub b2c: Percentiles,
    pub send_error: Option<String>,
}

impl SoakInterval {
    pub fn line(&self) -> String {
        let mut line = format!(
            "[{:7.1}s{}] sent {} acked {} failed {} consumed {} duplicated {} reordered {} | not yet consumed {} | send p99 {:.3} ms | B2C p99 {:.0} ms",
            self.elapsed_s,
            if self.producing { "" } else { " drain" },
            self.counts.sent,
            self.counts.acknowledged,
            self.counts.failed,
            self.counts.consumed,
            self.counts.duplicated,
            self.counts.reordered,
            self.pending,
            self.send_latency.p99_ms,
            self.b2c.p99_ms
        );
        if let Some(error) = &self.send_error {
            line.push_str(&format!(" | last send error: {error}"));
        }
        line
    }
}

/// A stretch of the run where sends failed or nothing arrived, with its cause.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Gap {
    pub from_s: f64,
    pub to_s: f64,
    pub what: String,
}

/// Stretches of failing sends and of silence, from the intervals.
pub fn gaps(intervals: &[SoakInterval], every_s: f64) -> Vec<Gap> {
    let mut gaps: Vec<Gap> = Vec::new();
    let mut failing: Option<(f64, f64, u64, String)> = None;
    let mut silent: Option<(f64, f64)> = None;
    for interval in intervals {
        let from = (interval.elapsed_s - every_s).max(0.0);
        if interval.counts.failed > 0 {
            let error = interval.send_error.clone().unwrap_or_default();
            failing = Some(match failing {
                Some((start, _, count, _)) => (
                    start,
                    interval.elapsed_s,
                    count + interval.counts.failed,
                    error,
                ),
                None => (from, interval.elapsed_s, interval.counts.failed, error),
            });
        } else if let Some((start, end, count, error)) = failing.take() {
            gaps.push(Gap {
                from_s: start,
                to_s: end,
                what: format!("{count} sends failed (last error: {error})"),
            });
        }
        let starved = interval.counts.consumed == 0 && interval.pending > 0;
        if starved {
            silent = Some(match silent {
                Some((start, _)) => (start, interval.elapsed_s),
                None => (from, interval.elapsed_s),
            });
        } else if let Some((start, end)) = silent.take() {
            gaps.push(Gap {
                from_s: start,
                to_s: end,
                what: "consumers received nothing while acknowledged messages waited".into(),
            });
        }
    }
    if let Some((start, end, count, error)) = failing {
        gaps.push(Gap {
            from_s: start,
            to_s: end,
            what: format!("{count} sends failed (last error: {error})"),
        });
    }
    if let Some((start, end)) = silent {
        gaps.push(Gap {
            from_s: start,
            to_s: end,
            what: "consumers received nothing while acknowledged messages waited".into(),
        });
    }
    gaps.sort_by(|a, b| a.from_s.total_cmp(&b.from_s));
    gaps
}
