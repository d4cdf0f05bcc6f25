//! What a study prints: while it runs, the point under way and the time left, and each finished
//! point's figures; at its end, the table of its points and its verdict.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use crate::plan::Scenario;
use crate::study::{table, PointRecord, StudyRecord};

/// `1h 12m`, `3m 20s`, `45s`.
pub fn duration_words(seconds: f64) -> String {
    let seconds = seconds.max(0.0).round() as u64;
    match seconds {
        s if s >= 3_600 => format!("{}h {:02}m", s / 3_600, s % 3_600 / 60),
        s if s >= 60 => format!("{}m {:02}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

/// The progress of a study: a bar redrawn in place on a terminal, plain lines otherwise (a log
/// file or a CI job gets one line per point).
pub struct Progress {
    total: usize,
    point_s: f64,
    terminal: bool,
    started: Instant,
    ran: usize,
}

const BAR_WIDTH: usize = 24;

impl Progress {
    pub fn new(total: usize, point_s: f64) -> Progress {
        Progress {
            total,
            point_s,
            terminal: std::io::stdout().is_terminal(),
            started: Instant::now(),
            ran: 0,
        }
    }

    /// Time left: the points still to run at the pace of those run so far (the plan's own
    /// timing before the first one finished).
    fn left_s(&self, index: usize) -> f64 {
        let per_point = if self.ran == 0 {
            self.point_s
        } else {
            self.started.elapsed().as_secs_f64() / self.ran as f64
        };
        (self.total - index) as f64 * per_point
    }

    pub fn start(&mut self, index: usize, scenario: &Scenario) {
        let line = progress_line(index, self.total, &scenario.name(), self.left_s(index));
        if self.terminal {
            let filled = BAR_WIDTH * index / self.total.max(1);
            let bar = format!("[{}{}]", "#".repeat(filled), ".".repeat(BAR_WIDTH - filled));
            print!("\r\x1b[2K{bar} {line}");
            let _ = std::io::stdout().flush();
        } else {
            println!("{line}");
        }
    }

    pub fn finish(&mut self, index: usize, point: &PointRecord) {
        self.ran += 1;
        let line = format!(
            "point {}/{} done: {}: max TPS {:.0}, avg RT {:.3} ms, max RT {:.0} ms, failed {}{}",
            index + 1,
            self.total,
            point.scenario.name(),
            point.max_tps,
            point.average_rt_ms,
            point.max_rt_ms.ceil(),
            point.failed,
            if point.summary.disk.limited.is_some() {
                ", limited by the disk"
            } else {
                ""
            }
        );
        if self.terminal {
            print!("\r\x1b[2K");
        }
        println!("{line}");
    }

    pub fn clear(&self) {
        if self.terminal {
            print!("\r\x1b[2K");
            let _ = std::io::stdout().flush();
        }
    }
}

/// `point 3/36 (10 threads, 1024 B, 8 queues), about 12m 30s left`
pub fn progress_line(index: usize, total: usize, name: &str, left_s: f64) -> String {
    format!(
        "point {}/{total} ({name}), about {} left",
        index + 1,
        duration_words(left_s)
    )
}

/// The table of the study's points, then its verdict's words.
pub fn print_findings(record: &StudyRecord) {
    for line in table(&record.points) {
        println!("{line}");
    }
    if let Some(verdict) = &record.peak {
        println!();
        for line in &verdict.words {
            println!("{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_says_the_point_the_total_and_the_time_left() {
        assert_eq!(
            progress_line(2, 36, "10 threads, 1024 B, 8 queues", 850.0),
            "point 3/36 (10 threads, 1024 B, 8 queues), about 14m 10s left"
        );
        assert_eq!(duration_words(3_725.0), "1h 02m");
        assert_eq!(duration_words(59.4), "59s");
        let progress = Progress::new(4, 25.0);
        assert_eq!(
            progress.left_s(1),
            75.0,
            "the plan's timing before any point ran"
        );
    }
}
