//! The broker's parts and their lifecycle. `Broker` only bundles the owners of each piece of
//! state (store, topics, offsets, clients, parked pulls); each part does its own locking.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quiver_store::{OpenError, RecoveryReport, RetentionReport, Store};
use quiver_wire::body::{self, RegisterBrokerBody};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{RegisterBrokerRequestHeader, UnregisterBrokerRequestHeader};
use quiver_wire::message::body_crc;
use quiver_wire::{Command, Encoding, ExtFields};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::clients::ClientTable;
use crate::config::{BrokerConfig, RetentionRound};
use crate::connection::Connection;
use crate::delay::DelayOffsets;
use crate::locks::QueueLocks;
use crate::long_poll::PullWaiters;
use crate::offsets::ConsumerOffsets;
use crate::outbound::Link;
use crate::topic::{TopicError, TopicTable};

/// Parked pulls at once; each holds a small task and a 15 s timer.
const PARKED_PULLS_MAX: usize = 100_000;
const OFFSET_PERSIST_INTERVAL_MS: u64 = 5_000;
const CLIENT_SCAN_INTERVAL_MS: u64 = 10_000;
/// RocketMQ's cleanResourceInterval.
const RETENTION_INTERVAL_MS: u64 = 10_000;
const NAMESRV_CALL_TIMEOUT_MS: u64 = 3_000;

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[derive(Default)]
pub struct Counters {
    pub messages_put: AtomicU64,
    pub messages_got: AtomicU64,
    rates: std::sync::Mutex<Rates>,
}

#[derive(Default)]
struct Rates {
    sampled_ms: i64,
    put: u64,
    got: u64,
    put_tps: f64,
    got_tps: f64,
}

impl Counters {
    /// Messages per second put and got over the last sampling period.
    pub fn tps(&self) -> (f64, f64) {
        let rates = self.rates.lock().expect("rates lock poisoned");
        (rates.put_tps, rates.got_tps)
    }

    fn sample(&self, now_ms: i64) {
        let put = self.messages_put.load(Ordering::Relaxed);
        let got = self.messages_got.load(Ordering::Relaxed);
        let mut rates = self.rates.lock().expect("rates lock poisoned");
        let elapsed_ms = now_ms - rates.sampled_ms;
        if rates.sampled_ms > 0 && elapsed_ms > 0 {
            rates.put_tps = (put - rates.put) as f64 * 1000.0 / elapsed_ms as f64;
            rates.got_tps = (got - rates.got) as f64 * 1000.0 / elapsed_ms as f64;
        }
        *rates = Rates {
            sampled_ms: now_ms,
            put,
            got,
            ..*rates
        };
    }
}

pub struct Broker {
    pub config: BrokerConfig,
    pub store: Store,
    pub topics: TopicTable,
    pub offsets: ConsumerOffsets,
    pub clients: ClientTable,
    pub waiters: Arc<PullWaiters>,
    pub locks: QueueLocks,
    pub delay_offsets: DelayOffsets,
    /// The address written into records and message ids: reachable `brokerIP1:port`.
    pub store_host: SocketAddr,
    pub counters: Counters,
    pub started_ms: i64,
    register_now: Notify,
    sync_flush: bool,
    next_queue: AtomicU32,
    next_uniq: AtomicU32,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Not a `source`: the message already holds the store's, and `{:#}` would print it twice.
    #[error("cannot open the store: {0}")]
    Store(OpenError),
    #[error(transparent)]
    Topics(#[from] TopicError),
    #[error("cannot read consumer offsets: {0}")]
    Offsets(String),
    #[error("cannot read delay offsets: {0}")]
    DelayOffsets(String),
    #[error("cannot listen on {addr}: {message}")]
    Bind { addr: SocketAddr, message: String },
}

impl From<OpenError> for StartError {
    fn from(error: OpenError) -> StartError {
        StartError::Store(error)
    }
}

impl Broker {
    /// Round-robin queue choice for sends that leave it to the broker.
    pub fn pick_queue(&self, queues: i32) -> i32 {
        (self.next_queue.fetch_add(1, Ordering::Relaxed) % queues.max(1) as u32) as i32
    }

