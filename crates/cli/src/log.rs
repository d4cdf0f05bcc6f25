//! The binary's log: tracing's fmt output on standard error, filtered by `QUIVER_LOG`, with
//! repeated lines summarised at a bounded rate.
//!
//! A hostile client can make the servers warn once per bad frame or refused connection: one
//! minute of mutated frames wrote 12,240 WARN lines. So INFO, WARN and ERROR events are limited
//! per callsite (one `tracing::Metadata`, i.e. one kind of line): in each window of
//! `SUMMARY_INTERVAL_MS` the first `EVENTS_PER_INTERVAL_MAX` are written, the rest are counted
//! and dropped, and one line then says how many of that kind were not written. DEBUG and TRACE
//! are opt-in and pass untouched.
//!
//! The summaries are written by a thread that looks every `SUMMARY_TICK_MS`, not by the next
//! event of the kind: a burst that stopped is still reported (at most one tick after its window
//! ends), and no event is ever emitted from inside another event's dispatch. What is still owed
//! when the process exits is written by `Summaries::write_all`.

use std::collections::hash_map::{Entry, HashMap};
use std::fmt::Write as _;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::callsite::Identifier;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// Length of one counting window per callsite.
pub const SUMMARY_INTERVAL_MS: u64 = 10_000;
/// Lines of one kind written per window. 5 per 10 s per kind bounds an attack to about 30 lines
/// a minute for each kind it can trigger (5 lines + 1 summary per window), instead of one per
/// bad frame; a handful is enough to see the fields (peer, error) of a typical occurrence.
pub const EVENTS_PER_INTERVAL_MAX: u32 = 5;
/// Kinds tracked at once. Callsites are static, so the code bounds their number (a few hundred
/// at most); the cap keeps the table bounded even so. Kinds past it are counted together.
pub const CALLSITES_MAX: usize = 1024;
/// How often owed summaries are looked for: a summary is written at most this late.
pub const SUMMARY_TICK_MS: u64 = 1_000;
/// The message kept to name a kind in its summary is cut here: a message may be arbitrarily
/// long (a formatted list), and one is kept per kind.
const MESSAGE_BYTES_MAX: usize = 200;
/// Summaries are written with this target, and events of this target are never limited: there
/// is at most one summary per tracked kind per tick, so they are bounded by `CALLSITES_MAX`.
const SUMMARY_TARGET: &str = "quiver::log";

/// What to do with one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Write,
    Suppress,
}

/// Events not written, to be reported in one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary<D> {
    /// How many events were dropped.
    pub suppressed: u64,
    /// The dropped events all happened within this many ms before the summary was taken.
    pub span_ms: u64,
    /// The first dropped event's description, or `None` for kinds that found the table full.
    pub description: Option<D>,
}

/// The rate limit itself, with no I/O and no clock: the caller passes the time in.
///
/// `K` names a kind of event (a callsite), `D` describes one (taken from the first dropped
/// event of a window, so the summary can name it).
pub struct Limiter<K, D> {
    interval_ms: u64,
    events_per_interval_max: u32,
    callsites_max: usize,
    windows: HashMap<K, Window<D>>,
    /// Events of kinds that arrived while the table was full, since `overflow_since_ms`.
    overflow: u64,
    overflow_since_ms: u64,
}

struct Window<D> {
    start_ms: u64,
    written: u32,
    suppressed: u64,
    /// Set with the first suppressed event: `suppressed > 0` exactly when this is `Some`.
    description: Option<D>,
    /// A previous window's drops not yet reported: an event began a new window before the
    /// ticker collected the old one (the ticker ran late).
    owed: Option<Dropped<D>>,
}

/// Events of one kind dropped since `since_ms`.
struct Dropped<D> {
    suppressed: u64,
    since_ms: u64,
    description: D,
}

