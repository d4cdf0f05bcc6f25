//! Every `broker.conf` key Quiver acts on, written once: its RocketMQ name, the default it
//! prints, how a value is read into `BrokerConfig`, how it is printed back, and a line of
//! documentation. `properties.rs` reads and prints broker.conf through `all()` alone, and
//! `docs/configuration.md` is rendered from it: `document.rs` holds the renderer and the test
//! that compares it with the file; after changing a key, regenerate the file with
//! `QUIVER_WRITE_DOCS=1 cargo test -p quiver-broker --lib config::document`.
//!
//! `all()` gives the keys in the order GET_BROKER_CONFIG prints (`mqadmin getBrokerConfig`); the document
//! orders them by `Group`.

use quiver_store::{FlushMode, StoreConfig};

use super::field::Field;
use super::{BrokerConfig, BrokerRole, ConfigError, LiveKey};

// `group`, `default`, `follows` and `doc` are read by the document and the tests, which only
// tests build.
#[cfg_attr(not(test), allow(dead_code))]
pub(super) struct Key {
    /// RocketMQ's name, as broker.conf spells it and GET_BROKER_CONFIG prints it.
    pub(super) name: &'static str,
    /// Other spellings read as this key: RocketMQ 4 wrote `maped` for `mapped`.
    pub(super) aliases: &'static [&'static str],
    pub(super) group: Group,
    /// What a default configuration prints, bound to its default `listenPort`; a test holds
    /// it to `print`.
    pub(super) default: &'static str,
    /// For a key that, left unset, follows another: what it follows, for the document. Its
    /// printed value is the one in effect, so reading the printed line back sets the key.
    pub(super) follows: Option<&'static str>,
    pub(super) doc: &'static str,
    /// A key `mqadmin updateBrokerConfig` changes while the broker runs; the others are read
    /// only at start.
    pub(super) live: Option<LiveKey>,
    pub(super) read: fn(&mut Reading<'_>, &Field<'_>) -> Result<(), ConfigError>,
    pub(super) print: fn(&Printing<'_>) -> String,
}

/// The names of the keys that change while the broker runs.
pub(super) fn live_names() -> impl Iterator<Item = &'static str> {
    all().filter(|key| key.live.is_some()).map(|key| key.name)
}

/// The key spelled `name`, under its own name or an alias.
pub(super) fn find(name: &str) -> Option<&'static Key> {
    all().find(|key| key.name == name || key.aliases.contains(&name))
}

/// A broker.conf being applied. RocketMQ spreads the flush over four keys whose meaning
/// depends on `flushDiskType` (an interval means nothing to SYNC_FLUSH), so they are gathered
/// in `flush` and made one `FlushMode` by `finish`, whatever order the file gives them in.
pub(super) struct Reading<'a> {
    pub(super) config: &'a mut BrokerConfig,
    pub(super) flush: FlushKeys,
}

impl<'a> Reading<'a> {
    pub(super) fn of(config: &'a mut BrokerConfig) -> Self {
        let flush = FlushKeys::of(config.flush);
        Reading { config, flush }
    }

    /// The file is read: the flush keys become the configuration's flush mode.
    pub(super) fn finish(self) {
        self.config.flush = self.flush.mode();
    }
}

/// A configuration as it is printed: with the port bound (which differs from `listenPort=0`),
/// the store paths in effect (defaults included) and the four flush keys.
pub(super) struct Printing<'a> {
    pub(super) config: &'a BrokerConfig,
    pub(super) listen_port: u16,
    pub(super) store: StoreConfig,
    pub(super) flush: FlushKeys,
}

impl<'a> Printing<'a> {
    pub(super) fn of(config: &'a BrokerConfig, listen_port: u16) -> Self {
        Printing {
            config,
            listen_port,
            store: config.store_config(),
            flush: FlushKeys::of(config.flush),
        }
    }

    fn path(path: &std::path::Path) -> String {
        path.display().to_string()
    }
}

/// RocketMQ's defaults for the keys of the flush mode not in effect: printed so that a
/// printed file says what switching the mode alone would give, and reads back the same.
const FLUSH_INTERVAL_MS_DEFAULT: u64 = 500;
const FLUSH_LEAST_PAGES_DEFAULT: u32 = 4;
const SYNC_FLUSH_TIMEOUT_MS_DEFAULT: u64 = 5_000;

/// The values of `flushDiskType`, `flushIntervalCommitLog`, `flushCommitLogLeastPages` and
/// `syncFlushTimeout`, whichever mode is in effect.
#[derive(Debug, Clone, Copy)]
pub(super) struct FlushKeys {
    sync: bool,
    interval_ms: u64,
    least_pages: u32,
    sync_timeout_ms: u64,
}

impl FlushKeys {
    fn of(flush: FlushMode) -> Self {
        match flush {
            FlushMode::Sync { timeout_ms } => FlushKeys {
                sync: true,
                interval_ms: FLUSH_INTERVAL_MS_DEFAULT,
                least_pages: FLUSH_LEAST_PAGES_DEFAULT,
                sync_timeout_ms: timeout_ms,
            },
            FlushMode::Async {
                interval_ms,
                least_pages,
            } => FlushKeys {
                sync: false,
                interval_ms,
                least_pages,
                sync_timeout_ms: SYNC_FLUSH_TIMEOUT_MS_DEFAULT,
            },
        }
    }

    fn mode(self) -> FlushMode {
        if self.sync {
            FlushMode::Sync {
                timeout_ms: self.sync_timeout_ms,
            }
        } else {
            FlushMode::Async {
                interval_ms: self.interval_ms,
                least_pages: self.least_pages,
            }
        }
    }
}