    /// Writes the sends queued in the store as one group, on the caller's thread: a
    /// page-cache write is short, and no other thread needs waking. With sync flush the caller
    /// then runs one fdatasync for everything written so far too, unless another caller is
    /// running one (which then syncs this group as well, or leaves it to the store's sync
    /// thread). Handing the fsync to a task of its
    /// own cost a wake-up and a scheduling delay on every group: 64 x 1 KiB sync sends went
    /// from about 215,000 to 244,000 a second when readers did it themselves.
    pub fn write_queued_sends(&self) {
        if self.sync_flush {
            self.store.drain();
        } else {
            self.store.write_queued();
        }
    }

    /// `write_queued_sends` at the end of a connection's read. With sync flush the group is
    /// written at once but fsynced after one yield: every other connection whose input is
    /// ready in this scheduler turn writes its group meanwhile, and one fdatasync then covers
    /// them all instead of one each (and none waits for the store's sync thread).
    pub async fn write_read_sends(&self) {
        if self.sync_flush {
            self.store.write_queued();
            tokio::task::yield_now().await;
        }
        self.write_queued_sends();
    }

    /// A UNIQ_KEY for messages whose producer did not set one.
    pub fn new_uniq_id(&self) -> String {
        let counter = self.next_uniq.fetch_add(1, Ordering::Relaxed);
        quiver_wire::message::new_uniq_id(self.store_host.ip(), counter, now_ms())
    }

    /// Asks the registration task to register with the name servers now (a topic changed).
    pub fn topics_changed(&self) {
        self.register_now.notify_one();
    }

    pub fn connection_closed(&self, connection: &Connection) {
        for group in self.clients.connection_closed(connection.id) {
            self.notify_consumers_changed(&group);
        }
    }

    /// Tells every member of a group to rebalance now instead of at its next 20 s timer.
    pub fn notify_consumers_changed(&self, group: &str) {
        for connection in self.clients.consumer_connections(group) {
            let ext = ExtFields::new().with("consumerGroup", group);
            connection.send_oneway_request(
                request_code::NOTIFY_CONSUMER_IDS_CHANGED,
                ext,
                Encoding::Json,
            );
        }
    }

    fn registration(&self) -> Command {
        let body = body::to_json(&RegisterBrokerBody {
            topic_config_serialize_wrapper: self.topics.snapshot(),
            filter_server_list: Vec::new(),
        });
        let header = RegisterBrokerRequestHeader {
            broker_name: self.config.broker_name.clone(),
            broker_addr: self.store_host.to_string(),
            cluster_name: self.config.cluster_name.clone(),
            ha_server_addr: SocketAddr::new(
                self.store_host.ip(),
                self.store_host.port().wrapping_add(1),
            )
            .to_string(),
            broker_id: self.config.broker_id,
            heartbeat_timeout_millis: None,
            compressed: false,
            body_crc32: body_crc(&body),
        };
        Command::request(request_code::REGISTER_BROKER, Encoding::Json)
            .with_ext(header.to_ext())
            .with_body(body)
    }

    async fn register_everywhere(&self, links: &mut [Link], failing: &mut [bool]) {
        let request = self.registration();
        let timeout = Duration::from_millis(NAMESRV_CALL_TIMEOUT_MS);
        for (index, link) in links.iter_mut().enumerate() {
            let addr = link.addr.clone();
            let result = link.call(request.clone(), timeout).await;
            let failed = match result {
                Ok(response) if response.code == response_code::SUCCESS => false,
                Ok(response) => {
                    tracing::warn!(namesrv = %addr, code = response.code, remark = ?response.remark, "registration refused");
                    true
                }
                Err(error) => {
                    if !failing[index] {
                        tracing::warn!(namesrv = %addr, %error, "registration failed; retrying every period");
                    }
                    true
                }
            };
            if failing[index] && !failed {
                tracing::info!(namesrv = %addr, "registered with name server");
            }
            failing[index] = failed;
        }
    }

