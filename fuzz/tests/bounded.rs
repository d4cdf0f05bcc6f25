//! Every fuzz target for a few seconds, on stable: its seed corpus, then mutations of it (see
//! `quiver_fuzz::bounded`). `scripts/fuzz.sh` runs them for longer under cargo-fuzz.
//!
//! `QUIVER_FUZZ_SECONDS` changes the time per target, `QUIVER_FUZZ_SEED` replays a run.

use quiver_fuzz::bounded::{run, Budget};
use quiver_fuzz::TARGETS;

/// Seconds per target. The harness runs the targets side by side, one per core: on CI's two
/// cores, 11 targets of 5 s take about 30 s.
const SECONDS_PER_TARGET: f64 = 5.0;

macro_rules! bounded {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn survives_its_corpus_and_mutations_of_it() {
                    let target = quiver_fuzz::target(stringify!($name)).expect("a target");
                    super::run(target, super::Budget::from_env(super::SECONDS_PER_TARGET));
                }
            }
        )*

        #[test]
        fn every_target_is_run_here() {
            let here = [$(stringify!($name)),*];
            let all: Vec<&str> = TARGETS.iter().map(|target| target.name).collect();
            assert_eq!(here.to_vec(), all);
        }
    };
}

bounded!(
    decode_frame,
    json_header,
    json_body,
    receipt_handle,
    sql92,
    batch_ack,
    ha_slave_stream,
    ha_autoswitch_stream,
    ha_master_session,
    ha_slave_session,
    namesrv_requests,
    store_recovery,
);

#[test]
fn every_target_has_a_cargo_fuzz_binary() {
    let dir = quiver_fuzz::bounded::fuzz_dir();
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for target in TARGETS {
        let path = format!("fuzz_targets/{}.rs", target.name);
        assert!(
            manifest.contains(&format!("name = \"{}\"\npath = \"{path}\"", target.name)),
            "no [[bin]] for {}",
            target.name
        );
        assert!(dir.join(&path).is_file(), "{path} is missing");
    }
}