const ROLES: [(&str, BrokerRole); 3] = [
    ("ASYNC_MASTER", BrokerRole::AsyncMaster),
    ("SYNC_MASTER", BrokerRole::SyncMaster),
    ("SLAVE", BrokerRole::Slave),
];

/// `flushDiskType`'s values: whether the flush is synchronous.
const FLUSH_TYPES: [(&str, bool); 2] = [("ASYNC_FLUSH", false), ("SYNC_FLUSH", true)];

/// The text of `value` among `choices`. Every value of the field's type is among them, so a
/// missing one is a bug in the table.
fn text_of<T: PartialEq + std::fmt::Debug>(choices: &[(&'static str, T)], value: &T) -> String {
    let found = choices.iter().find(|(_, choice)| choice == value);
    let (text, _) = found.unwrap_or_else(|| panic!("{value:?} has no text in {choices:?}"));
    text.to_string()
}

/// A ConsumeQueue entry: RocketMQ sizes ConsumeQueue files in bytes, Quiver in entries.
const CONSUME_QUEUE_ENTRY_BYTES: u64 = 20;

/// The section of the configuration document a key is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Group {
    Identity,
    Network,
    Messages,
    Storage,
    Retention,
    Replication,
    Delivery,
    Pop,
    Transactions,
    NonPersistent,
    Limits,
}

mod broker;
mod features;
mod grpc;
mod store;

/// Every key, in the order GET_BROKER_CONFIG prints them: the table is long, so it is kept in
/// three files by subject, read here in that order.
pub(super) fn all() -> impl Iterator<Item = &'static Key> {
    [broker::BROKER, store::STORE, features::FEATURES, grpc::GRPC]
        .into_iter()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn printed(config: &BrokerConfig, key: &Key) -> String {
        (key.print)(&Printing::of(config, config.listen_port))
    }

    #[test]
    fn each_default_is_what_a_default_configuration_prints() {
        let config = BrokerConfig::default();
        for key in all() {
            assert_eq!(printed(&config, key), key.default, "{}", key.name);
        }
    }

    /// A key that follows another while unset is set by reading its printed value back:
    /// the configuration prints the same, but no longer follows.
    #[test]
    fn each_default_printed_and_read_back_gives_the_default_configuration() {
        let default = BrokerConfig::default();
        for key in all() {
            let mut config = BrokerConfig::default();
            let line = format!("{}={}\n", key.name, printed(&default, key));
            let unknown = config
                .apply_properties(&line)
                .expect("a printed value reads");
            assert!(unknown.is_empty(), "{line}");
            match key.follows {
                None => assert_eq!(config, default, "{line}"),
                Some(_) => assert_eq!(
                    config.properties(config.listen_port),
                    default.properties(default.listen_port),
                    "{line}"
                ),
            }
        }
    }

    #[test]
    fn names_and_aliases_are_each_one_key() {
        let mut seen = std::collections::HashSet::new();
        for key in all() {
            for name in std::iter::once(&key.name).chain(key.aliases) {
                assert!(seen.insert(*name), "{name} is spelled twice");
                assert!(std::ptr::eq(find(name).expect("found"), key), "{name}");
            }
        }
        assert!(find("sendMessageThreadPoolNums").is_none());
    }

    #[test]
    fn each_doc_is_one_sentence_on_one_line() {
        for key in all() {
            assert!(!key.doc.contains('\n'), "{}", key.name);
            assert!(key.doc.ends_with('.'), "{}", key.name);
        }
    }

    /// The flush keys depend on `flushDiskType`, which may come before or after them.
    #[test]
    fn flush_keys_take_effect_together_whatever_their_order() {
        let read = |base: &BrokerConfig, text: &str| {
            let mut config = base.clone();
            config.apply_properties(text).expect("valid");
            config.flush
        };
        let default = BrokerConfig::default();
        let sync_first = "flushDiskType=SYNC_FLUSH\nsyncFlushTimeout=100\nflushIntervalCommitLog=7";
        let sync_last = "syncFlushTimeout=100\nflushIntervalCommitLog=7\nflushDiskType=SYNC_FLUSH";
        for text in [sync_first, sync_last] {
            assert_eq!(read(&default, text), FlushMode::Sync { timeout_ms: 100 });
        }
        // Back to ASYNC_FLUSH: the intervals given, or RocketMQ's defaults, not the last ones.
        let mut sync = default.clone();
        sync.apply_properties(sync_first).expect("valid");
        assert_eq!(
            read(&sync, "flushDiskType=ASYNC_FLUSH"),
            FlushMode::Async {
                interval_ms: FLUSH_INTERVAL_MS_DEFAULT,
                least_pages: FLUSH_LEAST_PAGES_DEFAULT
            }
        );
        assert_eq!(
            read(
                &sync,
                "flushCommitLogLeastPages=0\nflushDiskType=ASYNC_FLUSH"
            ),
            FlushMode::Async {
                interval_ms: FLUSH_INTERVAL_MS_DEFAULT,
                least_pages: 0
            }
        );
        // An interval alone leaves a synchronous flush as it was.
        assert_eq!(read(&sync, "flushIntervalCommitLog=9"), sync.flush);
        // A bad line leaves the flush as it was, though the keys before it were read.
        let mut config = default.clone();
        let error = config.apply_properties("flushDiskType=SYNC_FLUSH\nbrokerId=x");
        assert_eq!(error.map_err(|error| error.line), Err(2));
        assert_eq!(config.flush, default.flush);
    }
}