impl<D> Dropped<D> {
    fn summary(self, now_ms: u64) -> Summary<D> {
        Summary {
            suppressed: self.suppressed,
            span_ms: now_ms.saturating_sub(self.since_ms),
            description: Some(self.description),
        }
    }
}

impl<K: Eq + Hash, D> Limiter<K, D> {
    pub fn new(interval_ms: u64, events_per_interval_max: u32, callsites_max: usize) -> Self {
        assert!(interval_ms > 0 && events_per_interval_max > 0 && callsites_max > 0);
        Limiter {
            interval_ms,
            events_per_interval_max,
            callsites_max,
            windows: HashMap::new(),
            overflow: 0,
            overflow_since_ms: 0,
        }
    }

    /// Counts one event of kind `callsite` at `now_ms`. `describe` is called only for the first
    /// dropped event of a window.
    pub fn admit(&mut self, callsite: K, now_ms: u64, describe: impl FnOnce() -> D) -> Admit {
        let full = self.windows.len() >= self.callsites_max;
        let window = match self.windows.entry(callsite) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(_) if full => {
                if self.overflow == 0 {
                    self.overflow_since_ms = now_ms;
                }
                self.overflow += 1;
                return Admit::Suppress;
            }
            Entry::Vacant(entry) => entry.insert(Window {
                start_ms: now_ms,
                written: 0,
                suppressed: 0,
                description: None,
                owed: None,
            }),
        };
        if now_ms.saturating_sub(window.start_ms) >= self.interval_ms {
            window.restart(now_ms);
        }
        if window.written < self.events_per_interval_max {
            window.written += 1;
            return Admit::Write;
        }
        window.suppressed += 1;
        if window.description.is_none() {
            window.description = Some(describe());
        }
        Admit::Suppress
    }

    /// Summaries of the windows that have ended by `now_ms`, which are forgotten: the next
    /// event of their kind begins a new window. Keeps the table to the kinds seen lately.
    pub fn expire(&mut self, now_ms: u64) -> Vec<Summary<D>> {
        self.collect(now_ms, false)
    }

    /// Summaries of everything not written so far, ended windows or not; for the process's
    /// exit.
    pub fn finish(&mut self, now_ms: u64) -> Vec<Summary<D>> {
        self.collect(now_ms, true)
    }

    fn collect(&mut self, now_ms: u64, all: bool) -> Vec<Summary<D>> {
        let interval_ms = self.interval_ms;
        let mut summaries = Vec::new();
        self.windows.retain(|_, window| {
            if let Some(owed) = window.owed.take() {
                summaries.push(owed.summary(now_ms));
            }
            let ended = now_ms.saturating_sub(window.start_ms) >= interval_ms;
            if ended || all {
                if let Some(dropped) = window.take_dropped() {
                    summaries.push(dropped.summary(now_ms));
                }
            }
            !ended
        });
        // Overflowed kinds have no window of their own: report them every collection.
        if self.overflow > 0 {
            summaries.push(Summary {
                suppressed: self.overflow,
                span_ms: now_ms.saturating_sub(self.overflow_since_ms),
                description: None,
            });
            self.overflow = 0;
        }
        summaries
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.windows.len()
    }
}

impl<D> Window<D> {
    /// Begins a new window at `now_ms`, keeping what the old one dropped as owed.
    fn restart(&mut self, now_ms: u64) {
        if let Some(dropped) = self.take_dropped() {
            match &mut self.owed {
                // The ticker missed a whole window: fold both into one line.
                Some(owed) => owed.suppressed += dropped.suppressed,
                None => self.owed = Some(dropped),
            }
        }
        self.start_ms = now_ms;
        self.written = 0;
    }

    /// Takes this window's count of dropped events, if any.
    fn take_dropped(&mut self) -> Option<Dropped<D>> {
        let description = self.description.take();
        assert_eq!(
            self.suppressed > 0,
            description.is_some(),
            "a described window is one that dropped events"
        );
        let dropped = Dropped {
            suppressed: self.suppressed,
            since_ms: self.start_ms,
            description: description?,
        };
        self.suppressed = 0;
        Some(dropped)
    }
}

