//! The subscription-group table: each consumer group's settings, as RocketMQ's
//! `SubscriptionGroupManager` keeps them, persisted as `config/subscriptionGroup.json` in
//! RocketMQ's shape. Groups are created by `mqadmin updateSubGroup`, and on first use
//! (heartbeat, pull, pop, offset commit) when `autoCreateSubscriptionGroup` is on. The settings
//! that act here: `consumeEnable` (pulls and pops refused), `consumeBroadcastEnable`
//! (broadcasting consumers refused), `retryMaxTimes` (dead-lettering of pop retries and of
//! send-backs that carry no budget of their own) and `retryQueueNums` (the retry topic's
//! queues).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use quiver_store::durable_file::SnapshotFile;
use quiver_wire::body::{self, SubscriptionGroupConfig, SubscriptionGroupWrapper};

/// Groups every RocketMQ broker has from the start (`SubscriptionGroupManager.init`), with
/// whether each may consume by broadcast.
const SYSTEM_GROUPS: [(&str, bool); 8] = [
    ("TOOLS_CONSUMER", false),
    ("FILTERSRV_CONSUMER", false),
    ("SELF_TEST_C_GROUP", false),
    ("CID_ONS-HTTP-PROXY", true),
    ("CID_ONSAPI_PULL", true),
    ("CID_ONSAPI_PERMISSION", true),
    ("CID_ONSAPI_OWNER", true),
    ("CID_RMQ_SYS_TRANS", true),
];

/// RocketMQ creates groups with this prefix even with autoCreateSubscriptionGroup off
/// (`MixAll.isSysConsumerGroupAndEnableCreate`).
const SYSTEM_GROUP_PREFIX: &str = "CID_RMQ_SYS_";

/// A group name RocketMQ accepts (`TopicValidator.validateGroup`): 1 to 255 characters of
/// letters, digits, `%`, `-`, `_` and `|`.
pub fn validate_group(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the specified group is blank".to_string());
    }
    if name.len() > 255 {
        return Err("the specified group is longer than group max length 255.".to_string());
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '%' | '-' | '_' | '|');
    if !name.chars().all(allowed) {
        return Err(format!(
            "the specified group[{name}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        ));
    }
    Ok(())
}

pub struct SubscriptionGroups {
    file: SnapshotFile,
    table: Mutex<SubscriptionGroupWrapper>,
    auto_create: AtomicBool,
    dirty: AtomicBool,
    /// The most groups a creation may bring the table to (`quiverSubscriptionGroupsMax`).
    groups_max: AtomicUsize,
}

/// Why UPDATE_AND_CREATE_SUBSCRIPTIONGROUP was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    InvalidName(String),
    /// A new group, and the table holds `held` groups, its most.
    Full {
        held: usize,
        max: usize,
    },
}

/// Why a group is not there for a request that names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// It does not exist and may not be created (autoCreateSubscriptionGroup off, or a name
    /// RocketMQ refuses).
    NotFound,
    /// It would be created, but the table holds `held` groups, its most.
    Full { held: usize, max: usize },
}

impl SubscriptionGroups {
    /// Opens the table. A broker that had no table yet (a new one, or one from before the
    /// table existed) starts from RocketMQ's system groups and `known`: the groups its offsets
    /// already name, so that turning autoCreateSubscriptionGroup off later does not lock
    /// out a group that was consuming.
    pub fn open(
        path: PathBuf,
        auto_create: bool,
        known: impl IntoIterator<Item = String>,
        now_ms: i64,
    ) -> Result<SubscriptionGroups, String> {
        let file = SnapshotFile::new(path);
        let existed = file.was_written();
        let mut table = file.load(body::from_json::<SubscriptionGroupWrapper>)?;
        let mut dirty = false;
        if !existed {
            table.data_version.timestamp = now_ms;
            for name in known {
                if validate_group(&name).is_ok() {
                    table
                        .subscription_group_table
                        .entry(name.clone())
                        .or_insert_with(|| SubscriptionGroupConfig::named(&name));
                }
            }
            dirty = true;
        }
        for (name, broadcast) in SYSTEM_GROUPS {
            if !table.subscription_group_table.contains_key(name) {
                let mut config = SubscriptionGroupConfig::named(name);
                config.consume_broadcast_enable = broadcast;
                table
                    .subscription_group_table
                    .insert(name.to_string(), config);
                dirty = true;
            }
        }
        Ok(SubscriptionGroups {
            file,
            table: Mutex::new(table),
            auto_create: AtomicBool::new(auto_create),
            dirty: AtomicBool::new(dirty),
            groups_max: AtomicUsize::new(usize::MAX),
        })
    }

