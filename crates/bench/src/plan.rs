//! The plan of a sweep: the axes given by flags or a workload file, and the scenarios (points)
//! they expand to.
//!
//! A workload file holds one `key = value, value, ...` per line; `#` starts a comment:
//!
//! ```text
//! # seed 000: threads x 1 KiB / 3 KiB x 8 / 16 queues
//! threads  = 1, 10, 30, 45, 60, 75, 100, 150, 200
//! sizes    = 1024, 3072
//! queues   = 8, 16
//! warmup   = 5
//! duration = 20
//! ```
//!
//! Keys: `threads`, `sizes`, `queues`, `batch`, `rates` (messages per second, `max` for as
//! fast as possible), `producers`, `consumers`, `warmup`, `duration`, `topic`. A flag given on
//! the command line wins over the file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::BenchError;

/// Points in one plan: seed 000's matrix has 36; ten times that is a week of 20 s points.
pub const POINTS_MAX: usize = 10_000;

#[derive(Debug, Clone, clap::Args)]
pub struct SweepArgs {
    /// Name server addresses, `host:port;host:port`.
    #[arg(short = 'n', long = "namesrv", default_value = "127.0.0.1:9876")]
    pub namesrv: String,
    /// A workload file: `key = value, value` lines, `#` comments; keys threads, sizes, queues,
    /// batch, rates, producers, consumers, warmup, duration, topic (as the flags; a flag wins).
    #[arg(long)]
    pub plan: Option<PathBuf>,
    /// Senders per point, comma-separated (default 1,10,30,45,60,75,100,150,200).
    #[arg(short = 'w', long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub threads: Option<Vec<u32>>,
    /// Body sizes in bytes (default 1024,3072).
    #[arg(short = 's', long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=4_194_304))]
    pub sizes: Option<Vec<u32>>,
    /// Queue counts; each gets its own topic, `<topic><queues>` (default 8,16).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub queues: Option<Vec<u32>>,
    /// Messages per SEND_BATCH_MESSAGE (default 1).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub batch: Option<Vec<u32>>,
    /// Messages per second in total, or `max` (default max).
    #[arg(long, value_delimiter = ',', value_parser = rate)]
    pub rates: Option<Vec<Rate>>,
    /// Producer instances the senders are spread over (default 1).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub producers: Option<Vec<u32>>,
    /// Consumers alongside the producers, in a group of their own per point (default 0: none).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub consumers: Option<u32>,
    /// Warm-up seconds of each point, reported but left out of its figures (default 5).
    #[arg(long, value_parser = crate::seconds)]
    pub warmup: Option<f64>,
    /// Measured seconds of each point (default 20).
    #[arg(long, value_parser = crate::positive_seconds)]
    pub duration: Option<f64>,
    /// Topic name prefix; the queue count is appended (default BenchSweep).
    #[arg(short = 't', long)]
    pub topic: Option<String>,
    /// Seconds between the samples each point keeps.
    #[arg(long = "report-interval", default_value_t = 1.0, value_parser = crate::report_seconds)]
    pub report_interval: f64,
    /// Write the record here after every point; a sweep started again with the same file and
    /// plan resumes after the last point it holds.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Start over even if --json holds finished points.
    #[arg(long)]
    pub fresh: bool,
    /// Also write a self-contained HTML report with charts.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// What the record calls the system under test (`quiver`, `rocketmq-5.5.0`), for compare.
    #[arg(long, default_value = "quiver")]
    pub label: String,
    #[arg(long = "send-timeout-ms", default_value_t = 3_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub send_timeout_ms: u64,
    /// Worker threads of the bench's async runtime.
    #[arg(long = "runtime-threads", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub runtime_threads: u32,
    /// The broker's process id, when it runs on this machine: the disk line then says what
    /// the broker itself wrote to storage.
    #[arg(long = "broker-pid")]
    pub broker_pid: Option<u32>,
}

/// `--rates` value: a number of messages per second or `max`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rate(pub Option<f64>);

fn rate(text: &str) -> Result<Rate, String> {
    if text.trim() == "max" {
        return Ok(Rate(None));
    }
    crate::positive_rate(text.trim()).map(|value| Rate(Some(value)))
}

/// The resolved plan: every axis and the per-point timing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub threads: Vec<u32>,
    pub sizes: Vec<u32>,
    pub queues: Vec<u32>,
    pub batch: Vec<u32>,
    pub rates: Vec<Option<f64>>,
    pub producers: Vec<u32>,
    pub consumers: u32,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub topic: String,
}

/// One point of a plan: what the producers (and consumers) do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    pub threads: u32,
    pub size: u32,
    pub queues: u32,
    pub batch: u32,
    /// Messages per second; None: as fast as possible.
    pub rate: Option<f64>,
    pub producers: u32,
    pub consumers: u32,
}