/// Names a kind of event in its summary.
pub struct Kind {
    metadata: &'static Metadata<'static>,
    /// The first dropped event's message, cut to `MESSAGE_BYTES_MAX`.
    message: String,
}

type SharedLimiter = Arc<Mutex<Limiter<Identifier, Kind>>>;

/// The tracing shell around `Limiter`: drops events the limiter does not admit, before any
/// layer formats them.
struct RateLimit {
    limiter: SharedLimiter,
    origin: Instant,
}

impl<S: Subscriber> Layer<S> for RateLimit {
    fn event_enabled(&self, event: &Event<'_>, _: Context<'_, S>) -> bool {
        let metadata = event.metadata();
        // More verbose levels compare greater: DEBUG and TRACE pass unlimited.
        if *metadata.level() > Level::INFO || metadata.target() == SUMMARY_TARGET {
            return true;
        }
        let now_ms = elapsed_ms(self.origin);
        let admit = lock(&self.limiter).admit(metadata.callsite(), now_ms, || Kind {
            metadata,
            message: message_of(event),
        });
        admit == Admit::Write
    }
}

/// Keeps the limiter so the summaries still owed can be written at exit.
pub struct Summaries {
    limiter: SharedLimiter,
    origin: Instant,
}

impl Summaries {
    /// Writes the summaries of every event dropped so far, whether its window ended or not.
    pub fn write_all(&self) {
        let summaries = lock(&self.limiter).finish(elapsed_ms(self.origin));
        summaries.iter().for_each(write_summary);
    }
}

/// Installs the global subscriber: fmt on standard error, filtered by `QUIVER_LOG` (or
/// `default_filter`), rate-limited per callsite; and starts the thread that writes summaries.
pub fn init(default_filter: &str) -> Summaries {
    let limiter: SharedLimiter = Arc::new(Mutex::new(Limiter::new(
        SUMMARY_INTERVAL_MS,
        EVENTS_PER_INTERVAL_MAX,
        CALLSITES_MAX,
    )));
    let origin = Instant::now();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            EnvFilter::try_from_env("QUIVER_LOG")
                .unwrap_or_else(|_| EnvFilter::new(default_filter)),
        )
        .finish()
        .with(RateLimit {
            limiter: limiter.clone(),
            origin,
        })
        .init();
    let ticker = limiter.clone();
    let started = std::thread::Builder::new()
        .name("quiver-log".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(SUMMARY_TICK_MS));
            let summaries = lock(&ticker).expire(elapsed_ms(origin));
            summaries.iter().for_each(write_summary);
        });
    if let Err(error) = started {
        tracing::warn!(
            target: SUMMARY_TARGET,
            %error,
            "cannot start the log summary thread: dropped lines are reported only at exit"
        );
    }
    Summaries { limiter, origin }
}

fn write_summary(summary: &Summary<Kind>) {
    let seconds = summary.span_ms.div_ceil(1000).max(1);
    let Some(kind) = &summary.description else {
        tracing::warn!(
            target: SUMMARY_TARGET,
            "{} more lines of kinds past the first {CALLSITES_MAX} in the last {seconds} s were not written",
            summary.suppressed,
        );
        return;
    };
    let (suppressed, message, target) = (summary.suppressed, &kind.message, kind.metadata.target());
    // A summary has its kind's level, so a filter that shows the lines shows their summary too.
    match *kind.metadata.level() {
        Level::ERROR => tracing::error!(
            target: SUMMARY_TARGET,
            "{suppressed} more {message:?} ({target}) in the last {seconds} s were not written"
        ),
        Level::WARN => tracing::warn!(
            target: SUMMARY_TARGET,
            "{suppressed} more {message:?} ({target}) in the last {seconds} s were not written"
        ),
        _ => tracing::info!(
            target: SUMMARY_TARGET,
            "{suppressed} more {message:?} ({target}) in the last {seconds} s were not written"
        ),
    }
}

