//! A bounded fuzz run on stable Rust: each target over its seed corpus, then over inputs
//! mutated from it (bit flips, interesting integers, tokens, insertions, deletions, splices
//! of two seeds) and a few random ones, until its time is up. No coverage feedback, so it
//! finds less than cargo-fuzz; it runs on every CI run, cargo-fuzz when someone runs
//! `scripts/fuzz.sh`.
//!
//! Input `i` of a run depends only on the run's seed and `i`, so a failure replays: the seed
//! is printed when a run starts (straight to stderr, which the test harness does not capture,
//! so it is there even when the process dies of a stack overflow), and a panicking input is
//! saved under `fuzz/artifacts/<target>/`.

use std::io::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::Target;

/// Inputs grow no larger than this: the seeds are frames of a few KiB, and longer inputs
/// mostly cost time.
const INPUT_BYTES_MAX: usize = 64 * 1024;
/// Mutations stacked on one input at most.
const MUTATIONS_MAX: u64 = 8;
/// Big-endian integers the wire is full of, at their edges.
const INTERESTING_I32: [i32; 10] = [
    0,
    1,
    -1,
    8,
    12,
    0x7f,
    0xff,
    i32::MAX,
    i32::MIN,
    16 * 1024 * 1024,
];
const INTERESTING_I64: [i64; 5] = [0, -1, i64::MAX, i64::MIN, 1 << 32];
/// The same edges written out, for the numbers in JSON, headers, handles and selectors.
const INTERESTING_DECIMALS: [&[u8]; 9] = [
    b"0",
    b"-1",
    b"2147483647",
    b"-2147483649",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"18446744073709551616",
    b"1e400",
    b"0.5",
];

/// How long one target runs, and from which seed.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub time: Duration,
    /// Stop after this many generated inputs, if the time lasts (for a replay).
    pub inputs_max: Option<u64>,
    pub seed: u64,
}

impl Budget {
    /// From the environment: `QUIVER_FUZZ_SECONDS` per target (default `seconds`),
    /// `QUIVER_FUZZ_INPUTS` (a count of inputs, for replays) and `QUIVER_FUZZ_SEED` (default:
    /// from the clock, so that each run explores new inputs).
    pub fn from_env(seconds: f64) -> Budget {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let seconds = env("QUIVER_FUZZ_SECONDS").map_or(seconds, |v| {
            v.parse()
                .expect("QUIVER_FUZZ_SECONDS is a number of seconds")
        });
        let seed = env("QUIVER_FUZZ_SEED").map_or_else(clock_seed, |v| {
            v.parse().expect("QUIVER_FUZZ_SEED is an unsigned integer")
        });
        Budget {
            time: Duration::from_secs_f64(seconds),
            inputs_max: env("QUIVER_FUZZ_INPUTS")
                .map(|v| v.parse().expect("QUIVER_FUZZ_INPUTS is a count")),
            seed,
        }
    }
}

fn clock_seed() -> u64 {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    now.as_nanos() as u64 ^ u64::from(std::process::id()) << 32
}

/// What a run did.
#[derive(Debug, Clone, Copy)]
pub struct Report {
    pub seeds: usize,
    pub inputs: u64,
}

/// The fuzz crate's folder, where `corpus/` and `artifacts/` are.
pub fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The seed inputs of `target`, in name order.
pub fn seeds(target: &Target) -> Vec<Vec<u8>> {
    let dir = fuzz_dir().join("corpus").join(target.name);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|path| std::fs::read(path).expect("a corpus file"))
        .collect()
}

/// Runs `target` over its seeds, then over generated inputs until `budget` is spent. Panics,
/// naming the seed and the saved input, if the target panics on any of them.
pub fn run(target: &Target, budget: Budget) -> Report {
    let seeds = seeds(target);
    assert!(!seeds.is_empty(), "{} has no seed inputs", target.name);
    // Not captured by the test harness: there even if the process dies.
    let _ = writeln!(
        std::io::stderr(),
        "fuzz {}: {} seeds, then {:?} from seed {} (replay: QUIVER_FUZZ_SEED={} cargo test -p quiver-fuzz {})",
        target.name,
        seeds.len(),
        budget.time,
        budget.seed,
        budget.seed,
        target.name,
    );
    for (index, input) in seeds.iter().enumerate() {
        survive(target, input, &format!("seed {index}"));
    }
    let deadline = Instant::now() + budget.time;
    let mut inputs = 0;
    while Instant::now() < deadline && budget.inputs_max.is_none_or(|max| inputs < max) {
        let input = generate(&seeds, target.tokens, budget.seed, inputs);
        survive(
            target,
            &input,
            &format!("seed {} input {inputs}", budget.seed),
        );
        inputs += 1;
    }
    let _ = writeln!(
        std::io::stderr(),
        "fuzz {}: {} seeds and {inputs} generated inputs passed",
        target.name,
        seeds.len(),
    );
    Report {
        seeds: seeds.len(),
        inputs,
    }
}

