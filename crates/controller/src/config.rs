//! The controller's settings, from RocketMQ's keys: in a name server's `namesrv.conf` with
//! `enableControllerInNamesrv=true`, or in the file `quiver controller -c` reads.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Replicas registered in all broker sets, and brokers whose heartbeats are tracked, at most.
pub const BROKERS_MAX_DEFAULT: usize = 10_000;
/// Bytes of requests not yet whole that the controller holds for all connections together.
pub const BYTES_MAX_DEFAULT: usize = 64 * 1024 * 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerConfig {
    /// `controllerDLegerGroup`.
    pub group: String,
    /// `controllerDLegerPeers`: `n0-127.0.0.1:9878;n1-...`, as (id, address).
    pub peers: Vec<(String, SocketAddr)>,
    /// `controllerDLegerSelfId`.
    pub self_id: String,
    /// `controllerStorePath`: where the replicated state is kept.
    pub store_path: PathBuf,
    /// `scanNotActiveBrokerInterval`: how often brokers past their heartbeat timeout are
    /// looked for, and sets without a live master.
    pub scan_interval_ms: u64,
    /// `enableElectUncleanMaster`: with it, a replica outside the SyncStateSet may become
    /// master when none inside is alive, losing what it lacks.
    pub elect_unclean_master: bool,
    /// `notifyBrokerRoleChanged`: tell a set's live brokers of an election at once.
    pub notify_broker_role_changed: bool,
    /// `electMasterMaxRetryCount`.
    pub elect_master_retries: u32,
    /// `quiverControllerBrokersMax`.
    pub brokers_max: usize,
    /// Connections served at once.
    pub connections_max: usize,
    /// `quiverControllerBytesMax`: bytes of requests not yet whole held for all connections.
    pub bytes_max: usize,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
        ControllerConfig {
            group: "DefaultControllerGroup".into(),
            peers: vec![("n0".into(), SocketAddr::from(([127, 0, 0, 1], 9878)))],
            self_id: "n0".into(),
            store_path: home.join("DLedgerController"),
            scan_interval_ms: 5_000,
            elect_unclean_master: false,
            notify_broker_role_changed: true,
            elect_master_retries: 3,
            brokers_max: BROKERS_MAX_DEFAULT,
            connections_max: 10_000,
            bytes_max: BYTES_MAX_DEFAULT,
        }
    }
}

/// A line of a controller configuration that cannot be taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {key}={value}: {why}")]
pub struct ConfigError {
    pub line: usize,
    pub key: String,
    pub value: String,
    pub why: String,
}

impl ControllerConfig {
    /// Applies the controller's keys of a properties text; returns the keys it did not take
    /// (the name server's own, or ones Quiver ignores), for the caller to judge.
    pub fn apply_properties(&mut self, text: &str) -> Result<Vec<String>, ConfigError> {
        let mut others = Vec::new();
        for entry in quiver_wire::properties::entries(text) {
            let (line, key, value) = entry.map_err(|(line, text)| ConfigError {
                line,
                key: text.to_string(),
                value: String::new(),
                why: "not a key=value line".into(),
            })?;
            let bad = |why: &str| ConfigError {
                line,
                key: key.to_string(),
                value: value.to_string(),
                why: why.to_string(),
            };
            let flag = || match value {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(bad("true or false")),
            };
            let number = |min: u64, max: u64| {
                value
                    .parse::<u64>()
                    .ok()
                    .filter(|n| (min..=max).contains(n))
                    .ok_or_else(|| bad(&format!("a whole number from {min} to {max}")))
            };
            match key {
                "controllerDLegerGroup" => self.group = value.to_string(),
                "controllerDLegerPeers" => {
                    self.peers = parse_peers(value).map_err(|why| bad(&why))?
                }
                "controllerDLegerSelfId" => self.self_id = value.to_string(),
                "controllerStorePath" => self.store_path = PathBuf::from(value),
                "scanNotActiveBrokerInterval" | "scanInactiveMasterInterval" => {
                    self.scan_interval_ms = number(100, 3_600_000)?
                }
                "enableElectUncleanMaster" => self.elect_unclean_master = flag()?,
                "notifyBrokerRoleChanged" => self.notify_broker_role_changed = flag()?,
                "electMasterMaxRetryCount" => self.elect_master_retries = number(1, 100)? as u32,
                "quiverControllerBrokersMax" => self.brokers_max = number(1, 1_000_000)? as usize,
                "quiverControllerBytesMax" => self.bytes_max = number(64 * 1024, 1 << 34)? as usize,
                "controllerType" if value.eq_ignore_ascii_case("DLedger") => {}
                "controllerType" => {
                    return Err(bad(
                        "DLedger: Quiver's controller answers RocketMQ's requests as a DLedger \
                         controller does, on the address of its own peer",
                    ))
                }
                other => others.push(other.to_string()),
            }
        }
        Ok(others)
    }