fn lock(limiter: &SharedLimiter) -> std::sync::MutexGuard<'_, Limiter<Identifier, Kind>> {
    limiter.lock().expect("log limiter lock poisoned")
}

fn elapsed_ms(origin: Instant) -> u64 {
    u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The event's `message` field, cut to `MESSAGE_BYTES_MAX` while it is formatted.
fn message_of(event: &Event<'_>) -> String {
    let mut visitor = MessageVisitor(Bounded(String::new()));
    event.record(&mut visitor);
    visitor.0 .0
}

struct MessageVisitor(Bounded);

impl Visit for MessageVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            let _ = self.0.write_str(value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        }
    }
}

/// A string that keeps the first `MESSAGE_BYTES_MAX` bytes written to it (whole characters).
struct Bounded(String);

impl std::fmt::Write for Bounded {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        for c in text.chars() {
            if self.0.len() + c.len_utf8() > MESSAGE_BYTES_MAX {
                break;
            }
            self.0.push(c);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL_MS: u64 = 10_000;
    const MAX: u32 = 5;

    fn limiter() -> Limiter<&'static str, String> {
        Limiter::new(INTERVAL_MS, MAX, 16)
    }

    fn admit(
        limiter: &mut Limiter<&'static str, String>,
        kind: &'static str,
        now_ms: u64,
    ) -> Admit {
        limiter.admit(kind, now_ms, || format!("{kind} at {now_ms}"))
    }

    #[test]
    fn first_events_of_a_window_are_written_and_the_rest_suppressed() {
        let mut limiter = limiter();
        let admitted: Vec<Admit> = (0..8).map(|i| admit(&mut limiter, "a", i)).collect();
        assert_eq!(admitted[..5], [Admit::Write; 5]);
        assert_eq!(admitted[5..], [Admit::Suppress; 3]);
    }

    #[test]
    fn summary_carries_the_exact_count_and_the_first_dropped_description() {
        let mut limiter = limiter();
        // 12,235 events spread over one window.
        let at_ms = |i: u64| i * (INTERVAL_MS - 1) / 12_234;
        for i in 0..12_235 {
            admit(&mut limiter, "a", at_ms(i));
        }
        assert!(
            limiter.expire(INTERVAL_MS - 1).is_empty(),
            "window still open"
        );
        let summaries = limiter.expire(INTERVAL_MS + 500);
        assert_eq!(
            summaries,
            [Summary {
                suppressed: 12_230,
                span_ms: INTERVAL_MS + 500,
                description: Some(format!("a at {}", at_ms(5))),
            }]
        );
        assert!(
            limiter.expire(INTERVAL_MS + 1_500).is_empty(),
            "reported once"
        );
        assert_eq!(limiter.tracked(), 0, "ended windows are forgotten");
    }

    #[test]
    fn a_window_with_nothing_dropped_has_no_summary() {
        let mut limiter = limiter();
        for i in 0..5 {
            admit(&mut limiter, "a", i);
        }
        assert!(limiter.expire(INTERVAL_MS).is_empty());
        assert!(limiter.finish(INTERVAL_MS).is_empty());
    }

    #[test]
    fn a_new_window_lets_the_first_events_through_again() {
        let mut limiter = limiter();
        for i in 0..7 {
            admit(&mut limiter, "a", i);
        }
        assert_eq!(limiter.expire(INTERVAL_MS).len(), 1);
        let admitted: Vec<Admit> = (0..7)
            .map(|i| admit(&mut limiter, "a", INTERVAL_MS + 100 + i))
            .collect();
        assert_eq!(admitted[..5], [Admit::Write; 5]);
        assert_eq!(admitted[5..], [Admit::Suppress; 2]);
    }

