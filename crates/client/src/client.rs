//! The client instance every producer and consumer of a process shares: name-server lookups,
//! one connection per address, and a route cache refreshed in the background.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use quiver_wire::body::{self, ClusterInfo, TopicRouteData};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::GetRouteInfoRequestHeader;
use quiver_wire::{Command, Encoding};
use tokio::sync::{broadcast, OnceCell};
use tokio::task::JoinHandle;

use crate::clock::{Clock, Random, SystemClock};
use crate::connection::{Connection, ConnectionLimits, ServerRequest};
use crate::error::ClientError;
use crate::route::{TopicRoute, AUTO_CREATE_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS};

/// Server requests kept for listeners that fall behind; NOTIFY messages are hints, so losing
/// old ones is harmless.
const SERVER_REQUESTS_BUFFERED: usize = 256;

#[derive(Clone)]
pub struct ClientConfig {
    pub namesrv_addrs: Vec<String>,
    /// The part after `@` in the client id; clients of one group must differ in it.
    pub instance_name: String,
    /// The address part of the client id.
    pub client_ip: String,
    pub request_timeout_ms: u64,
    pub route_refresh_ms: u64,
    /// Header encoding of every request (the benchmark tools use the binary one).
    pub encoding: Encoding,
    pub limits: ConnectionLimits,
    pub clock: Arc<dyn Clock>,
    pub random_seed: u64,
}

impl ClientConfig {
    /// Defaults for name servers given as `host:port;host:port`.
    pub fn new(namesrv: &str) -> ClientConfig {
        let seed = Random::seed_from_environment();
        ClientConfig {
            namesrv_addrs: namesrv
                .split(';')
                .map(str::trim)
                .filter(|addr| !addr.is_empty())
                .map(String::from)
                .collect(),
            instance_name: format!("{}#{}", std::process::id(), seed % 1_000_000_007),
            client_ip: "127.0.0.1".into(),
            request_timeout_ms: 3_000,
            route_refresh_ms: 30_000,
            encoding: Encoding::RocketMq,
            limits: ConnectionLimits::default(),
            clock: Arc::new(SystemClock),
            random_seed: seed,
        }
    }
}

type ConnectionSlot = Arc<OnceCell<Connection>>;

