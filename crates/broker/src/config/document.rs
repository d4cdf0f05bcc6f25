//! `docs/configuration.md`, rendered from `keys::all()`: the document cannot drift from the
//! keys the broker reads, because a test renders it and compares it with the file on disk.
//! After changing a key, rewrite the file with
//! `QUIVER_WRITE_DOCS=1 cargo test -p quiver-broker --lib config::document`.

use super::keys::{self, Group, Key};

/// Where the document lives, from this crate's folder.
const PATH_FROM_CRATE: &str = "../../docs/configuration.md";

/// The environment variable that makes the test write the document instead of comparing it.
const WRITE_VARIABLE: &str = "QUIVER_WRITE_DOCS";

const INTRO: &str = "\
A broker reads RocketMQ's `broker.conf`: `key=value` lines, split as `java.util.Properties` \
splits them (`key: value` and `key value` mean the same), with `#` and `!` comment lines. So an \
operator's existing file starts as it is: keys Quiver does not use are listed in one warning at \
start-up and ignored, and a bad value stops start-up with the line, the key and what is allowed.

`mqadmin getBrokerConfig` (GET_BROKER_CONFIG) answers the configuration in effect as these \
keys, defaults included; applied to a default configuration, its answer gives the same \
configuration back. A default shown as another key (`brokerIP1`, `listenPort` + 1, \
`storePathRootDir`/...) follows that key while unset, and is printed as the value in effect: \
with `listenPort=0`, the port bound.

This document is generated from the table of keys in `crates/broker/src/config/keys.rs`: \
change a key there, then run \
`QUIVER_WRITE_DOCS=1 cargo test -p quiver-broker --lib config::document` to rewrite it.
";

/// The sections, in the document's order.
const GROUPS: [Group; 11] = [
    Group::Identity,
    Group::Network,
    Group::Messages,
    Group::Storage,
    Group::Retention,
    Group::Replication,
    Group::Delivery,
    Group::Pop,
    Group::Transactions,
    Group::NonPersistent,
    Group::Limits,
];

fn title(group: Group) -> &'static str {
    match group {
        Group::Identity => "Identity and name servers",
        Group::Network => "Addresses",
        Group::Messages => "Topics, groups and messages",
        Group::Storage => "Storage and flushing",
        Group::Retention => "Retention",
        Group::Replication => "Replication",
        Group::Delivery => "Delayed and timer messages",
        Group::Pop => "Pop consumption",
        Group::Transactions => "Transactional messages",
        Group::NonPersistent => "Non-persistent topics",
        Group::Limits => "Memory limits",
    }
}

