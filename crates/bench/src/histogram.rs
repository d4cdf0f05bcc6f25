//! Latency recording: HDR histograms in microseconds, sharded so that concurrent senders rarely
//! touch the same lock, drained and merged once per report interval.

use std::sync::{Arc, Mutex, MutexGuard};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency recorded as itself; anything slower is recorded as this (one hour).
pub const LATENCY_US_MAX: u64 = 3_600_000_000;
/// Three significant digits: 1 µs steps up to 2 ms, 0.1% of the value beyond.
const SIGNIFICANT_DIGITS: u8 = 3;
/// Shards of the recorder; each sender or pull task takes one by its index.
pub const SHARDS_MAX: usize = 8;

pub fn new_histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts (low >= 1, high >= 2 * low, 3 digits).
    Histogram::new_with_bounds(1, LATENCY_US_MAX, SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid")
}

fn locked(histogram: &Mutex<Histogram<u64>>) -> MutexGuard<'_, Histogram<u64>> {
    // A histogram is always consistent between calls, so a poisoned lock is still usable.
    histogram
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Shared by the tasks that record; `drain` hands the reporter everything recorded since the
/// last drain.
#[derive(Clone)]
pub struct Recorder {
    shards: Arc<Vec<Mutex<Histogram<u64>>>>,
}

impl Recorder {
    pub fn new(shards: usize) -> Recorder {
        let shards = shards.clamp(1, SHARDS_MAX);
        Recorder {
            shards: Arc::new((0..shards).map(|_| Mutex::new(new_histogram())).collect()),
        }
    }

    /// Records `latency_us` in the shard of task `task`.
    pub fn record(&self, task: usize, latency_us: u64) {
        let shard = &self.shards[task % self.shards.len()];
        locked(shard).saturating_record(latency_us.clamp(1, LATENCY_US_MAX));
    }

    /// Everything recorded since the last drain, merged; the shards start empty again.
    pub fn drain(&self) -> Histogram<u64> {
        let mut merged = new_histogram();
        for shard in self.shards.iter() {
            let mut shard = locked(shard);
            // Same bounds on both sides, so the add cannot fail.
            let _ = merged.add(&*shard);
            shard.reset();
        }
        merged
    }
}

/// Latency figures in milliseconds (three decimals: microsecond resolution).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub p9999_ms: f64,
    pub max_ms: f64,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1_000.0
}

impl Percentiles {
    pub fn of(histogram: &Histogram<u64>) -> Percentiles {
        if histogram.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            count: histogram.len(),
            mean_ms: histogram.mean() / 1_000.0,
            p50_ms: ms(histogram.value_at_quantile(0.50)),
            p95_ms: ms(histogram.value_at_quantile(0.95)),
            p99_ms: ms(histogram.value_at_quantile(0.99)),
            p999_ms: ms(histogram.value_at_quantile(0.999)),
            p9999_ms: ms(histogram.value_at_quantile(0.9999)),
            max_ms: ms(histogram.max()),
        }
    }

    /// `p50 0.912 p95 1.801 p99 2.511 p99.9 4.120 p99.99 9.800 max 12.003 ms`
    pub fn line(&self) -> String {
        format!(
            "p50 {:.3} p95 {:.3} p99 {:.3} p99.9 {:.3} p99.99 {:.3} max {:.3} ms",
            self.p50_ms, self.p95_ms, self.p99_ms, self.p999_ms, self.p9999_ms, self.max_ms
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let recorder = Recorder::new(3);
        // 1..=10_000 µs, one each, spread over the shards.
        for value in 1..=10_000u64 {
            recorder.record(value as usize, value);
        }
        let histogram = recorder.drain();
        let p = Percentiles::of(&histogram);
        assert_eq!(p.count, 10_000);
        // Three significant digits: each value within 0.1% of the exact quantile.
        let close = |got: f64, want: f64| (got - want).abs() <= want * 0.001 + 0.001;
        assert!(close(p.p50_ms, 5.0), "{p:?}");
        assert!(close(p.p95_ms, 9.5), "{p:?}");
        assert!(close(p.p99_ms, 9.9), "{p:?}");
        assert!(close(p.p999_ms, 9.99), "{p:?}");
        assert!(close(p.max_ms, 10.0), "{p:?}");
        assert!((p.mean_ms - 5.0005).abs() < 0.01, "{p:?}");
        assert!(recorder.drain().is_empty(), "drain resets the shards");
    }

    #[test]
    fn microseconds_are_kept_below_two_milliseconds() {
        let recorder = Recorder::new(1);
        recorder.record(0, 1_234);
        let p = Percentiles::of(&recorder.drain());
        assert_eq!(p.max_ms, 1.234);
        assert_eq!(p.p50_ms, 1.234);
    }

    #[test]
    fn out_of_range_values_are_clamped_not_lost() {
        let recorder = Recorder::new(2);
        recorder.record(0, 0);
        recorder.record(1, u64::MAX);
        let histogram = recorder.drain();
        assert_eq!(histogram.len(), 2);
        assert!(histogram.max() >= LATENCY_US_MAX);
        assert_eq!(Percentiles::of(&new_histogram()), Percentiles::default());
    }

    #[test]
    fn line_has_every_percentile() {
        let p = Percentiles {
            p50_ms: 0.5,
            p95_ms: 1.0,
            p99_ms: 2.0,
            p999_ms: 3.0,
            p9999_ms: 4.0,
            max_ms: 5.25,
            ..Percentiles::default()
        };
        assert_eq!(
            p.line(),
            "p50 0.500 p95 1.000 p99 2.000 p99.9 3.000 p99.99 4.000 max 5.250 ms"
        );
    }
}