    /// Sets the most groups a creation may bring the table to; the groups there stay.
    pub fn set_groups_max(&self, max: usize) {
        self.groups_max.store(max, Ordering::Relaxed);
    }

    /// Whether the table has room for one more group; the error says how full it is.
    fn room(&self, table: &SubscriptionGroupWrapper) -> Result<(), Missing> {
        let held = table.subscription_group_table.len();
        let max = self.groups_max.load(Ordering::Relaxed);
        if held >= max {
            return Err(Missing::Full { held, max });
        }
        Ok(())
    }

    /// autoCreateSubscriptionGroup as it is now (`mqadmin updateBrokerConfig` changes it).
    pub fn auto_create(&self) -> bool {
        self.auto_create.load(Ordering::Relaxed)
    }

    pub fn set_auto_create(&self, on: bool) {
        self.auto_create.store(on, Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SubscriptionGroupWrapper> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self, table: &mut SubscriptionGroupWrapper, now_ms: i64) {
        table.data_version.counter += 1;
        table.data_version.timestamp = now_ms;
        self.dirty.store(true, Ordering::Release);
    }

    /// The group's settings, creating the group with RocketMQ's defaults when
    /// autoCreateSubscriptionGroup is on (or the name is a system group's): None means the
    /// group does not exist and may not be created (RocketMQ's SUBSCRIPTION_GROUP_NOT_EXIST).
    pub fn find(&self, group: &str, now_ms: i64) -> Option<SubscriptionGroupConfig> {
        self.find_with(group, now_ms, SubscriptionGroupConfig::clone)
    }

    /// What `read` takes from the group's settings, found or created as `find` does, without
    /// copying them: pulls and pops ask on every request.
    pub fn find_with<R>(
        &self,
        group: &str,
        now_ms: i64,
        read: impl FnOnce(&SubscriptionGroupConfig) -> R,
    ) -> Option<R> {
        self.lookup(group, now_ms, read).ok()
    }

    /// `find_with`, saying why a group is missing.
    pub fn lookup<R>(
        &self,
        group: &str,
        now_ms: i64,
        read: impl FnOnce(&SubscriptionGroupConfig) -> R,
    ) -> Result<R, Missing> {
        let mut table = self.lock();
        if let Some(config) = table.subscription_group_table.get(group) {
            return Ok(read(config));
        }
        let may_create = self.auto_create() || group.starts_with(SYSTEM_GROUP_PREFIX);
        if !may_create || validate_group(group).is_err() {
            return Err(Missing::NotFound);
        }
        if let Err(full) = self.room(&table) {
            tracing::warn!(%group, ?full, "subscription group not created: the table is full");
            return Err(full);
        }
        let config = SubscriptionGroupConfig::named(group);
        let answer = read(&config);
        table
            .subscription_group_table
            .insert(group.to_string(), config);
        self.changed(&mut table, now_ms);
        tracing::info!(%group, "subscription group created on first use");
        Ok(answer)
    }

    /// The group's settings, without creating it.
    pub fn get(&self, group: &str) -> Option<SubscriptionGroupConfig> {
        self.lock().subscription_group_table.get(group).cloned()
    }

    /// Creates or replaces a group (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP): refused for a bad
    /// name or, for a new group, a full table.
    pub fn update(&self, config: SubscriptionGroupConfig, now_ms: i64) -> Result<(), Refused> {
        validate_group(&config.group_name).map_err(Refused::InvalidName)?;
        let mut table = self.lock();
        if !table
            .subscription_group_table
            .contains_key(&config.group_name)
        {
            if let Err(Missing::Full { held, max }) = self.room(&table) {
                return Err(Refused::Full { held, max });
            }
        }
        table
            .subscription_group_table
            .insert(config.group_name.clone(), config);
        self.changed(&mut table, now_ms);
        Ok(())
    }

    /// Deletes a group; true when it existed.
    pub fn delete(&self, group: &str, now_ms: i64) -> bool {
        let mut table = self.lock();
        let existed = table.subscription_group_table.remove(group).is_some();
        table.forbidden_table.remove(group);
        if existed {
            self.changed(&mut table, now_ms);
        }
        existed
    }

    /// The whole table, as GET_ALL_SUBSCRIPTIONGROUP_CONFIG answers it.
    pub fn snapshot(&self) -> SubscriptionGroupWrapper {
        self.lock().clone()
    }

    /// A slave takes its master's table: the master's groups replace its own, as RocketMQ's
    /// slave does, except the system groups, which every broker keeps. True when it changed.
    pub fn replace_from_master(&self, master: SubscriptionGroupWrapper, now_ms: i64) -> bool {
        let mut table = self.lock();
        let mut groups = master.subscription_group_table;
        for (name, _) in SYSTEM_GROUPS {
            if let Some(own) = table.subscription_group_table.get(name) {
                groups
                    .entry(name.to_string())
                    .or_insert_with(|| own.clone());
            }
        }
        if groups == table.subscription_group_table
            && master.forbidden_table == table.forbidden_table
        {
            return false;
        }
        table.subscription_group_table = groups;
        table.forbidden_table = master.forbidden_table;
        self.changed(&mut table, now_ms);
        true
    }

    pub fn names(&self) -> Vec<String> {
        self.lock()
            .subscription_group_table
            .keys()
            .cloned()
            .collect()
    }

    pub fn persist_if_dirty(&self) -> std::io::Result<()> {
        let result = self.file.write(|| {
            self.dirty
                .swap(false, Ordering::AcqRel)
                .then(|| body::to_json(&*self.lock()))
        });
        if result.is_err() {
            self.dirty.store(true, Ordering::Release);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &std::path::Path, auto_create: bool) -> SubscriptionGroups {
        SubscriptionGroups::open(
            dir.join("config/subscriptionGroup.json"),
            auto_create,
            ["fromOffsets".to_string(), "bad name".to_string()],
            1,
        )
        .expect("open")
    }

    #[test]
    fn a_new_table_holds_the_system_groups_and_the_groups_offsets_name() {
        let dir = tempfile::tempdir().unwrap();
        let groups = open(dir.path(), false);
        assert!(groups.get("TOOLS_CONSUMER").is_some());
        assert!(
            groups
                .get("CID_RMQ_SYS_TRANS")
                .unwrap()
                .consume_broadcast_enable
        );
        assert!(groups.get("fromOffsets").is_some());
        assert!(
            groups.get("bad name").is_none(),
            "an invalid name is not taken"
        );
    }

    #[test]
    fn groups_are_created_on_use_only_when_auto_create_is_on() {
        let dir = tempfile::tempdir().unwrap();
        let off = open(dir.path(), false);
        assert!(off.find("newGroup", 2).is_none());
        assert!(
            off.find("CID_RMQ_SYS_x", 2).is_some(),
            "system prefix is always created"
        );
        let dir = tempfile::tempdir().unwrap();
        let on = open(dir.path(), true);
        assert_eq!(on.find("newGroup", 2).unwrap().retry_max_times, 16);
        assert!(on.find("bad/name", 2).is_none());
    }

    #[test]
    fn updates_and_deletions_survive_a_reopen_and_bump_the_version() {
        let dir = tempfile::tempdir().unwrap();
        let groups = open(dir.path(), true);
        let before = groups.snapshot().data_version.counter;
        let mut config = SubscriptionGroupConfig::named("g1");
        config.consume_enable = false;
        config.retry_max_times = 3;
        groups.update(config, 5).unwrap();
        groups
            .update(SubscriptionGroupConfig::named("g2"), 6)
            .unwrap();
        assert!(groups.delete("g2", 7));
        assert!(!groups.delete("g2", 8));
        assert!(groups.snapshot().data_version.counter > before);
        assert!(groups
            .update(SubscriptionGroupConfig::named("a b"), 9)
            .is_err());
        groups.persist_if_dirty().unwrap();
        // The reopen ignores the `known` list: the table exists.
        let groups = SubscriptionGroups::open(
            dir.path().join("config/subscriptionGroup.json"),
            true,
            ["other".to_string()],
            10,
        )
        .unwrap();
        let g1 = groups.get("g1").expect("kept");
        assert!(!g1.consume_enable);
        assert_eq!(g1.retry_max_times, 3);
        assert!(groups.get("g2").is_none());
        assert!(groups.get("other").is_none());
    }

    #[test]
    fn a_slave_takes_its_masters_groups_and_keeps_the_system_ones() {
        let dir = tempfile::tempdir().unwrap();
        let groups = open(dir.path(), true);
        let mut master = SubscriptionGroupWrapper::default();
        master
            .subscription_group_table
            .insert("m".into(), SubscriptionGroupConfig::named("m"));
        assert!(groups.replace_from_master(master.clone(), 3));
        assert!(groups.get("m").is_some());
        assert!(groups.get("fromOffsets").is_none());
        assert!(groups.get("TOOLS_CONSUMER").is_some());
        assert!(
            !groups.replace_from_master(master, 4),
            "the same table is no change"
        );
    }
}