/// Runs one input; on a panic saves it and fails with where it is.
fn survive(target: &Target, input: &[u8], which: &str) {
    if catch_unwind(AssertUnwindSafe(|| (target.run)(input))).is_ok() {
        return;
    }
    let saved = save_failure(target, input);
    panic!(
        "fuzz target {} panicked on {which}, saved as {} ({} bytes). Add it to fuzz/corpus/{}/ \
         once fixed, so that every run tries it again.",
        target.name,
        saved.display(),
        input.len(),
        target.name,
    );
}

fn save_failure(target: &Target, input: &[u8]) -> PathBuf {
    let dir = fuzz_dir().join("artifacts").join(target.name);
    let path = dir.join(format!("bounded-{:016x}", fnv1a(input)));
    let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, input));
    if let Err(error) = written {
        return Path::new(&format!("(not saved: {error})")).to_path_buf();
    }
    path
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// SplitMix64: small, fast, and any seed gives a good sequence.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `bound` (which must not be 0).
    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }
}

/// Input number `index` of the run from `seed`: one in sixteen random bytes, the rest a seed
/// input with a few mutations stacked on it.
pub fn generate(seeds: &[Vec<u8>], tokens: &[&[u8]], seed: u64, index: u64) -> Vec<u8> {
    let mut rng = Rng(seed ^ index.wrapping_mul(0xd605_bbb5_8c8a_bd35));
    rng.next();
    if rng.below(16) == 0 {
        let length = rng.below(256);
        return (0..length).map(|_| rng.next() as u8).collect();
    }
    let mut input = seeds[rng.below(seeds.len())].clone();
    for _ in 0..1 + rng.next() % MUTATIONS_MAX {
        mutate(&mut input, seeds, tokens, &mut rng);
    }
    input.truncate(INPUT_BYTES_MAX);
    input
}

fn mutate(input: &mut Vec<u8>, seeds: &[Vec<u8>], tokens: &[&[u8]], rng: &mut Rng) {
    if input.is_empty() {
        input.push(rng.next() as u8);
        return;
    }
    let at = rng.below(input.len());
    match rng.below(11) {
        0 => input[at] ^= 1 << rng.below(8),
        1 => input[at] = rng.next() as u8,
        2 => overwrite(input, at, &INTERESTING_I32[rng.below(10)].to_be_bytes()),
        3 => overwrite(input, at, &INTERESTING_I64[rng.below(5)].to_be_bytes()),
        4 if !tokens.is_empty() => {
            let token = tokens[rng.below(tokens.len())];
            input.splice(at..at, token.iter().copied());
        }
        5 => {
            let end = (at + 1 + rng.below(64)).min(input.len());
            input.drain(at..end);
        }
        6 => {
            // A run of the input copied elsewhere in it: repeats nesting and lists.
            let end = (at + 1 + rng.below(64)).min(input.len());
            let run = input[at..end].to_vec();
            let to = rng.below(input.len() + 1);
            input.splice(to..to, run);
        }
        7 => {
            // The start of this input with the end of another: frames of two kinds in one.
            let other = &seeds[rng.below(seeds.len())];
            let from = rng.below(other.len() + 1);
            input.truncate(at);
            input.extend_from_slice(&other[from..]);
        }
        8 => input.truncate(at),
        9 => replace_number(input, at, INTERESTING_DECIMALS[rng.below(9)]),
        _ => {
            let count = 1 + rng.below(8);
            let bytes: Vec<u8> = (0..count).map(|_| rng.next() as u8).collect();
            input.splice(at..at, bytes);
        }
    }
}

/// Replaces the first run of ASCII digits from `at` on with `number`.
fn replace_number(input: &mut Vec<u8>, at: usize, number: &[u8]) {
    let Some(start) = input[at..].iter().position(u8::is_ascii_digit) else {
        return;
    };
    let start = at + start;
    let length = input[start..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    input.splice(start..start + length, number.iter().copied());
}

/// Writes `bytes` over `input` from `at`, as far as it reaches.
fn overwrite(input: &mut [u8], at: usize, bytes: &[u8]) {
    let end = (at + bytes.len()).min(input.len());
    input[at..end].copy_from_slice(&bytes[..end - at]);
}
