//! Start-up and shutdown: opens the broker's state, binds its port, and runs the accept loop
//! and the background tasks (housekeeping, delayed delivery, registration) until stopped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quiver_store::{RecoveryReport, RetentionReport};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock::now_ms;
use crate::config::{BrokerConfig, BrokerRole, RetentionRound};
use crate::registration;
use crate::role::{Following, RoleSlot, RoleTasks};
use crate::state::{Broker, Lifecycle, Persisted, StateError};

const OFFSET_PERSIST_INTERVAL_MS: u64 = 5_000;
/// How often changed topics are written to topics.json: a send that creates a topic does not
/// wait for the file (an admin's creation does), so a crash loses at most this much of the
/// table's changes; the topics of any stored message come back from the store at start.
const TOPICS_PERSIST_INTERVAL_MS: u64 = 100;
const CLIENT_SCAN_INTERVAL_MS: u64 = 10_000;
/// RocketMQ's cleanResourceInterval.
const RETENTION_INTERVAL_MS: u64 = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("cannot listen on {addr}: {message}")]
    Bind { addr: SocketAddr, message: String },
    #[error("cannot start the background thread: {0}")]
    Thread(String),
    #[error("{0}")]
    Config(String),
}

/// A started broker; `shutdown` stops it cleanly.
pub struct RunningBroker {
    pub broker: Arc<Broker>,
    pub local_addr: SocketAddr,
    /// Where gRPC clients connect (`grpcServerPort`); None when the default port was taken.
    pub grpc_addr: Option<SocketAddr>,
    pub recovery: RecoveryReport,
    stop: watch::Sender<bool>,
    /// The accept loop: it ends once every connection has stopped reading and been answered.
    server: std::sync::Mutex<Option<JoinHandle<()>>>,
    tasks: Vec<JoinHandle<()>>,
    /// The tasks of the broker's role, which the controller client changes in controller mode.
    role: RoleSlot,
    stopped: AtomicBool,
    registered: watch::Receiver<bool>,
}

pub async fn start(config: BrokerConfig) -> Result<RunningBroker, StartError> {
    if config.broker_id < 0 && !config.controller.enabled {
        return Err(StartError::Config(
            "brokerId=-1 is for controller mode (enableControllerMode=true) only".into(),
        ));
    }
    if config.controller.enabled && config.controller.addrs.is_empty() {
        return Err(StartError::Config(
            "enableControllerMode=true needs controllerAddr".into(),
        ));
    }
    let (persisted, recovery) = open_state(&config).await?;
    let Listeners {
        main: listener,
        local_addr,
        fast: fast_listener,
        ha: ha_listener,
        ha_host,
        grpc: grpc_listener,
    } = bind_listeners(&config).await?;
    let grpc_addr = grpc_listener
        .as_ref()
        .and_then(|listener| listener.local_addr().ok());
    let store_host = SocketAddr::new(config.broker_ip, local_addr.port());
    let broker = Arc::new(Broker::new(
        config,
        persisted,
        store_host,
        ha_host,
        now_ms(),
    ));
    let (stop, stopped) = watch::channel(false);
    let (registered_sender, registered) = watch::channel(false);
    let server = {
        let (broker, stopped) = (broker.clone(), stopped.clone());
        tokio::spawn(async move {
            let main = crate::server::serve(listener, broker.clone(), stopped.clone());
            if let Some(grpc) = grpc_listener {
                let (broker, stopped) = (broker.clone(), stopped.clone());
                tokio::spawn(async move {
                    if let Err(error) = crate::grpc::serve(grpc, broker, stopped).await {
                        tracing::error!(%error, "gRPC clients are not served");
                    }
                });
            }
            match fast_listener {
                Some(fast) => {
                    let fast = crate::server::serve(fast, broker, stopped);
                    tokio::join!(main, fast);
                }
                None => main.await,
            }
        })
    };
    let mut tasks = vec![
        tokio::spawn(housekeeping(broker.clone(), stopped.clone())),
        tokio::spawn(registration::run(
            broker.clone(),
            stopped,
            registered_sender,
        )),
    ];
    let role = if broker.lifecycle().config.controller.enabled {
        let Some(listener) = ha_listener else {
            unreachable!("bound in controller mode");
        };
        let role: RoleSlot = Arc::new(tokio::sync::Mutex::new(None));
        tasks.push(tokio::spawn(crate::ha::autoswitch_master::serve(
            listener,
            broker.clone(),
            stop.subscribe(),
        )));
        tasks.push(tokio::spawn(crate::controller_mode::run(
            broker.clone(),
            role.clone(),
            stop.subscribe(),
        )));
        role
    } else {
        start_role(&broker, ha_listener)?
    };
    let config = broker.lifecycle().config;
    tracing::info!(addr = %local_addr, ha = %ha_host, role = ?config.role, broker = %config.broker_name, "broker listening");
    Ok(RunningBroker {
        broker,
        local_addr,
        grpc_addr,
        recovery,
        stop,
        server: std::sync::Mutex::new(Some(server)),
        tasks,
        role,
        stopped: AtomicBool::new(false),
        registered,
    })
}

