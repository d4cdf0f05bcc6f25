//! The controller's TCP shell: RocketMQ's requests on the node's own address, one task per
//! connection, answered in order; a scan for brokers whose heartbeats stopped; elections for
//! sets whose master is gone; and the role changes sent to brokers after an election.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use quiver_wire::code::response_code;
use quiver_wire::{decode_frame, encode_frame, Command};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, Semaphore};

use crate::handle::{self, Call};
use crate::node::Controller;
use crate::raft;
use crate::replicas::ElectionBy;

/// A connection with no frame for this long is closed; brokers heartbeat every second.
const IDLE_TIMEOUT_MS: u64 = 120_000;

/// The bytes every connection holds of requests not yet whole, against
/// `quiverControllerBytesMax`: a connection reads on only while the others hold less than it,
/// so peers that announce large frames and send them slowly cannot make the controller hold
/// more than the bound and one frame (16 MiB), and one frame larger than the bound still
/// completes.
pub struct InputBudget {
    max: usize,
    held: AtomicUsize,
    freed: Notify,
    said_full: AtomicBool,
}

impl InputBudget {
    pub fn new(max: usize) -> InputBudget {
        InputBudget {
            max,
            held: AtomicUsize::new(0),
            freed: Notify::new(),
            said_full: AtomicBool::new(false),
        }
    }

    /// The bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Moves a connection's share from `before` to `after` bytes.
    fn update(&self, before: usize, after: usize) {
        if after >= before {
            self.held.fetch_add(after - before, Ordering::AcqRel);
        } else {
            let now = self.held.fetch_sub(before - after, Ordering::AcqRel) - (before - after);
            if now < self.max {
                self.said_full.store(false, Ordering::Release);
                self.freed.notify_waiters();
            }
        }
    }

    /// Returns once the other connections, which hold all but `own`, hold less than the bound;
    /// says so in the log once per fill.
    async fn room(&self, own: usize) {
        loop {
            let freed = self.freed.notified();
            if self.held().saturating_sub(own) < self.max {
                return;
            }
            if !self.said_full.swap(true, Ordering::AcqRel) {
                tracing::warn!(
                    max = self.max,
                    "the controller holds quiverControllerBytesMax of requests not yet whole: \
                     reading waits"
                );
            }
            freed.await;
        }
    }
}
/// How long sending a role change to a broker may take.
const NOTIFY_TIMEOUT_MS: u64 = 3_000;
/// Between elections retried for a set whose master is gone.
const ELECTION_RETRY_MS: u64 = 1_000;

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Serves `controller` on `listener` until `shutdown` turns true.
pub async fn run(
    listener: TcpListener,
    controller: Arc<Controller>,
    shutdown: watch::Receiver<bool>,
) {
    let budget = Arc::new(InputBudget::new(controller.config().bytes_max));
    run_with(listener, controller, budget, shutdown).await
}