impl Scenario {
    /// `30 threads, 1024 B, 8 queues` plus whatever differs from plain sends.
    pub fn name(&self) -> String {
        let mut name = format!(
            "{} threads, {} B, {} queues",
            self.threads, self.size, self.queues
        );
        if self.batch > 1 {
            name.push_str(&format!(", batch {}", self.batch));
        }
        if let Some(rate) = self.rate {
            name.push_str(&format!(", {rate:.0} msg/s"));
        }
        if self.producers > 1 {
            name.push_str(&format!(", {} producers", self.producers));
        }
        if self.consumers > 0 {
            name.push_str(&format!(", {} consumers", self.consumers));
        }
        name
    }
}

impl Plan {
    /// The file's values, then the flags' over them, then the defaults (seed 000's matrix).
    pub fn resolve(args: &SweepArgs) -> Result<Plan, BenchError> {
        let file = match &args.plan {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|error| BenchError::Read {
                    path: path.clone(),
                    reason: error.to_string(),
                })?;
                parse_workload(path, &text)?
            }
            None => Workload::default(),
        };
        let plan = Plan {
            threads: pick(
                &args.threads,
                file.threads,
                &[1, 10, 30, 45, 60, 75, 100, 150, 200],
            ),
            sizes: pick(&args.sizes, file.sizes, &[1024, 3072]),
            queues: pick(&args.queues, file.queues, &[8, 16]),
            batch: pick(&args.batch, file.batch, &[1]),
            rates: args
                .rates
                .as_ref()
                .map(|rates| rates.iter().map(|rate| rate.0).collect())
                .or(file.rates)
                .unwrap_or_else(|| vec![None]),
            producers: pick(&args.producers, file.producers, &[1]),
            consumers: args.consumers.or(file.consumers).unwrap_or(0),
            warmup_s: args.warmup.or(file.warmup).unwrap_or(5.0),
            duration_s: args.duration.or(file.duration).unwrap_or(20.0),
            topic: args
                .topic
                .clone()
                .or(file.topic)
                .unwrap_or_else(|| "BenchSweep".into()),
        };
        let points = plan.scenarios().len();
        if points > POINTS_MAX {
            return Err(BenchError::Usage(format!(
                "the plan has {points} points, more than {POINTS_MAX}"
            )));
        }
        Ok(plan)
    }

    /// Every point, in seed 000's order: threads outermost, then queue counts, then sizes.
    pub fn scenarios(&self) -> Vec<Scenario> {
        let mut points = Vec::new();
        for &threads in &self.threads {
            for &queues in &self.queues {
                for &size in &self.sizes {
                    for &batch in &self.batch {
                        for &rate in &self.rates {
                            for &producers in &self.producers {
                                points.push(Scenario {
                                    threads,
                                    size,
                                    queues,
                                    batch,
                                    rate,
                                    producers,
                                    consumers: self.consumers,
                                });
                            }
                        }
                    }
                }
            }
        }
        points
    }

    /// Seconds the whole plan takes, warm-ups included.
    pub fn seconds(&self) -> f64 {
        self.scenarios().len() as f64 * (self.warmup_s + self.duration_s)
    }
}

fn pick(flag: &Option<Vec<u32>>, file: Option<Vec<u32>>, default: &[u32]) -> Vec<u32> {
    flag.clone().or(file).unwrap_or_else(|| default.to_vec())
}

/// What a workload file sets; None where it is silent.
#[derive(Debug, Default, PartialEq)]
struct Workload {
    threads: Option<Vec<u32>>,
    sizes: Option<Vec<u32>>,
    queues: Option<Vec<u32>>,
    batch: Option<Vec<u32>>,
    rates: Option<Vec<Option<f64>>>,
    producers: Option<Vec<u32>>,
    consumers: Option<u32>,
    warmup: Option<f64>,
    duration: Option<f64>,
    topic: Option<String>,
}