/// Opens (and after a crash recovers) the store and the tables, off the runtime's workers, and
/// logs what recovery found.
async fn open_state(config: &BrokerConfig) -> Result<(Persisted, RecoveryReport), StartError> {
    tracing::info!(root = %config.store_root.display(), "opening the store");
    let (persisted, recovery) = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || Persisted::open(&config, now_ms()))
            .await
            .expect("store open task panicked")?
    };
    if recovery.crashed {
        tracing::warn!(
            commitlog_end = recovery.commitlog_end,
            truncated_bytes = recovery.truncated_bytes,
            redispatched = recovery.records_redispatched,
            "recovered after an unclean stop"
        );
    }
    for problem in &recovery.problems {
        tracing::error!(%problem, "store damage found during recovery");
    }
    Ok((persisted, recovery))
}

/// The sockets a broker listens on.
struct Listeners {
    main: TcpListener,
    local_addr: SocketAddr,
    /// RocketMQ's VIP channel, `listenPort - 2`, when it could be bound.
    fast: Option<TcpListener>,
    /// A master's HA port; a slave binds none (it may be made a master later).
    ha: Option<TcpListener>,
    /// Where slaves reach the HA port, registered with the name servers.
    ha_host: SocketAddr,
    /// The gRPC port, when it could be bound.
    grpc: Option<TcpListener>,
}

async fn bind_listeners(config: &BrokerConfig) -> Result<Listeners, StartError> {
    let bind_error = |addr: SocketAddr| {
        move |e: std::io::Error| StartError::Bind {
            addr,
            message: e.to_string(),
        }
    };
    let bind = config.bind_addr();
    let main = TcpListener::bind(bind).await.map_err(bind_error(bind))?;
    let local_addr = main.local_addr().map_err(bind_error(bind))?;
    let fast = bind_fast_port(config, local_addr).await;
    let ha_bind = config.ha_bind_addr(local_addr.port());
    // In controller mode any broker may be made master: its HA port is bound from the start.
    let ha = match config.role {
        BrokerRole::Slave if !config.controller.enabled => None,
        _ => Some(
            TcpListener::bind(ha_bind)
                .await
                .map_err(bind_error(ha_bind))?,
        ),
    };
    let ha_port = match &ha {
        Some(listener) => listener.local_addr().map(|a| a.port()).unwrap_or(0),
        None => ha_bind.port(),
    };
    let grpc = bind_grpc_port(config).await?;
    Ok(Listeners {
        main,
        local_addr,
        fast,
        ha,
        ha_host: SocketAddr::new(config.broker_ip, ha_port),
        grpc,
    })
}

/// The gRPC port: one set by `grpcServerPort` must be bound; the default one (8081) already
/// taken (a second broker on the machine, say) is reported, and gRPC clients are not served.
async fn bind_grpc_port(config: &BrokerConfig) -> Result<Option<TcpListener>, StartError> {
    let addr = SocketAddr::new(config.bind_addr().ip(), config.grpc_bind_port());
    match TcpListener::bind(addr).await {
        Ok(listener) => Ok(Some(listener)),
        Err(error) if config.grpc_port.is_none() => {
            tracing::warn!(%addr, %error, "cannot listen on the default gRPC port; gRPC clients are not served (set grpcServerPort)");
            Ok(None)
        }
        Err(error) => Err(StartError::Bind {
            addr,
            message: error.to_string(),
        }),
    }
}

