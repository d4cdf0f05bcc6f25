//! One controller node: the replicated state (`Replicas`), the liveness it sees itself, and
//! where the state is kept. A change is written, whole and fsynced, before the node applies it
//! and before the request that made it is answered, so an answer never names an epoch a
//! restart could forget.

use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};

use quiver_store::durable_file::SnapshotFile;

use crate::config::ControllerConfig;
use crate::liveness::Liveness;
use crate::replicas::{Event, Replicas};

/// The file under `controllerStorePath` that holds the state.
const STATE_FILE: &str = "replicas.json";

pub struct Controller {
    config: Mutex<ControllerConfig>,
    state: Mutex<Replicas>,
    liveness: Mutex<Liveness>,
    file: SnapshotFile,
    /// Where this node serves RocketMQ's requests (its peer address, as bound).
    address: SocketAddr,
}

/// Why a change could not be kept.
#[derive(Debug, thiserror::Error)]
#[error("the controller could not write its state to {path}: {error}")]
pub struct NotKept {
    path: String,
    error: std::io::Error,
}

impl Controller {
    /// Opens the state kept under the configured store path (none yet: empty).
    pub fn open(config: ControllerConfig, address: SocketAddr) -> Result<Controller, String> {
        std::fs::create_dir_all(&config.store_path).map_err(|error| {
            format!(
                "cannot create controllerStorePath {}: {error}",
                config.store_path.display()
            )
        })?;
        let file = SnapshotFile::new(config.store_path.join(STATE_FILE));
        let state: Replicas = file.load(|bytes| serde_json::from_slice(bytes))?;
        tracing::info!(
            path = %file.path().display(),
            broker_sets = state.sets().count(),
            "controller state loaded"
        );
        Ok(Controller {
            config: Mutex::new(config),
            state: Mutex::new(state),
            liveness: Mutex::new(Liveness::default()),
            file,
            address,
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn config(&self) -> MutexGuard<'_, ControllerConfig> {
        self.config.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state, held for deciding and committing one request.
    pub fn state(&self) -> MutexGuard<'_, Replicas> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn liveness(&self) -> MutexGuard<'_, Liveness> {
        self.liveness.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes `events` durable and applies them to `state` (the guard from `state()`): the file
    /// is replaced with the state they lead to, and only once it is on disk does the state in
    /// memory change. On failure nothing changes.
    pub fn commit(&self, state: &mut Replicas, events: &[Event]) -> Result<(), NotKept> {
        if events.is_empty() {
            return Ok(());
        }
        let mut next = state.clone();
        for event in events {
            next.apply(event);
        }
        let bytes = serde_json::to_vec_pretty(&next).expect("the state serializes to JSON");
        self.file.write(|| Some(bytes)).map_err(|error| NotKept {
            path: self.file.path().display().to_string(),
            error,
        })?;
        for event in events {
            tracing::info!(?event, "controller state changed");
        }
        *state = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_changes_are_there_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let config = ControllerConfig {
            store_path: dir.path().join("controller"),
            ..ControllerConfig::default()
        };
        let address = SocketAddr::from(([127, 0, 0, 1], 9878));
        let controller = Controller::open(config.clone(), address).unwrap();
        {
            let mut state = controller.state();
            let event = state
                .apply_broker_id("c", "b", 1, "127.0.0.1:30911;1", 10)
                .unwrap()
                .unwrap();
            controller.commit(&mut state, &[event]).unwrap();
            let elect = Event::ElectMaster {
                name: "b".into(),
                master: Some(1),
            };
            controller.commit(&mut state, &[elect]).unwrap();
        }
        drop(controller);
        let reopened = Controller::open(config, address).unwrap();
        let state = reopened.state();
        let set = state.set("b").unwrap();
        assert_eq!((set.master, set.master_epoch), (Some(1), 1));
        assert_eq!(set.brokers[&1].address, "127.0.0.1:30911");
    }
}
