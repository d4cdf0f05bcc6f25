//! The tasks of a broker's role, started and stopped as one. A master runs the background
//! owners (delayed delivery, pop revive, the transaction check, the timer wheel), serves its
//! slaves and expires the sends waiting for them; a slave delivers no delayed, revived,
//! checked or timer messages (its master does, and it copies the result and the master's
//! progress), so it follows its master and copies its metadata instead. Without controller
//! mode the role is fixed at start; in controller mode the controller client
//! (`controller_mode.rs`) stops one role's tasks and starts the other's when the controller
//! changes it.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::background::Owner;
use crate::ha;
use crate::state::Broker;

/// The background owners' scheduler: dropping the sender stops it.
type Background = (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>);

/// The tasks of the role the broker has now (none before the controller gives one).
pub type RoleSlot = Arc<tokio::sync::Mutex<Option<RoleTasks>>>;

/// The running tasks of one role.
pub struct RoleTasks {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    background: Option<Background>,
}

/// How a slave follows its master.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Following {
    /// RocketMQ's default HA protocol, from the log's end (a fixed-role slave).
    Default,
    /// RocketMQ 5's AutoSwitch protocol of controller mode, with epochs and truncation.
    AutoSwitch,
}

impl RoleTasks {
    /// A master's tasks. `ha_listener` is the default HA protocol's port; in controller mode
    /// the AutoSwitch port is served from start whatever the role (`start.rs`), so None.
    pub fn master(
        broker: &Arc<Broker>,
        ha_listener: Option<TcpListener>,
    ) -> std::io::Result<RoleTasks> {
        let (stop, _) = watch::channel(false);
        let mut owners: Vec<Box<dyn Owner>> = vec![
            Box::new(crate::background::delay::DelayDelivery::default()),
            Box::new(crate::background::pop_revive::PopRevive::default()),
            Box::new(crate::background::transaction_check::TransactionCheck::default()),
        ];
        if broker.lifecycle().config.timer_wheel_enable {
            owners.push(Box::new(
                crate::background::timer_wheel::TimerDelivery::new(),
            ));
        }
        let background = crate::background::spawn(broker.clone(), owners)?;
        let mut tasks = Vec::new();
        if let Some(listener) = ha_listener {
            tasks.push(tokio::spawn(ha::master::serve(
                listener,
                broker.clone(),
                stop.subscribe(),
            )));
        }
        if broker.lifecycle().replication.waits_for_slave() {
            tasks.push(tokio::spawn(expire_slave_waits(
                broker.clone(),
                stop.subscribe(),
            )));
        }
        Ok(RoleTasks {
            stop,
            tasks,
            background: Some(background),
        })
    }

    /// A slave's tasks: following the master's log and copying its metadata.
    pub fn slave(broker: &Arc<Broker>, following: Following) -> RoleTasks {
        let (stop, _) = watch::channel(false);
        let follow = match following {
            Following::Default => tokio::spawn(ha::slave::run(broker.clone(), stop.subscribe())),
            Following::AutoSwitch => {
                tokio::spawn(ha::autoswitch_slave::run(broker.clone(), stop.subscribe()))
            }
        };
        let copy = tokio::spawn(copy_master_metadata(broker.clone(), stop.subscribe()));
        RoleTasks {
            stop,
            tasks: vec![follow, copy],
            background: None,
        }
    }

    /// Stops the tasks and waits for them; the background owners finish their step and write
    /// their state one last time.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        if let Some((stop, thread)) = self.background {
            drop(stop);
            if tokio::task::spawn_blocking(move || thread.join())
                .await
                .is_err()
            {
                tracing::error!("the background thread did not stop cleanly");
            }
        }
    }
}

/// How often a SYNC_MASTER looks for sends whose wait for a slave passed `slaveTimeout`.
const SLAVE_WAIT_CHECK_MS: u64 = 20;

async fn expire_slave_waits(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(SLAVE_WAIT_CHECK_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            _ = tick.tick() => broker.lifecycle().replication.expire(std::time::Instant::now()),
        }
    }
}

/// How often a slave copies its master's topics, consumer and delay offsets. RocketMQ's do it
/// once a minute, so a topic created on the master is unknown to the slave for up to a minute;
/// a few small requests every two seconds cost little.
const METADATA_COPY_INTERVAL_MS: u64 = 2_000;
const METADATA_COPY_TIMEOUT_MS: u64 = 3_000;

async fn copy_master_metadata(owner: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let broker = owner.replicating();
    let mut tick = tokio::time::interval(Duration::from_millis(METADATA_COPY_INTERVAL_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    // The master's timer progress, until this slave's log has caught up with it.
    let mut timer = None;
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            _ = tick.tick() => {}
        }
        if let Err(error) = crate::replica_meta::take_timer_progress(broker, &mut timer).await {
            tracing::warn!(%error, "cannot record the master's timer progress; retrying");
        }
        let Some(master) = broker.replication.master().broker else {
            continue;
        };
        // A master whose log this slave refused is not its master: copy nothing from it.
        if broker.replication.master_refused() {
            continue;
        }
        let timeout = Duration::from_millis(METADATA_COPY_TIMEOUT_MS);
        match crate::replica_meta::copy_from_master(broker, &master, timeout).await {
            Ok(report) => {
                failing = false;
                if report.timer.is_some() {
                    timer = report.timer;
                }
            }
            Err(error) if !failing => {
                tracing::warn!(%master, %error, "cannot copy the master's topics and offsets; retrying");
                failing = true;
            }
            Err(_) => {}
        }
    }
}