/// The tasks of a role fixed by `brokerRole`.
fn start_role(
    broker: &Arc<Broker>,
    ha_listener: Option<TcpListener>,
) -> Result<RoleSlot, StartError> {
    let tasks = if broker.lifecycle().replication.is_slave() {
        Some(RoleTasks::slave(broker, Following::Default))
    } else {
        let master = RoleTasks::master(broker, ha_listener);
        Some(master.map_err(|e| StartError::Thread(e.to_string()))?)
    };
    Ok(Arc::new(tokio::sync::Mutex::new(tasks)))
}

impl RunningBroker {
    /// Waits until a name server has accepted this broker's registration, so clients that look
    /// up routes next find it. False when `timeout` passes first.
    pub async fn wait_registered(&self, timeout: Duration) -> bool {
        let mut registered = self.registered.clone();
        tokio::time::timeout(timeout, registered.wait_for(|done| *done))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Stops accepting and reading requests, waits for the connections to write the answers
    /// to what they had read, unregisters from the name servers, persists offsets, flushes and
    /// closes the store (which removes the abort file: the next start is a clean one). An
    /// offset committed or a message acknowledged before the stop is in what is persisted.
    pub async fn shutdown(&self) {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        let _ = self.stop.send(true);
        // Parked pulls answer now rather than hold their connection open to the end.
        let broker = self.broker.lifecycle();
        broker.waiters.close();
        let server = self.server.lock().expect("server lock poisoned").take();
        if let Some(server) = server {
            let _ = server.await;
        }
        for task in &self.tasks {
            task.abort();
        }
        // The background owners finish their step and write their state one last time.
        let role = self.role.lock().await.take();
        if let Some(role) = role {
            role.stop().await;
        }
        let registering = self.broker.registering();
        let mut links = registration::namesrv_links(registering);
        registration::unregister_everywhere(registering, &mut links).await;
        if !broker.replication.is_slave() {
            broker
                .transactions
                .commit_progress(broker.store, broker.offsets);
        }
        let owner = self.broker.clone();
        // Off the runtime's workers, as every write of these files is.
        let persisted = tokio::task::spawn_blocking(move || persist_all(owner.lifecycle())).await;
        if let Err(error) = persisted {
            tracing::error!(%error, "the last writes of the broker's tables failed");
        }
        let store = broker.store.clone();
        match tokio::task::spawn_blocking(move || store.close()).await {
            Ok(Ok(())) => tracing::info!("store closed cleanly"),
            Ok(Err(error)) => tracing::error!(%error, "store did not close cleanly"),
            Err(error) => tracing::error!(%error, "store close task failed"),
        }
    }
}

/// Writes every table that changed since its last write, at a stop. Blocking.
fn persist_all(broker: Lifecycle<'_>) {
    if let Err(error) = broker.topics.persist_if_dirty() {
        tracing::error!(%error, "could not persist topics");
    }
    if let Err(error) = broker.offsets.persist_if_dirty() {
        tracing::error!(%error, "could not persist consumer offsets");
    }
    if let Err(error) = broker.delay_offsets.persist_if_dirty() {
        tracing::error!(%error, "could not persist delay offsets");
    }
    if let Err(error) = broker.groups.persist_if_dirty() {
        tracing::error!(%error, "could not persist subscription groups");
    }
    if let Err(error) = broker.pop.persist_if_dirty() {
        tracing::error!(%error, "could not persist the pop state");
    }
}

/// RocketMQ brokers also serve requests on `listenPort - 2`, the "VIP channel": clients use it
/// only when told to, but brokers call each other there (a RocketMQ slave fetches its
/// master's topics from it). Bound when that port exists; a port already taken is reported and
/// skipped, since nothing but such a slave needs it.
async fn bind_fast_port(config: &BrokerConfig, main: SocketAddr) -> Option<TcpListener> {
    // A broker on a free port (listenPort=0) has no fixed neighbour to claim.
    if config.listen_port == 0 {
        return None;
    }
    let port = main.port().checked_sub(2).filter(|port| *port > 0)?;
    let addr = SocketAddr::new(config.bind_addr().ip(), port);
    match TcpListener::bind(addr).await {
        Ok(listener) => Some(listener),
        Err(error) => {
            tracing::warn!(%addr, %error, "cannot listen on the VIP port (listenPort - 2); RocketMQ slaves cannot copy this broker's topics");
            None
        }
    }
}

async fn housekeeping(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let mut persist = tokio::time::interval(Duration::from_millis(OFFSET_PERSIST_INTERVAL_MS));
    let mut persist_topics =
        tokio::time::interval(Duration::from_millis(TOPICS_PERSIST_INTERVAL_MS));
    persist_topics.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut scan = tokio::time::interval(Duration::from_millis(CLIENT_SCAN_INTERVAL_MS));
    let mut retention = tokio::time::interval(Duration::from_millis(RETENTION_INTERVAL_MS));
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = retention.tick() => {
                let owner = broker.clone();
                // File deletion and statvfs block: keep them off the runtime's workers.
                let _ = tokio::task::spawn_blocking(move || retention_round(owner.lifecycle(), now_ms())).await;
            }
            _ = persist.tick() => {
                let owner = broker.clone();
                let result = tokio::task::spawn_blocking(move || {
                    let broker = owner.lifecycle();
                    (broker.offsets.persist_if_dirty(), broker.groups.persist_if_dirty())
                })
                .await;
                if let Ok((offsets, groups)) = result {
                    if let Err(error) = offsets {
                        tracing::error!(%error, "could not persist consumer offsets");
                    }
                    if let Err(error) = groups {
                        tracing::error!(%error, "could not persist subscription groups");
                    }
                }
            }
            _ = persist_topics.tick() => {
                if broker.lifecycle().topics.is_dirty() {
                    let owner = broker.clone();
                    let result = tokio::task::spawn_blocking(move || owner.lifecycle().topics.persist_if_dirty()).await;
                    if let Ok(Err(error)) = result {
                        tracing::error!(%error, "could not persist topics");
                    }
                }
            }
            _ = scan.tick() => broker.sweep(now_ms()),
        }
    }
}

