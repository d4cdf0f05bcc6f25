//! Whether the machine stopped during a run: CPU time the hypervisor took from this virtual
//! machine's CPUs (the `steal` column of /proc/stat).
//!
//! On a shared virtual machine the host at times leaves a virtual CPU unrun for tens of ms, and
//! whatever runs on it (the broker's appender, the bench's own pacer) stops with it. A tail
//! made of a few such stalls is the machine's, not the system's under test, and a report that
//! does not say so invites the wrong conclusion. A thread reads the per-CPU counters every
//! `WINDOW`; a window in which one CPU lost `STALL_TICKS` or more is a stall.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How often the watcher reads /proc/stat.
const WINDOW: Duration = Duration::from_millis(100);
/// A stall: a CPU lost at least this many clock ticks (10 ms each) of one window.
const STALL_TICKS: u64 = 3;
const TICK_MS: f64 = 10.0;
/// Stalls kept for the runs in progress to count; older ones are dropped.
const STALLS_KEPT: usize = 100_000;

/// The steal figures of the measured part of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StealFigures {
    /// False when /proc/stat has no steal column (not Linux): the other fields are zero.
    pub available: bool,
    /// Stolen CPU time as a share of all the CPUs' time over the window (0 to 1).
    pub share: f64,
    /// Windows of 100 ms in which a CPU lost 30 ms or more.
    pub stalls: u64,
    /// The most one CPU lost in one window, in ms.
    pub worst_ms: f64,
}

impl StealFigures {
    pub fn line(&self) -> String {
        if !self.available {
            return "Hypervisor steal: not reported by this machine".to_owned();
        }
        let mut line = format!(
            "Hypervisor steal: {:.1}% of CPU time, {} stall{} of 30 ms or more in a 100 ms window",
            self.share * 100.0,
            self.stalls,
            if self.stalls == 1 { "" } else { "s" }
        );
        if self.stalls > 0 {
            line.push_str(&format!(
                " (worst {:.0} ms) -- the machine stopped: latency that long is not the broker's",
                self.worst_ms
            ));
        }
        line
    }
}

/// Where a measured part began: the machine's steal then.
#[derive(Clone, Debug)]
pub struct StealMark {
    at: Instant,
    /// Total steal ticks of all CPUs; None when /proc/stat has none.
    ticks: Option<u64>,
}

impl StealMark {
    /// Now; starts the watcher on first use.
    pub fn now() -> StealMark {
        watcher();
        StealMark {
            at: Instant::now(),
            ticks: read_steal().map(|cpus| cpus.iter().sum()),
        }
    }

    /// The figures from this mark to now, over `cpus` CPUs.
    pub fn figures(&self) -> StealFigures {
        let (Some(before), Some(now)) = (
            self.ticks,
            read_steal().map(|cpus| (cpus.iter().sum::<u64>(), cpus.len())),
        ) else {
            return StealFigures::default();
        };
        let (after, cpus) = now;
        let wall_ms = self.at.elapsed().as_secs_f64() * 1000.0;
        let stalls: Vec<u64> = watcher().map_or_else(Vec::new, |w| {
            w.lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .filter(|(at, _)| *at >= self.at)
                .map(|(_, ticks)| *ticks)
                .collect()
        });
        StealFigures {
            available: true,
            share: (after.saturating_sub(before) as f64 * TICK_MS)
                / (wall_ms * cpus.max(1) as f64).max(1.0),
            stalls: stalls.len() as u64,
            worst_ms: stalls.iter().max().map_or(0.0, |t| *t as f64 * TICK_MS),
        }
    }
}

/// The stalls seen so far: when each window ended, and the ticks one CPU lost in it.
type Stalls = Mutex<Vec<(Instant, u64)>>;

/// The watcher's stalls, the watcher started on first use; None without /proc/stat.
fn watcher() -> Option<&'static Stalls> {
    static STALLS: OnceLock<Option<&'static Stalls>> = OnceLock::new();
    *STALLS.get_or_init(|| {
        let first = read_steal()?;
        let stalls: &'static Stalls = Box::leak(Box::new(Mutex::new(Vec::new())));
        std::thread::Builder::new()
            .name("bench-steal".to_owned())
            .spawn(move || watch(first, stalls))
            .ok()?;
        Some(stalls)
    })
}

fn watch(mut last: Vec<u64>, stalls: &Stalls) {
    loop {
        std::thread::sleep(WINDOW);
        let Some(now) = read_steal() else { return };
        let worst = now
            .iter()
            .zip(&last)
            .map(|(n, l)| n.saturating_sub(*l))
            .max()
            .unwrap_or(0);
        if worst >= STALL_TICKS {
            let mut stalls = stalls.lock().unwrap_or_else(|e| e.into_inner());
            if stalls.len() >= STALLS_KEPT {
                stalls.drain(..STALLS_KEPT / 2);
            }
            stalls.push((Instant::now(), worst));
        }
        last = now;
    }
}

/// Each CPU's steal ticks, from /proc/stat.
fn read_steal() -> Option<Vec<u64>> {
    parse_steal(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// The eighth value of every `cpuN` line; None when there is no such line or one lacks it.
fn parse_steal(stat: &str) -> Option<Vec<u64>> {
    let cpus: Vec<Option<u64>> = stat
        .lines()
        .filter(|line| {
            line.strip_prefix("cpu")
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .map(|line| line.split_whitespace().nth(8)?.parse().ok())
        .collect();
    if cpus.is_empty() {
        return None;
    }
    cpus.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_the_eighth_value_of_each_cpu_line() {
        let stat = "cpu  5946443 6220 1414150 7493142 219551 0 212753 83976 0 0\n\
                    cpu0 2973221 3110 707075 3746571 109775 0 106376 41988 0 0\n\
                    cpu1 2973222 3110 707075 3746571 109776 0 106377 41990 0 0\n\
                    intr 1 2 3\nctxt 99\n";
        assert_eq!(parse_steal(stat), Some(vec![41988, 41990]));
        assert_eq!(parse_steal("cpu0 1 2 3\n"), None, "a line without steal");
        assert_eq!(parse_steal("intr 1 2\n"), None);
    }

    #[test]
    fn figures_cover_the_time_since_the_mark() {
        let mark = StealMark::now();
        let figures = mark.figures();
        if read_steal().is_none() {
            assert!(!figures.available);
            return;
        }
        assert!(figures.available);
        assert!((0.0..=1.0).contains(&figures.share), "{figures:?}");
        assert!(figures.line().starts_with("Hypervisor steal: "));
        let stalled = StealFigures {
            available: true,
            share: 0.02,
            stalls: 2,
            worst_ms: 100.0,
        };
        assert!(stalled.line().contains("2 stalls"), "{}", stalled.line());
        assert!(
            stalled.line().contains("worst 100 ms"),
            "{}",
            stalled.line()
        );
    }
}