struct Inner {
    config: ClientConfig,
    client_id: String,
    random: Random,
    connections: Mutex<HashMap<String, ConnectionSlot>>,
    routes: Mutex<HashMap<String, Arc<TopicRoute>>>,
    server_requests: broadcast::Sender<ServerRequest>,
    next_namesrv: AtomicUsize,
    refresh_task: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = locked(&self.refresh_task).take() {
            task.abort();
        }
    }
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here is a single map operation, so a poisoned lock holds
    // consistent data.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A cheap handle; clones share connections and routes.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl Client {
    /// Must be called inside a tokio runtime: it starts the route refresh task.
    pub fn new(config: ClientConfig) -> Result<Client, ClientError> {
        if config.namesrv_addrs.is_empty() {
            return Err(ClientError::NoNamesrv);
        }
        let (server_requests, _) = broadcast::channel(SERVER_REQUESTS_BUFFERED);
        let random = Random::new(config.random_seed);
        let inner = Arc::new(Inner {
            client_id: format!("{}@{}", config.client_ip, config.instance_name),
            next_namesrv: AtomicUsize::new(random.below(config.namesrv_addrs.len())),
            random,
            config,
            connections: Mutex::new(HashMap::new()),
            routes: Mutex::new(HashMap::new()),
            server_requests,
            refresh_task: Mutex::new(None),
        });
        let task = tokio::spawn(refresh_routes(Arc::downgrade(&inner)));
        *locked(&inner.refresh_task) = Some(task);
        Ok(Client { inner })
    }

    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    pub fn now_ms(&self) -> i64 {
        self.inner.config.clock.now_ms()
    }

    pub fn random(&self) -> &Random {
        &self.inner.random
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.inner.config.request_timeout_ms)
    }

    /// Requests servers send us (NOTIFY_CONSUMER_IDS_CHANGED), from every connection.
    pub fn server_requests(&self) -> broadcast::Receiver<ServerRequest> {
        self.inner.server_requests.subscribe()
    }

    /// A request in this client's encoding.
    pub fn request(&self, code: i32) -> Command {
        Command::request(code, self.inner.config.encoding)
    }

    /// The shared connection to `addr`, opened on first use and reopened after it closed.
    pub async fn connection(&self, addr: &str) -> Result<Connection, ClientError> {
        // Every request passes here: an open connection is cloned under the map's lock, without
        // a handle on its slot or a trip through the slot's initialisation.
        if let Some(connection) = locked(&self.inner.connections)
            .get(addr)
            .and_then(|slot| slot.get())
            .filter(|connection| !connection.is_closed())
        {
            return Ok(connection.clone());
        }
        loop {
            let slot = {
                let mut connections = locked(&self.inner.connections);
                // Look up before `entry`, which would allocate the key on every request.
                match connections.get(addr) {
                    Some(slot) => slot.clone(),
                    None => connections.entry(addr.to_owned()).or_default().clone(),
                }
            };
            let connection = slot
                .get_or_try_init(|| {
                    Connection::connect(
                        addr,
                        &self.inner.config.limits,
                        self.inner.server_requests.clone(),
                    )
                })
                .await?;
            if !connection.is_closed() {
                return Ok(connection.clone());
            }
            let mut connections = locked(&self.inner.connections);
            if connections
                .get(addr)
                .is_some_and(|current| Arc::ptr_eq(current, &slot))
            {
                connections.remove(addr);
            }
        }
    }

    /// One request to `addr` with the default timeout.
    pub async fn call(&self, addr: &str, request: Command) -> Result<Command, ClientError> {
        self.call_with_timeout(addr, request, self.request_timeout())
            .await
    }

    pub async fn call_with_timeout(
        &self,
        addr: &str,
        request: Command,
        timeout: Duration,
    ) -> Result<Command, ClientError> {
        let connection = self.connection(addr).await?;
        connection.call(request, timeout).await
    }

    /// Like `call`, but any code outside `accepted` becomes `ClientError::Refused`.
    pub async fn call_expecting(
        &self,
        addr: &str,
        request: Command,
        accepted: &[i32],
    ) -> Result<Command, ClientError> {
        let code = request.code;
        let response = self.call(addr, request).await?;
        if accepted.contains(&response.code) {
            Ok(response)
        } else {
            Err(refused(addr, code, &response))
        }
    }

    pub async fn oneway(&self, addr: &str, request: Command) -> Result<(), ClientError> {
        let connection = self.connection(addr).await?;
        connection
            .send_oneway(request.oneway(), self.request_timeout())
            .await
    }

    /// Asks the name servers in turn until one answers; returns its response.
    pub async fn namesrv_call(&self, request: Command) -> Result<Command, ClientError> {
        let addrs = &self.inner.config.namesrv_addrs;
        let first = self.inner.next_namesrv.fetch_add(1, Ordering::Relaxed);
        let mut last_error = ClientError::NoNamesrv;
        for step in 0..addrs.len() {
            let addr = &addrs[(first + step) % addrs.len()];
            match self.call(addr, request.clone()).await {
                Ok(response) => return Ok(response),
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    /// GET_ROUTEINFO_BY_TOPIC; `Ok(None)` when the name servers do not know the topic.
    pub async fn fetch_route(&self, topic: &str) -> Result<Option<TopicRouteData>, ClientError> {
        let header = GetRouteInfoRequestHeader {
            topic: topic.to_owned(),
        };
        let request = self
            .request(request_code::GET_ROUTEINFO_BY_TOPIC)
            .with_ext(header.to_ext());
        let response = self
            .namesrv_call(request)
            .await
            .map_err(|error| match error {
                ClientError::Refused { .. } | ClientError::BadResponse { .. } => error,
                other => ClientError::NamesrvUnreachable {
                    topic: topic.to_owned(),
                    last_error: other.to_string(),
                },
            })?;
        match response.code {
            response_code::SUCCESS => body::from_json(&response.body)
                .map(Some)
                .map_err(|error| ClientError::bad_response("name server", error)),
            response_code::TOPIC_NOT_EXIST => Ok(None),
            _ => Err(refused(
                "name server",
                request_code::GET_ROUTEINFO_BY_TOPIC,
                &response,
            )),
        }
    }

    /// The route of an existing topic: cached, or fetched now.
    pub async fn route(&self, topic: &str) -> Result<Arc<TopicRoute>, ClientError> {
        if let Some(route) = locked(&self.inner.routes).get(topic) {
            if !route.from_auto_create {
                return Ok(route.clone());
            }
        }
        self.refresh_route(topic).await
    }

    /// Fetches the route of `topic` now and caches it.
    pub async fn refresh_route(&self, topic: &str) -> Result<Arc<TopicRoute>, ClientError> {
        let data = self
            .fetch_route(topic)
            .await?
            .ok_or_else(|| ClientError::TopicNotFound {
                topic: topic.to_owned(),
            })?;
        let route = Arc::new(TopicRoute::from_data(topic, &data));
        locked(&self.inner.routes).insert(topic.to_owned(), route.clone());
        Ok(route)
    }

    /// The route a producer sends on: the topic's own, or `TBW102`'s while the topic does not
    /// exist yet (the broker creates it on the first send, as with the Java producer).
    pub async fn publish_route(&self, topic: &str) -> Result<Arc<TopicRoute>, ClientError> {
        if let Some(route) = locked(&self.inner.routes).get(topic) {
            return Ok(route.clone());
        }
        match self.refresh_route(topic).await {
            Err(ClientError::TopicNotFound { .. }) => {}
            other => return other,
        }
        let data = self.fetch_route(AUTO_CREATE_TOPIC).await?.ok_or_else(|| {
            ClientError::TopicNotFound {
                topic: topic.to_owned(),
            }
        })?;
        let route = TopicRoute::from_auto_create(topic, &data, DEFAULT_TOPIC_QUEUE_NUMS);
        if route.write_queues.is_empty() {
            return Err(ClientError::TopicNotFound {
                topic: topic.to_owned(),
            });
        }
        let route = Arc::new(route);
        locked(&self.inner.routes).insert(topic.to_owned(), route.clone());
        Ok(route)
    }

    /// GET_BROKER_CLUSTER_INFO from a name server.
    pub async fn cluster_info(&self) -> Result<ClusterInfo, ClientError> {
        let request = self.request(request_code::GET_BROKER_CLUSTER_INFO);
        let response = self.namesrv_call(request).await?;
        if response.code != response_code::SUCCESS {
            return Err(refused(
                "name server",
                request_code::GET_BROKER_CLUSTER_INFO,
                &response,
            ));
        }
        body::from_json(&response.body)
            .map_err(|error| ClientError::bad_response("name server", error))
    }

    /// Every cached topic, for the background refresh and heartbeats.
    pub fn cached_topics(&self) -> Vec<String> {
        locked(&self.inner.routes).keys().cloned().collect()
    }
}

pub(crate) fn refused(addr: &str, request_code: i32, response: &Command) -> ClientError {
    ClientError::Refused {
        addr: addr.to_owned(),
        request_code,
        code: response.code,
        remark: response.remark.clone().unwrap_or_default(),
    }
}

/// Re-reads every cached route every `route_refresh_ms`; a failed lookup keeps the old route.
/// Holds only a weak reference, so dropping the last `Client` ends it.
async fn refresh_routes(inner: Weak<Inner>) {
    let period = match inner.upgrade() {
        Some(inner) => Duration::from_millis(inner.config.route_refresh_ms.max(100)),
        None => return,
    };
    loop {
        tokio::time::sleep(period).await;
        let Some(inner) = inner.upgrade() else { return };
        let client = Client { inner };
        for topic in client.cached_topics() {
            let result = match client.fetch_route(&topic).await {
                Ok(Some(data)) => {
                    let route = Arc::new(TopicRoute::from_data(&topic, &data));
                    locked(&client.inner.routes).insert(topic.clone(), route);
                    Ok(())
                }
                // Still being created from TBW102, or deleted: keep what we have.
                Ok(None) => Ok(()),
                Err(error) => Err(error),
            };
            if let Err(error) = result {
                tracing::debug!(%topic, %error, "route refresh failed; keeping the old route");
            }
        }
    }
}