/// One retention round at `now_ms`: whether it runs depends on the local hour and the disk.
pub fn retention_round(broker: Lifecycle<'_>, now_ms: i64) -> Option<RetentionReport> {
    let used_percent = match broker.store.disk_space() {
        Ok(space) => space.used_percent(),
        Err(error) => {
            tracing::warn!(%error, "cannot read disk space; retention runs by the clock only");
            0
        }
    };
    let round = broker
        .config
        .retention_round(local_hour(now_ms), used_percent)?;
    let at_once = round == RetentionRound::AtOnce;
    let reserve_ms = broker.config.file_reserved_ms();
    match broker.store.delete_expired(now_ms, reserve_ms, at_once) {
        Ok(report) => {
            for problem in &report.problems {
                tracing::warn!(%problem, "retention could not trim a file; it tries again next round");
            }
            if report.segments_deleted > 0 {
                tracing::info!(
                    segments = report.segments_deleted,
                    consume_queue_files = report.consume_queue_files_deleted,
                    index_files = report.index_files_deleted,
                    min_position = report.min_position,
                    disk_used_percent = used_percent,
                    at_once,
                    "retention deleted old files"
                );
            }
            Some(report)
        }
        Err(error) => {
            tracing::error!(%error, "retention failed");
            None
        }
    }
}

/// The hour of the local day, as RocketMQ reads `deleteWhen`.
fn local_hour(now_ms: i64) -> u32 {
    let seconds = (now_ms / 1000) as libc::time_t;
    let mut tm = std::mem::MaybeUninit::<libc::tm>::zeroed();
    // SAFETY: both pointers are valid for the call; localtime_r is the thread-safe variant and
    // writes only into `tm`, which is read only when it reports success.
    let result = unsafe { libc::localtime_r(&seconds, tm.as_mut_ptr()) };
    if result.is_null() {
        return ((now_ms / 3_600_000) % 24) as u32;
    }
    // SAFETY: localtime_r succeeded, so it filled `tm`.
    unsafe { tm.assume_init() }.tm_hour.clamp(0, 23) as u32
}