fn parse_workload(path: &Path, text: &str) -> Result<Workload, BenchError> {
    let mut workload = Workload::default();
    for (index, line) in text.lines().enumerate() {
        let error = |reason: String| BenchError::Plan {
            path: path.to_owned(),
            line: index + 1,
            reason,
        };
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(error(format!("expected `key = value`, found {line:?}")));
        };
        let (key, value) = (key.trim(), value.trim());
        let values: Vec<&str> = value.split(',').map(str::trim).collect();
        let counts = |low: u32, high: u32| -> Result<Vec<u32>, BenchError> {
            values
                .iter()
                .map(|text| match text.parse::<u32>() {
                    Ok(n) if (low..=high).contains(&n) => Ok(n),
                    _ => Err(error(format!(
                        "{key}: {text:?} is not a whole number from {low} to {high}"
                    ))),
                })
                .collect()
        };
        let one_number = |check: fn(&str) -> Result<f64, String>| -> Result<f64, BenchError> {
            match values.as_slice() {
                [single] => check(single).map_err(|reason| error(format!("{key}: {reason}"))),
                _ => Err(error(format!("{key} takes one value, found {value:?}"))),
            }
        };
        match key {
            "threads" => workload.threads = Some(counts(1, 4096)?),
            "sizes" => workload.sizes = Some(counts(1, 4_194_304)?),
            "queues" => workload.queues = Some(counts(1, 1024)?),
            "batch" => workload.batch = Some(counts(1, 4096)?),
            "producers" => workload.producers = Some(counts(1, 4096)?),
            "consumers" => {
                workload.consumers = Some(match counts(0, 64)?.as_slice() {
                    [single] => *single,
                    _ => return Err(error(format!("consumers takes one value, found {value:?}"))),
                })
            }
            "rates" => {
                let rates = values
                    .iter()
                    .map(|text| rate(text).map(|rate| rate.0))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|reason| error(format!("rates: {reason}")))?;
                workload.rates = Some(rates);
            }
            "warmup" => workload.warmup = Some(one_number(crate::seconds)?),
            "duration" => workload.duration = Some(one_number(crate::positive_seconds)?),
            "topic" if !value.is_empty() && !value.contains(char::is_whitespace) => {
                workload.topic = Some(value.to_owned())
            }
            "topic" => return Err(error(format!("topic: {value:?} is not a topic name"))),
            other => {
                return Err(error(format!(
                    "unknown key {other:?}; known: threads, sizes, queues, batch, rates, producers, consumers, warmup, duration, topic"
                )))
            }
        }
    }
    Ok(workload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sweep: SweepArgs,
    }

    fn args(flags: &[&str]) -> SweepArgs {
        let mut argv = vec!["sweep"];
        argv.extend_from_slice(flags);
        Cli::try_parse_from(argv).expect("flags parse").sweep
    }

    #[test]
    fn defaults_are_seed_000s_matrix_in_its_order() {
        let plan = Plan::resolve(&args(&[])).expect("plan");
        let points = plan.scenarios();
        assert_eq!(points.len(), 36);
        let first: Vec<(u32, u32, u32)> = points
            .iter()
            .take(5)
            .map(|p| (p.threads, p.size, p.queues))
            .collect();
        // Seed 000's scenarios one to five.
        assert_eq!(
            first,
            vec![
                (1, 1024, 8),
                (1, 3072, 8),
                (1, 1024, 16),
                (1, 3072, 16),
                (10, 1024, 8)
            ]
        );
        assert_eq!(plan.seconds(), 36.0 * 25.0);
    }

    #[test]
    fn a_workload_file_sets_the_plan_and_flags_win_over_it() {
        let dir = std::env::temp_dir().join(format!("quiver-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("plan.txt");
        std::fs::write(
            &path,
            "# small\nthreads = 1, 4\nsizes=128\nqueues = 2 # trailing\nrates = max, 500\nconsumers = 1\nwarmup = 0.5\nduration = 2\ntopic = Small\n",
        )
        .expect("write");
        let plan = Plan::resolve(&args(&[
            "--plan",
            path.to_str().expect("utf-8"),
            "-s",
            "64,256",
        ]))
        .expect("plan");
        assert_eq!(plan.threads, vec![1, 4]);
        assert_eq!(plan.sizes, vec![64, 256], "the flag wins");
        assert_eq!(plan.queues, vec![2]);
        assert_eq!(plan.rates, vec![None, Some(500.0)]);
        assert_eq!(
            (plan.consumers, plan.warmup_s, plan.duration_s),
            (1, 0.5, 2.0)
        );
        assert_eq!(plan.topic, "Small");
        assert_eq!(plan.scenarios().len(), 8);
        assert_eq!(
            plan.scenarios()[1].name(),
            "1 threads, 64 B, 2 queues, 500 msg/s, 1 consumers"
        );
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn a_bad_workload_file_is_refused_with_its_line() {
        let path = Path::new("plan.txt");
        let refused = |text: &str| match parse_workload(path, text) {
            Err(error) => error.to_string(),
            Ok(workload) => panic!("accepted {text:?} as {workload:?}"),
        };
        assert_eq!(
            refused("threads = 1\nsizes = 1k\n"),
            "plan.txt, line 2: sizes: \"1k\" is not a whole number from 1 to 4194304"
        );
        assert!(refused("threads 1").contains("line 1: expected `key = value`"));
        assert!(refused("thread = 1").contains("unknown key \"thread\""));
        assert!(refused("threads = 0").contains("from 1 to 4096"));
        assert!(refused("duration = 0").contains("must be more than zero seconds"));
        assert!(refused("warmup = 1, 2").contains("warmup takes one value"));
        assert!(refused("rates = fast").contains("not a positive number"));
        assert!(refused("topic = a b").contains("is not a topic name"));
    }

    #[test]
    fn a_missing_plan_file_is_named() {
        let error =
            Plan::resolve(&args(&["--plan", "/nonexistent/plan.txt"])).expect_err("missing file");
        assert!(error
            .to_string()
            .starts_with("cannot read /nonexistent/plan.txt"));
    }
}