    /// Where this node listens: its own entry of the peers.
    pub fn listen_addr(&self) -> Result<SocketAddr, String> {
        self.peers
            .iter()
            .find(|(id, _)| id == &self.self_id)
            .map(|(_, addr)| *addr)
            .ok_or_else(|| {
                format!(
                    "controllerDLegerSelfId {} is not among controllerDLegerPeers",
                    self.self_id
                )
            })
    }

    /// The peers as GET_METADATA_INFO lists them: `n0:127.0.0.1:9878;n1:...;`.
    pub fn peers_text(&self) -> String {
        self.peers
            .iter()
            .map(|(id, addr)| format!("{id}:{addr};"))
            .collect()
    }

    /// The settings as `key=value` lines (GET_CONTROLLER_CONFIG).
    pub fn properties(&self) -> String {
        let peers: Vec<String> = self
            .peers
            .iter()
            .map(|(id, addr)| format!("{id}-{addr}"))
            .collect();
        [
            ("controllerDLegerGroup", self.group.clone()),
            ("controllerDLegerPeers", peers.join(";")),
            ("controllerDLegerSelfId", self.self_id.clone()),
            ("controllerStorePath", self.store_path.display().to_string()),
            ("controllerType", "DLedger".to_string()),
            (
                "scanNotActiveBrokerInterval",
                self.scan_interval_ms.to_string(),
            ),
            (
                "enableElectUncleanMaster",
                self.elect_unclean_master.to_string(),
            ),
            (
                "notifyBrokerRoleChanged",
                self.notify_broker_role_changed.to_string(),
            ),
            (
                "electMasterMaxRetryCount",
                self.elect_master_retries.to_string(),
            ),
            ("quiverControllerBrokersMax", self.brokers_max.to_string()),
            ("quiverControllerBytesMax", self.bytes_max.to_string()),
        ]
        .iter()
        .map(|(key, value)| format!("{key}={value}\n"))
        .collect()
    }
}

/// `n0-127.0.0.1:9878;n1-127.0.0.1:9879`.
fn parse_peers(text: &str) -> Result<Vec<(String, SocketAddr)>, String> {
    let peers: Result<Vec<_>, String> = text
        .split(';')
        .map(str::trim)
        .filter(|peer| !peer.is_empty())
        .map(|peer| {
            let (id, addr) = peer
                .split_once('-')
                .ok_or_else(|| format!("peer {peer:?} is not id-host:port"))?;
            let addr = addr
                .parse::<SocketAddr>()
                .map_err(|_| format!("peer {peer:?}: {addr:?} is not an ip:port"))?;
            Ok((id.to_string(), addr))
        })
        .collect();
    let peers = peers?;
    if peers.is_empty() {
        return Err("no peers".into());
    }
    Ok(peers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rocketmqs_quick_start_namesrv_conf_sets_the_controller() {
        let mut config = ControllerConfig::default();
        let text =
            "listenPort=9876\nenableControllerInNamesrv=true\ncontrollerDLegerGroup=group1\n\
                    controllerDLegerPeers=n0-127.0.0.1:9878\ncontrollerDLegerSelfId=n0\n\
                    controllerStorePath=/tmp/c\nenableElectUncleanMaster=false\n";
        let others = config.apply_properties(text).unwrap();
        assert_eq!(others, ["listenPort", "enableControllerInNamesrv"]);
        assert_eq!(config.group, "group1");
        assert_eq!(config.listen_addr().unwrap().port(), 9878);
        assert_eq!(config.peers_text(), "n0:127.0.0.1:9878;");
        let mut again = ControllerConfig::default();
        again.apply_properties(&config.properties()).unwrap();
        assert_eq!(again, config);
    }

    #[test]
    fn bad_lines_say_which_and_why() {
        let mut config = ControllerConfig::default();
        let error = config
            .apply_properties("a=1\ncontrollerDLegerPeers=n0-nowhere\n")
            .unwrap_err();
        assert_eq!(error.line, 2);
        assert!(error.why.contains("ip:port"), "{error}");
        let error = config
            .apply_properties("controllerType=jRaft\n")
            .unwrap_err();
        assert!(error.why.contains("DLedger"));
        config.self_id = "n9".into();
        assert!(config.listen_addr().is_err());
    }
}