    /// One link per configured name server.
    fn namesrv_links(&self) -> Vec<Link> {
        self.config
            .namesrv_addrs
            .iter()
            .cloned()
            .map(Link::new)
            .collect()
    }

    async fn unregister_everywhere(&self, links: &mut [Link]) {
        let header = UnregisterBrokerRequestHeader {
            broker_name: self.config.broker_name.clone(),
            broker_addr: self.store_host.to_string(),
            cluster_name: self.config.cluster_name.clone(),
            broker_id: self.config.broker_id,
        };
        let request = Command::request(request_code::UNREGISTER_BROKER, Encoding::Json)
            .with_ext(header.to_ext());
        for link in links {
            if let Err(error) = link
                .call(request.clone(), Duration::from_millis(1_000))
                .await
            {
                tracing::debug!(namesrv = %link.addr, %error, "unregister failed");
            }
        }
    }
}

/// A started broker; `shutdown` stops it cleanly.
pub struct RunningBroker {
    pub broker: Arc<Broker>,
    pub local_addr: SocketAddr,
    pub recovery: RecoveryReport,
    stop: watch::Sender<bool>,
    /// The accept loop: it ends once every connection has stopped reading and been answered.
    server: std::sync::Mutex<Option<JoinHandle<()>>>,
    tasks: Vec<JoinHandle<()>>,
    stopped: AtomicBool,
    registered: watch::Receiver<bool>,
}

pub async fn start(config: BrokerConfig) -> Result<RunningBroker, StartError> {
    let store_config = config.store_config();
    tracing::info!(root = %config.store_root.display(), "opening the store");
    let (store, recovery) = tokio::task::spawn_blocking(move || Store::open(store_config))
        .await
        .expect("store open task panicked")?;
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
    let config_dir = config.store_root.join("config");
    let topics = TopicTable::open(
        config_dir.join("topics.json"),
        config.auto_create_topic,
        now_ms(),
    )?;
    let offsets = ConsumerOffsets::open(config_dir.join("consumerOffset.json"))
        .map_err(StartError::Offsets)?;
    let delay_offsets = DelayOffsets::open(config_dir.join("delayOffset.json"))
        .map_err(StartError::DelayOffsets)?;
    topics.create_if_absent(crate::topic::topic_config(
        crate::delay::SCHEDULE_TOPIC,
        config.delay_levels_ms.len() as i32,
        crate::topic::PERM_READ | crate::topic::PERM_WRITE,
    ))?;
    let bind = config.bind_addr();
    let listener = TcpListener::bind(bind)
        .await
        .map_err(|e| StartError::Bind {
            addr: bind,
            message: e.to_string(),
        })?;
    let local_addr = listener.local_addr().map_err(|e| StartError::Bind {
        addr: bind,
        message: e.to_string(),
    })?;
    let waiters = Arc::new(PullWaiters::new(PARKED_PULLS_MAX));
    let arrival_waiters = waiters.clone();
    store.set_arrival_listener(Arc::new(
        move |topic: &str, queue_id: u32, max_offset: u64| {
            arrival_waiters.arrived(topic, queue_id, max_offset)
        },
    ));
    let sync_flush = matches!(config.flush, quiver_store::FlushMode::Sync { .. });
    let broker = Arc::new(Broker {
        store_host: SocketAddr::new(config.broker_ip, local_addr.port()),
        config,
        store,
        topics,
        offsets,
        clients: ClientTable::default(),
        waiters,
        locks: QueueLocks::default(),
        delay_offsets,
        counters: Counters::default(),
        started_ms: now_ms(),
        register_now: Notify::new(),
        sync_flush,
        next_queue: AtomicU32::new(0),
        next_uniq: AtomicU32::new(0),
    });
    let (stop, stopped) = watch::channel(false);
    let (registered_sender, registered) = watch::channel(false);
    let server = tokio::spawn(crate::server::serve(
        listener,
        broker.clone(),
        stopped.clone(),
    ));
    let tasks = vec![
        tokio::spawn(housekeeping(broker.clone(), stopped.clone())),
        tokio::spawn(crate::delay::run(broker.clone(), stopped.clone())),
        tokio::spawn(registration(broker.clone(), stopped, registered_sender)),
    ];
    tracing::info!(addr = %local_addr, broker = %broker.config.broker_name, "broker listening");
    Ok(RunningBroker {
        broker,
        local_addr,
        recovery,
        stop,
        server: std::sync::Mutex::new(Some(server)),
        tasks,
        stopped: AtomicBool::new(false),
        registered,
    })
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
        self.broker.waiters.close();
        let server = self.server.lock().expect("server lock poisoned").take();
        if let Some(server) = server {
            let _ = server.await;
        }
        for task in &self.tasks {
            task.abort();
        }
        let mut links = self.broker.namesrv_links();
        self.broker.unregister_everywhere(&mut links).await;
        if let Err(error) = self.broker.offsets.persist_if_dirty() {
            tracing::error!(%error, "could not persist consumer offsets");
        }
        if let Err(error) = self.broker.delay_offsets.persist_if_dirty() {
            tracing::error!(%error, "could not persist delay offsets");
        }
        let store = self.broker.store.clone();
        match tokio::task::spawn_blocking(move || store.close()).await {
            Ok(Ok(())) => tracing::info!("store closed cleanly"),
            Ok(Err(error)) => tracing::error!(%error, "store did not close cleanly"),
            Err(error) => tracing::error!(%error, "store close task failed"),
        }
    }
}