/// What the section's keys do together, which no one key's line can say.
fn intro(group: Group) -> &'static str {
    match group {
        Group::Identity => "Who the broker is and which name servers it registers with.",
        Group::Network => "Where clients reach the broker and where it listens.",
        Group::Messages => {
            "How topics and consumer groups come to exist, what a send may carry, and the \
                 broker's own topics for traces and replies."
        }
        Group::Storage => {
            "Where the store keeps its files, how big they are, and when a send is on disk. \
                 Each path left unset lives under `storePathRootDir`."
        }
        Group::Retention => {
            "Checked every 10 s: at a `deleteWhen` hour (local time), or whenever the disk \
                 is fuller than `diskMaxUsedSpaceRatio`, sealed segments older than \
                 `fileReservedTime` hours go with their ConsumeQueue and index files; past 85 % \
                 full, sealed segments go whatever their age. A round deletes at most 10 \
                 segments, oldest first, as RocketMQ does. A consumer behind deleted data gets \
                 PULL_OFFSET_MOVED with the new minimum. A full disk answers sends with \
                 SERVICE_NOT_AVAILABLE (\"the broker's disk is full\") while pulls keep working."
        }
        Group::Replication => {
            "A master streams its CommitLog to its slaves over the HA port in RocketMQ's HA \
                 protocol. A slave has `brokerRole=SLAVE`, a `brokerId` above 0, its master's \
                 `brokerName` and the same `mappedFileSizeCommitLog`. RocketMQ 5 waits for \
                 slaves only when `inSyncReplicas` is 2 or more; Quiver accepts \
                 `totalReplicas`, `inSyncReplicas` and `minInSyncReplicas` but reads \
                 `SYNC_MASTER` as RocketMQ 4 does whatever they say, so a RocketMQ 5 \
                 configuration written for synchronous replication behaves as intended."
        }
        Group::Delivery => {
            "Messages held back until later: by delay level (DELAY sends and consumer \
                 retries) or at a time (RocketMQ 5 timer messages, kept in \
                 `rmq_sys_wheel_timer`)."
        }
        Group::Pop => {
            "RocketMQ 5's pop consumption, for groups switched to it with `mqadmin \
                 setConsumeMode`: limits on messages popped and not yet acknowledged."
        }
        Group::Transactions => {
            "Half messages (`TransactionMQProducer`) left undecided are checked with a \
                 connected producer of their group (CHECK_TRANSACTION_STATE)."
        }
        Group::NonPersistent => {
            "Topics whose messages live only in memory, in a bounded ring per queue: for \
                 traffic where the newest message matters and a lost one does not. A topic is \
                 made so by the attribute `persistence=memory` or by `nonPersistentTopics`."
        }
        Group::Limits => {
            "What clients can make the broker hold. A request's bytes count from when it is \
                 read, and its answer's from when it is ready, until the answer is written: \
                 past a connection's budget the broker stops reading from that connection, \
                 past the broker's from every connection, until answers are written; a parked \
                 pull or pop woken by a message waits for room before it reads. The log says \
                 so once each time a budget fills. The tables clients fill (topics, \
                 subscription groups, client ids) have limits too: a request that would pass \
                 one is refused with a remark naming its key, and what is there stays."
        }
    }
}

/// The whole document.
pub(super) fn render() -> String {
    let mut text = format!("# Broker configuration\n\n{INTRO}");
    for group in GROUPS {
        text.push_str(&format!("\n## {}\n\n{}\n\n", title(group), intro(group)));
        text.push_str("| key | default | meaning |\n|---|---|---|\n");
        for key in keys::all().filter(|key| key.group == group) {
            text.push_str(&row(key));
        }
    }
    text
}

fn row(key: &Key) -> String {
    let mut names = format!("`{}`", key.name);
    for alias in key.aliases {
        names.push_str(&format!(" (or `{alias}`)"));
    }
    let default = match (key.follows, key.default) {
        (Some(follows), _) => follows.to_string(),
        (None, "") => "none".to_string(),
        (None, default) => format!("`{default}`"),
    };
    // A `|` would end the table cell.
    let cell = |text: &str| text.replace('|', "\\|");
    let doc = match key.live {
        Some(_) => format!(
            "{} Changes at run time (`mqadmin updateBrokerConfig`).",
            key.doc
        ),
        None => key.doc.to_string(),
    };
    format!("| {} | {} | {} |\n", names, cell(&default), cell(&doc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_document_is_the_one_rendered_from_the_keys() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PATH_FROM_CRATE);
        let rendered = render();
        if std::env::var_os(WRITE_VARIABLE).is_some_and(|value| value == "1") {
            std::fs::write(&path, &rendered).expect("docs/configuration.md is writable");
            return;
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == rendered,
            "{} differs from the keys in crates/broker/src/config/keys.rs; rewrite it with \
             `{WRITE_VARIABLE}=1 cargo test -p quiver-broker --lib config::document`",
            path.display()
        );
    }

    #[test]
    fn every_key_is_in_the_document_once() {
        let document = render();
        for key in keys::all() {
            let row = row(key);
            assert_eq!(document.matches(&row).count(), 1, "{}", key.name);
        }
    }
}
