//! When to print a report line and when the run ends: every report interval, with one extra
//! boundary exactly at the end of the warm-up (so no interval mixes warm-up and measurement),
//! and the end at warm-up plus `--duration`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;

use tokio::time::Instant;

/// Why a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Stop {
    /// `--duration` passed or `--messages` were all sent.
    Goal,
    /// Ctrl-C.
    Interrupted,
}

/// One closed report interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    /// Seconds from the start of the run to the end of this interval.
    pub elapsed_s: f64,
    pub length_s: f64,
    /// The interval lies in the warm-up.
    pub warmup: bool,
    /// This interval ended the warm-up: the measurement starts now.
    pub ends_warmup: bool,
}

#[derive(Debug)]
pub struct Schedule {
    start: Instant,
    warmup_end: Instant,
    end: Option<Instant>,
    every: Duration,
    last_report: Instant,
}

impl Schedule {
    pub fn new(start: Instant, warmup_s: f64, duration_s: Option<f64>, every_s: f64) -> Schedule {
        let warmup_end = start + Duration::from_secs_f64(warmup_s);
        Schedule {
            start,
            warmup_end,
            end: duration_s.map(|seconds| warmup_end + Duration::from_secs_f64(seconds)),
            every: Duration::from_secs_f64(every_s),
            last_report: start,
        }
    }

    /// The next boundary: a report, the end of the warm-up or the end of the run.
    pub fn next_report_at(&self) -> Instant {
        let mut at = self.last_report + self.every;
        if self.last_report < self.warmup_end {
            at = at.min(self.warmup_end);
        }
        if let Some(end) = self.end {
            at = at.min(end);
        }
        at
    }

    /// True once `now` is at or past the end of the run.
    pub fn finished(&self, now: Instant) -> bool {
        self.end.is_some_and(|end| now >= end)
    }

    /// Closes the interval that ends at `now`.
    pub fn close(&mut self, now: Instant) -> Interval {
        let started = self.last_report;
        self.last_report = now;
        Interval {
            elapsed_s: (now - self.start).as_secs_f64(),
            length_s: (now - started).as_secs_f64(),
            warmup: started < self.warmup_end,
            ends_warmup: started < self.warmup_end && now >= self.warmup_end,
        }
    }
}

/// Ctrl-C or SIGTERM, watched once for the whole process: a signal that comes while no
/// measurement waits (between a sweep's points, while a topic is created) is kept, so the
/// next wait sees it at once.
pub struct Interrupt {
    signalled: AtomicBool,
    arrived: Notify,
}

static INTERRUPT: OnceLock<Arc<Interrupt>> = OnceLock::new();

impl Interrupt {
    /// The process's watcher; the first call (inside the runtime) starts it.
    pub fn get() -> Arc<Interrupt> {
        INTERRUPT
            .get_or_init(|| {
                let interrupt = Arc::new(Interrupt {
                    signalled: AtomicBool::new(false),
                    arrived: Notify::new(),
                });
                tokio::spawn(watch(interrupt.clone()));
                interrupt
            })
            .clone()
    }

    pub fn is_set(&self) -> bool {
        self.signalled.load(Ordering::Acquire)
    }

    /// Returns once a signal has arrived (at once if one already did).
    pub async fn wait(&self) {
        let arrived = self.arrived.notified();
        tokio::pin!(arrived);
        // Registered before the flag is read, so a signal in between is not missed.
        arrived.as_mut().enable();
        if self.is_set() {
            return;
        }
        arrived.await;
    }
}

async fn watch(interrupt: Arc<Interrupt>) {
    use tokio::signal::unix::{signal, SignalKind};
    // Without a SIGTERM handler (not expected on Linux) only Ctrl-C stops the run early.
    let mut terminate = signal(SignalKind::terminate()).ok();
    let terminated = async {
        match terminate.as_mut() {
            Some(terminate) => terminate.recv().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminated => {}
    }
    interrupt.signalled.store(true, Ordering::Release);
    interrupt.arrived.notify_waiters();
}

/// Waits until `at`, Ctrl-C or SIGTERM, or `done` (every sender finished); says which.
pub async fn wait_until(at: Instant, done: &Notify) -> Option<Stop> {
    let interrupt = Interrupt::get();
    tokio::select! {
        _ = tokio::time::sleep_until(at) => None,
        _ = interrupt.wait() => Some(Stop::Interrupted),
        _ = done.notified() => Some(Stop::Goal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(seconds: f64) -> Duration {
        Duration::from_secs_f64(seconds)
    }

    #[test]
    fn warmup_end_is_a_boundary_and_the_end_caps_the_last_interval() {
        let start = Instant::now();
        let mut schedule = Schedule::new(start, 3.0, Some(12.0), 5.0);
        assert_eq!(schedule.next_report_at(), start + s(3.0));
        let first = schedule.close(start + s(3.0));
        assert_eq!((first.warmup, first.ends_warmup), (true, true));
        assert_eq!(schedule.next_report_at(), start + s(8.0));
        let second = schedule.close(start + s(8.0));
        assert_eq!((second.warmup, second.ends_warmup), (false, false));
        assert_eq!(second.length_s, 5.0);
        assert_eq!(schedule.next_report_at(), start + s(13.0));
        schedule.close(start + s(13.0));
        assert_eq!(
            schedule.next_report_at(),
            start + s(15.0),
            "warm-up 3 + duration 12"
        );
        assert!(schedule.finished(start + s(15.0)));
        assert!(!schedule.finished(start + s(14.9)));
    }

    #[test]
    fn without_warmup_or_duration_reports_are_regular() {
        let start = Instant::now();
        let mut schedule = Schedule::new(start, 0.0, None, 10.0);
        assert_eq!(schedule.next_report_at(), start + s(10.0));
        let interval = schedule.close(start + s(10.0));
        assert!(!interval.warmup);
        assert_eq!(interval.elapsed_s, 10.0);
        assert!(!schedule.finished(start + s(1e6)));
    }
}