async fn housekeeping(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let mut persist = tokio::time::interval(Duration::from_millis(OFFSET_PERSIST_INTERVAL_MS));
    let mut scan = tokio::time::interval(Duration::from_millis(CLIENT_SCAN_INTERVAL_MS));
    let mut retention = tokio::time::interval(Duration::from_millis(RETENTION_INTERVAL_MS));
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = retention.tick() => {
                let broker = broker.clone();
                // File deletion and statvfs block: keep them off the runtime's workers.
                let _ = tokio::task::spawn_blocking(move || retention_round(&broker, now_ms())).await;
            }
            _ = persist.tick() => {
                let offsets = broker.clone();
                let result = tokio::task::spawn_blocking(move || offsets.offsets.persist_if_dirty()).await;
                if let Ok(Err(error)) = result {
                    tracing::error!(%error, "could not persist consumer offsets");
                }
            }
            _ = scan.tick() => {
                broker.counters.sample(now_ms());
                for group in broker.clients.expire(now_ms()) {
                    broker.notify_consumers_changed(&group);
                }
                broker.locks.expire(now_ms());
            }
        }
    }
}

/// One retention round at `now_ms`: whether it runs depends on the local hour and the disk.
pub fn retention_round(broker: &Broker, now_ms: i64) -> Option<RetentionReport> {
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

async fn registration(
    broker: Arc<Broker>,
    mut stop: watch::Receiver<bool>,
    registered: watch::Sender<bool>,
) {
    if broker.config.namesrv_addrs.is_empty() {
        tracing::warn!(
            "no namesrvAddr configured: clients cannot find this broker through a name server"
        );
        return;
    }
    let mut links = broker.namesrv_links();
    let mut failing = vec![true; links.len()];
    let mut period = tokio::time::interval(Duration::from_millis(broker.config.register_period_ms));
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = period.tick() => {}
            _ = broker.register_now.notified() => {}
        }
        broker.register_everywhere(&mut links, &mut failing).await;
        if failing.iter().any(|failed| !failed) {
            registered.send_replace(true);
        }
    }
}