/// `run`, with the budget of unread request bytes given (for a caller that watches it).
pub async fn run_with(
    listener: TcpListener,
    controller: Arc<Controller>,
    budget: Arc<InputBudget>,
    mut shutdown: watch::Receiver<bool>,
) {
    let connections_max = controller.config().connections_max;
    let permits = Arc::new(Semaphore::new(connections_max));
    let next_connection = Arc::new(AtomicU64::new(1));
    let scan_ms = controller.config().scan_interval_ms;
    let mut scan = tokio::time::interval(Duration::from_millis(scan_ms));
    scan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A node that becomes leader looks for sets without a master at once: the old leader may
    // have died with a master, and its followers elect nothing.
    let mut raft_metrics = controller.raft().metrics();
    let mut was_leader = controller.is_leader();
    let mut raft_running = true;
    loop {
        tokio::select! {
            _ = shutdown.changed() => {
                controller.shutdown().await;
                break;
            }
            changed = raft_metrics.changed(), if raft_running => {
                if changed.is_err() {
                    raft_running = false;
                    continue;
                }
                let leads = controller.is_leader();
                if leads && !was_leader {
                    tracing::info!(node = %controller.address(), "this controller node leads");
                    elect_where_masters_are_gone(&controller).await;
                }
                was_leader = leads;
            }
            _ = scan.tick() => {
                let gone = controller.liveness().expire(now_ms());
                for (name, id) in &gone {
                    tracing::warn!(broker_set = %name, broker_id = id, "broker inactive: no heartbeat within its timeout");
                }
                elect_where_masters_are_gone(&controller).await;
            }
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(error) => {
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, "connection refused: {connections_max} connections open");
                    continue;
                };
                let id = next_connection.fetch_add(1, Ordering::Relaxed);
                let controller = controller.clone();
                let budget = budget.clone();
                tokio::spawn(async move {
                    if let Err(error) = serve_connection(stream, &controller, id, &budget).await {
                        tracing::debug!(%peer, %error, "connection ended");
                    }
                    let gone = controller.liveness().connection_closed(id);
                    for (name, broker_id) in &gone {
                        tracing::warn!(broker_set = %name, broker_id, "broker inactive: its connection closed");
                    }
                    if !gone.is_empty() {
                        elect_where_masters_are_gone(&controller).await;
                    }
                    drop(permit);
                });
            }
        }
    }
}

/// Serves one connection, its unread request bytes charged to `budget` (and let go when it
/// ends, however it ends).
async fn serve_connection(
    stream: TcpStream,
    controller: &Arc<Controller>,
    connection: u64,
    budget: &InputBudget,
) -> std::io::Result<()> {
    let mut held = 0;
    let served = serve_requests(stream, controller, connection, budget, &mut held).await;
    budget.update(held, 0);
    served
}

async fn serve_requests(
    stream: TcpStream,
    controller: &Arc<Controller>,
    connection: u64,
    budget: &InputBudget,
    held: &mut usize,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let (mut reader, mut writer) = stream.into_split();
    let mut input = BytesMut::with_capacity(4 * 1024);
    let mut output = BytesMut::new();
    let idle = Duration::from_millis(IDLE_TIMEOUT_MS);
    loop {
        loop {
            let request = match decode_frame(&mut input) {
                Ok(Some(request)) => request,
                Ok(None) => break,
                Err(error) => {
                    tracing::warn!(%error, "closing connection: malformed frame");
                    return Ok(());
                }
            };
            if request.is_response() {
                continue;
            }
            let handled = if raft::is_raft_request(request.code) {
                raft::serve(controller.raft(), &request).await.into()
            } else {
                let call = Call {
                    controller,
                    connection,
                    now_ms: now_ms(),
                };
                handle::handle(&call, &request).await
            };
            send_role_changes(handled.notify);
            if !request.is_oneway() {
                encode_response(&request, &handled.response, &mut output);
                match tokio::time::timeout(idle, writer.write_all(&output)).await {
                    Ok(written) => written?,
                    Err(_) => return Ok(()),
                }
                output.clear();
            }
        }
        budget.update(*held, input.len());
        *held = input.len();
        if tokio::time::timeout(idle, budget.room(*held))
            .await
            .is_err()
        {
            return Ok(());
        }
        match tokio::time::timeout(idle, reader.read_buf(&mut input)).await {
            Ok(Ok(0)) | Err(_) => return Ok(()),
            Ok(Ok(_)) => {}
            Ok(Err(error)) => return Err(error),
        }
        budget.update(*held, input.len());
        *held = input.len();
    }
}

fn encode_response(request: &Command, response: &Command, output: &mut BytesMut) {
    if let Err(error) = encode_frame(response, output) {
        let fallback = request
            .response_to(response_code::SYSTEM_ERROR)
            .with_remark(error.to_string());
        encode_frame(&fallback, output).expect("a bodyless error response always fits in a frame");
    }
}