    #[test]
    fn a_late_ticker_loses_no_count() {
        let mut limiter = limiter();
        for i in 0..8 {
            admit(&mut limiter, "a", i);
        }
        // The next window begins before any expire: the 3 dropped are owed, not lost.
        for i in 0..6 {
            assert_eq!(
                admit(&mut limiter, "a", INTERVAL_MS + i) == Admit::Write,
                i < 5
            );
        }
        let summaries = limiter.expire(INTERVAL_MS + 10);
        assert_eq!(summaries.len(), 1, "{summaries:?}");
        assert_eq!(summaries[0].suppressed, 3);
        assert_eq!(summaries[0].description.as_deref(), Some("a at 5"));
        let at_exit = limiter.finish(INTERVAL_MS + 20);
        assert_eq!(at_exit.len(), 1, "{at_exit:?}");
        assert_eq!(at_exit[0].suppressed, 1);
        assert_eq!(at_exit[0].description.as_deref(), Some("a at 10005"));
    }

    #[test]
    fn callsites_are_limited_independently() {
        let mut limiter = limiter();
        for i in 0..20 {
            admit(&mut limiter, "a", i);
        }
        let admitted: Vec<Admit> = (0..6).map(|i| admit(&mut limiter, "b", 20 + i)).collect();
        assert_eq!(admitted[..5], [Admit::Write; 5]);
        assert_eq!(admitted[5], Admit::Suppress);
        let mut summaries = limiter.expire(INTERVAL_MS + 100);
        summaries.sort_by_key(|s| s.suppressed);
        let counts: Vec<(u64, Option<&str>)> = summaries
            .iter()
            .map(|s| (s.suppressed, s.description.as_deref()))
            .collect();
        assert_eq!(counts, [(1, Some("b at 25")), (15, Some("a at 5"))]);
    }

    #[test]
    fn finish_reports_open_windows() {
        let mut limiter = limiter();
        for i in 0..9 {
            admit(&mut limiter, "a", i);
        }
        let summaries = limiter.finish(100);
        assert_eq!(summaries.len(), 1);
        assert_eq!((summaries[0].suppressed, summaries[0].span_ms), (4, 100));
        assert!(limiter.finish(200).is_empty(), "reported once");
    }

    #[test]
    fn kinds_past_the_table_cap_are_counted_together() {
        let mut limiter: Limiter<u32, String> = Limiter::new(INTERVAL_MS, MAX, 2);
        assert_eq!(limiter.admit(1, 0, String::new), Admit::Write);
        assert_eq!(limiter.admit(2, 0, String::new), Admit::Write);
        assert_eq!(limiter.admit(3, 1, String::new), Admit::Suppress);
        assert_eq!(limiter.admit(4, 2, String::new), Admit::Suppress);
        assert_eq!(limiter.tracked(), 2);
        let summaries = limiter.expire(5);
        assert_eq!(
            summaries,
            [Summary {
                suppressed: 2,
                span_ms: 4,
                description: None
            }]
        );
        // Once the tracked windows end, new kinds get windows of their own.
        assert!(limiter.expire(INTERVAL_MS).is_empty());
        assert_eq!(limiter.admit(3, INTERVAL_MS + 1, String::new), Admit::Write);
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let mut bounded = Bounded(String::new());
        write!(bounded, "{}", "é".repeat(MESSAGE_BYTES_MAX)).unwrap();
        assert_eq!(bounded.0.len(), MESSAGE_BYTES_MAX);
        assert!(bounded.0.chars().all(|c| c == 'é'));
    }

    #[test]
    fn debug_and_trace_compare_above_info() {
        // event_enabled relies on this ordering to let DEBUG and TRACE through.
        assert!(Level::DEBUG > Level::INFO && Level::TRACE > Level::INFO);
        assert!(Level::WARN < Level::INFO && Level::ERROR < Level::INFO);
    }
}