/// Elects a master for every set whose master is not alive while a replica is, as RocketMQ's
/// leader does when a broker goes inactive and on its periodic scan, up to
/// `electMasterMaxRetryCount` times a set.
async fn elect_where_masters_are_gone(controller: &Arc<Controller>) {
    if !controller.is_leader() {
        return;
    }
    let now = now_ms();
    let orphaned: Vec<String> = {
        let liveness = controller.liveness();
        controller.read(|state| {
            state
                .sets()
                .filter(|set| {
                    let master_alive = set
                        .master
                        .is_some_and(|master| liveness.is_alive(&set.name, master, now));
                    let master_known = set.master.is_some() || set.master_epoch > 0;
                    master_known && !master_alive && !liveness.alive_in(&set.name, now).is_empty()
                })
                .map(|set| set.name.clone())
                .collect()
        })
    };
    let retries = controller.config().elect_master_retries;
    for name in orphaned {
        for attempt in 1..=retries {
            let handle::Election {
                code,
                remark,
                info,
                notify,
                ..
            } = handle::elect(controller, &name, ElectionBy::Controller, now_ms()).await;
            send_role_changes(notify);
            match code {
                response_code::SUCCESS | response_code::CONTROLLER_MASTER_STILL_EXIST => break,
                _ => {
                    tracing::warn!(
                        broker_set = %name, attempt, code, remark = remark.as_deref().unwrap_or(""),
                        master_epoch = info.master_epoch, "no master elected"
                    );
                    // The same answer again is likely until a heartbeat changes something.
                    if code == response_code::CONTROLLER_MASTER_NOT_AVAILABLE
                        || code == response_code::CONTROLLER_NOT_LEADER
                    {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(ELECTION_RETRY_MS)).await;
                }
            }
        }
    }
}

/// Sends each role change to its broker on a connection of its own, oneway, without waiting:
/// a broker that misses it learns the change from its periodic GET_REPLICA_INFO.
fn send_role_changes(notify: Vec<(String, Command)>) {
    for (address, request) in notify {
        tokio::spawn(async move {
            let sent = tokio::time::timeout(
                Duration::from_millis(NOTIFY_TIMEOUT_MS),
                send_oneway(&address, &request),
            )
            .await;
            match sent {
                Ok(Ok(())) => tracing::debug!(broker = %address, "role change sent"),
                Ok(Err(error)) => tracing::warn!(broker = %address, %error, "role change not sent"),
                Err(_) => tracing::warn!(broker = %address, "role change not sent in time"),
            }
        });
    }
}

async fn send_oneway(address: &str, request: &Command) -> std::io::Result<()> {
    let address: SocketAddr = address
        .parse()
        .map_err(|_| std::io::Error::other(format!("{address} is not an ip:port")))?;
    let mut stream = TcpStream::connect(address).await?;
    let mut frame = BytesMut::new();
    encode_frame(request, &mut frame).map_err(std::io::Error::other)?;
    stream.write_all(&frame).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls `room` once: whether it is ready now.
    async fn ready_now(budget: &InputBudget, own: usize) -> bool {
        tokio::time::timeout(Duration::ZERO, budget.room(own))
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_connection_reads_only_while_the_others_hold_less_than_the_bound() {
        let budget = Arc::new(InputBudget::new(100));
        budget.update(0, 60);
        assert!(ready_now(&budget, 0).await);
        budget.update(0, 50);
        assert_eq!(budget.held(), 110);
        assert!(
            !ready_now(&budget, 0).await,
            "a third waits once the others hold 110"
        );
        assert!(
            ready_now(&budget, 60).await,
            "the first may finish its frame: the others hold 50"
        );
        let waiter = budget.clone();
        let waiting = tokio::spawn(async move { waiter.room(0).await });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        // The first's request completes and its bytes are let go: the waiter reads.
        budget.update(60, 0);
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("woken once there is room")
            .unwrap();
        assert_eq!(budget.held(), 50);
    }
}
