//! The `quiver` binary: `up` (name server and broker in one process), `namesrv` (with a
//! controller when its configuration asks for one), `controller`, `broker`, and
//! `bench produce` / `bench consume` (load generators that report RocketMQ's benchmark figures).

mod log;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use quiver_broker::{BrokerConfig, BrokerRole, RunningBroker, UnknownKey};
use quiver_namesrv::NamesrvConfig;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The broker allocates small buffers on many threads at once (frames, headers, records);
/// glibc's allocator spent a quarter of the broker's CPU on that under a 64-connection load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "quiver",
    version,
    about = "A message queue that speaks Apache RocketMQ's protocol"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a name server and a broker in one process on 127.0.0.1, with data in ./quiver-data.
    Up {
        /// A RocketMQ broker.conf to apply on top of the embedded defaults.
        #[arg(short = 'c', long = "config")]
        config: Option<PathBuf>,
        /// Data folder (store, config, offsets), unless the config file sets storePathRootDir.
        #[arg(long, default_value = "quiver-data")]
        data: PathBuf,
        /// Name server port (0 picks a free one).
        #[arg(long, default_value_t = 9876)]
        namesrv_port: u16,
        /// Broker port (0 picks a free one), unless the config file sets listenPort.
        #[arg(long, default_value_t = 10911)]
        broker_port: u16,
        /// Masters to run (broker-a, broker-b, ...), each on the broker port plus 100 per
        /// master, its data in DATA/<name>/master.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
        masters: u16,
        /// Slaves per master, each on its master's port plus 10 per slave, following it over
        /// the HA port (listen port + 1), its data in DATA/<name>/slave-<id>.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=4))]
        slaves: u16,
        /// Fail over on its own: three controller nodes (on the name server port plus 2, minus
        /// 8 and minus 18: 9878, 9868, 9858; data in DATA/controller/n<i>) elect each broker
        /// set's master, and every broker runs in controller mode, its role decided by them.
        #[arg(long)]
        controller: bool,
    },
    /// Run a name server; with `enableControllerInNamesrv=true` in its configuration, a
    /// controller too, on its own address from `controllerDLegerPeers`.
    Namesrv {
        /// A RocketMQ namesrv.conf: `listenPort` (the port of --listen), and the controller's
        /// keys (`enableControllerInNamesrv`, `controllerDLegerPeers`, `controllerStorePath`, ...).
        #[arg(short = 'c', long = "config")]
        config: Option<PathBuf>,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9876")]
        listen: SocketAddr,
        /// Drop brokers that have not registered for this long.
        #[arg(long, default_value_t = quiver_namesrv::route_table::BROKER_EXPIRY_MS_DEFAULT)]
        broker_expiry_ms: i64,
    },
    /// Run a controller on its own (RocketMQ's `mqcontroller`), from a controller.conf.
    Controller {
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
    },
    /// Run a broker from a RocketMQ broker.conf.
    Broker {
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
        /// Name server addresses (`host:port;host:port`), overriding namesrvAddr.
        #[arg(short = 'n', long = "namesrv")]
        namesrv: Option<String>,
    },
    /// Measure a Quiver or RocketMQ cluster: send or consume and report TPS and latency; sweep
    /// a plan of scenarios, find the peak, compare runs, soak with every message accounted for.
    Bench {
        // Boxed: the bench's options would make every other command as large.
        #[command(subcommand)]
        command: Box<quiver_bench::BenchCommand>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The bench prints its own report on standard output; only warnings go to the log.
    // The controller's Raft library logs every vote and term at info: warnings are enough.
    let default_log = match cli.command {
        Command::Bench { .. } => "warn",
        _ => "info,openraft=warn",
    };
    let summaries = log::init(default_log);
    let code = run(cli);
    // A stop inside a summary window would otherwise lose its count of dropped lines.
    summaries.write_all();
    code
}

fn run(cli: Cli) -> ExitCode {
    if let Command::Bench { command } = cli.command {
        // The bench builds its own small runtime (1-2 workers): its senders are tasks.
        return match quiver_bench::run(*command) {
            Ok(()) => ExitCode::SUCCESS,
            // The run worked and found a loss: told apart from a run that could not work.
            Err(error @ quiver_bench::BenchError::MessagesMissing { .. }) => {
                eprintln!("quiver bench: {error}");
                ExitCode::from(1)
            }
            Err(error) => {
                eprintln!("quiver bench: {error}");
                ExitCode::from(2)
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("quiver: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        // Watched from the start: a stop asked for while the store recovers waits for the
        // recovery and then stops cleanly, instead of killing the process halfway.
        let stop_signal = StopSignal::watch();
        match cli.command {
            Command::Up {
                config,
                data,
                namesrv_port,
                broker_port,
                masters,
                slaves,
                controller,
            } => {
                let layout = Layout {
                    masters,
                    slaves,
                    broker_port,
                    controller,
                };
                up(config.as_deref(), &data, namesrv_port, layout, stop_signal).await
            }
            Command::Namesrv {
                config,
                listen,
                broker_expiry_ms,
            } => namesrv(config.as_deref(), listen, broker_expiry_ms, stop_signal).await,
            Command::Controller { config } => controller(&config, stop_signal).await,
            Command::Broker { config, namesrv } => broker(&config, namesrv, stop_signal).await,
            Command::Bench { .. } => unreachable!("bench ran before the runtime was built"),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("quiver: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// Reads a broker.conf on top of `config`; warns once about keys Quiver does not use.
fn apply_config_file(config: &mut BrokerConfig, path: &Path) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let unknown = config
        .apply_properties(&text)
        .with_context(|| format!("{}", path.display()))?;
    warn_unknown(path, &unknown);
    Ok(())
}

fn warn_unknown(path: &Path, unknown: &[UnknownKey]) {
    if unknown.is_empty() {
        return;
    }
    let listed: Vec<String> = unknown
        .iter()
        .map(|k| format!("{} (line {})", k.key, k.line))
        .collect();
    tracing::warn!(
        "{}: ignoring {} key(s) Quiver does not use: {}",
        path.display(),
        unknown.len(),
        listed.join(", ")
    );
}

fn file_sets(path: Option<&Path>, key: &str) -> bool {
    let Some(path) = path else { return false };
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .any(|l| {
            l.split_once(['=', ':'])
                .is_some_and(|(k, _)| k.trim() == key)
        })
}

/// What `quiver up` runs: one name server and `masters` masters with `slaves` slaves each.
struct Layout {
    masters: u16,
    slaves: u16,
    broker_port: u16,
    controller: bool,
}

/// One broker of the layout: its name, id, role, port and data folder.
struct Member {
    name: String,
    broker_id: i64,
    listen_port: u16,
    data: PathBuf,
}

impl Layout {
    fn single(&self) -> bool {
        self.masters == 1 && self.slaves == 0 && !self.controller
    }

    /// Masters first; slave `j` of a master on the master's port plus 10 j.
    fn members(&self, data: &Path) -> Vec<(Member, Vec<Member>)> {
        let port = |offset: u16| match self.broker_port {
            0 => 0,
            base => base.saturating_add(offset),
        };
        (0..self.masters)
            .map(|i| {
                let name = format!("broker-{}", char::from(b'a' + i as u8));
                let master_port = port(100 * i);
                let folder = data.join(&name);
                let master = Member {
                    name: name.clone(),
                    broker_id: 0,
                    listen_port: master_port,
                    data: folder.join("master"),
                };
                let slaves = (1..=self.slaves)
                    .map(|j| Member {
                        name: name.clone(),
                        broker_id: i64::from(j),
                        listen_port: match master_port {
                            0 => 0,
                            p => p.saturating_add(10 * j),
                        },
                        data: folder.join(format!("slave-{j}")),
                    })
                    .collect();
                (master, slaves)
            })
            .collect()
    }
}

async fn up(
    config_path: Option<&Path>,
    data: &Path,
    namesrv_port: u16,
    layout: Layout,
    mut stop_signal: StopSignal,
) -> anyhow::Result<()> {
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let namesrv_listener = TcpListener::bind(SocketAddr::new(loopback, namesrv_port))
        .await
        .with_context(|| {
            format!("cannot listen on 127.0.0.1:{namesrv_port} for the name server")
        })?;
    let namesrv_addr = namesrv_listener.local_addr()?;
    let (stop, stopped) = watch::channel(false);
    let namesrv_task = tokio::spawn(quiver_namesrv::run(
        namesrv_listener,
        NamesrvConfig::default(),
        stopped,
    ));

    let defaults = BrokerDefaults {
        config_path,
        namesrv_addr,
    };
    let mut running = Vec::new();
    let mut controllers = Vec::new();
    if layout.controller {
        let (nodes, addrs) = start_controller_group(data, namesrv_port).await?;
        controllers = nodes;
        for (master, slaves) in layout.members(data) {
            for member in std::iter::once(master).chain(slaves) {
                running.push(start_controlled(&defaults, &member, &addrs).await?);
            }
        }
    } else if layout.single() {
        let mut config = defaults.config(data, layout.broker_port)?;
        if !file_sets(config_path, "listenPort") {
            config.listen_port = layout.broker_port;
        }
        running.push(quiver_broker::start(config).await?);
    } else {
        for (master, slaves) in layout.members(data) {
            let started = start_master(&defaults, &master).await?;
            let ha = started.broker.ha_host();
            running.push(started);
            for slave in slaves {
                running.push(start_slave(&defaults, &slave, ha).await?);
            }
        }
    }
    if !stop_signal.received().await {
        let controller = controllers.first().map(|(_, _, addr)| *addr);
        serve_until_stopped(
            &running[0],
            namesrv_addr,
            controller,
            data,
            &mut stop_signal,
        )
        .await;
    }
    tracing::info!("stopping");
    // Slaves first, so that none reports a master gone while the masters stop.
    for broker in running.iter().rev() {
        broker.shutdown().await;
    }
    for (stop, task, _) in controllers {
        let _ = stop.send(true);
        let _ = task.await;
    }
    let _ = stop.send(true);
    let _ = namesrv_task.await;
    Ok(())
}

/// A controller node's stop switch, its task and its address.
type ControllerNode = (watch::Sender<bool>, tokio::task::JoinHandle<()>, SocketAddr);

/// The three controller nodes of `quiver up --controller`, on loopback ports below the name
/// server's (any free ones when it takes any), their state in DATA/controller/n<i>.
async fn start_controller_group(
    data: &Path,
    namesrv_port: u16,
) -> anyhow::Result<(Vec<ControllerNode>, Vec<String>)> {
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut listeners = Vec::new();
    for offset in [2i32, -8, -18] {
        let port = match namesrv_port {
            0 => 0,
            base => u16::try_from(i32::from(base) + offset)
                .context("the name server port leaves no room for the controller's ports")?,
        };
        let listener = TcpListener::bind(SocketAddr::new(loopback, port))
            .await
            .with_context(|| format!("cannot listen on 127.0.0.1:{port} for a controller node"))?;
        listeners.push(listener);
    }
    let mut peers = Vec::new();
    for (i, listener) in listeners.iter().enumerate() {
        peers.push((format!("n{i}"), listener.local_addr()?));
    }
    let mut nodes = Vec::new();
    for (i, listener) in listeners.into_iter().enumerate() {
        let config = quiver_controller::ControllerConfig {
            group: "quiver-up".into(),
            peers: peers.clone(),
            self_id: format!("n{i}"),
            store_path: data.join("controller").join(format!("n{i}")),
            ..quiver_controller::ControllerConfig::default()
        };
        nodes.push(serve_controller(config, listener).await?);
    }
    let addrs: Vec<String> = peers.iter().map(|(_, addr)| addr.to_string()).collect();
    println!("controller: {}", addrs.join(" "));
    Ok((nodes, addrs))
}

/// A broker of `quiver up --controller`: its store, name and port from the layout, its id and
/// role from the controller.
async fn start_controlled(
    defaults: &BrokerDefaults<'_>,
    member: &Member,
    controllers: &[String],
) -> anyhow::Result<RunningBroker> {
    let mut config = defaults.member_config(member)?;
    config.controller.enabled = true;
    config.controller.addrs = controllers.to_vec();
    config.broker_id = -1;
    config.role = BrokerRole::Slave;
    if member.listen_port == 0 {
        config.ha_listen_port = Some(0);
    }
    let started = quiver_broker::start(config).await?;
    println!(
        "{} replica: broker {} ha {} data {}",
        member.name,
        started.local_addr,
        started.broker.ha_host(),
        member.data.display()
    );
    Ok(started)
}

/// What every broker of `quiver up` starts from: the embedded defaults, the config file on top,
/// and the embedded name server.
struct BrokerDefaults<'a> {
    config_path: Option<&'a Path>,
    namesrv_addr: SocketAddr,
}

impl BrokerDefaults<'_> {
    fn config(&self, store_root: &Path, listen_port: u16) -> anyhow::Result<BrokerConfig> {
        let mut config = BrokerConfig {
            store_root: store_root.to_path_buf(),
            listen_port,
            ..BrokerConfig::default()
        };
        if let Some(path) = self.config_path {
            apply_config_file(&mut config, path)?;
        }
        // The embedded name server is always one of the broker's; a file may name more.
        let namesrv_addr = self.namesrv_addr.to_string();
        config.namesrv_addrs.retain(|addr| addr != &namesrv_addr);
        config.namesrv_addrs.insert(0, namesrv_addr);
        Ok(config)
    }

    /// The config of one member of a cluster: its own store, whatever the file says, and its
    /// name, id and port.
    fn member_config(&self, member: &Member) -> anyhow::Result<BrokerConfig> {
        let mut config = self.config(&member.data, member.listen_port)?;
        config.store_root = member.data.clone();
        config.store_commitlog = None;
        config.store_consume_queue = None;
        config.store_index = None;
        config.store_checkpoint = None;
        config.store_abort = None;
        config.broker_name = member.name.clone();
        config.broker_id = member.broker_id;
        config.listen_port = member.listen_port;
        Ok(config)
    }
}

async fn start_master(
    defaults: &BrokerDefaults<'_>,
    master: &Member,
) -> anyhow::Result<RunningBroker> {
    let mut config = defaults.member_config(master)?;
    if config.role == BrokerRole::Slave {
        config.role = BrokerRole::AsyncMaster;
    }
    if master.listen_port == 0 {
        config.ha_listen_port = Some(0);
    }
    let started = quiver_broker::start(config).await?;
    println!(
        "{} master: broker {} ha {} data {}",
        master.name,
        started.local_addr,
        started.broker.ha_host(),
        master.data.display()
    );
    Ok(started)
}

async fn start_slave(
    defaults: &BrokerDefaults<'_>,
    slave: &Member,
    master_ha: SocketAddr,
) -> anyhow::Result<RunningBroker> {
    let mut config = defaults.member_config(slave)?;
    config.role = BrokerRole::Slave;
    config.ha_master_addr = Some(master_ha.to_string());
    let started = quiver_broker::start(config).await?;
    println!(
        "{} slave {}: broker {} data {}",
        slave.name,
        slave.broker_id,
        started.local_addr,
        slave.data.display()
    );
    Ok(started)
}

/// Prints the ready line once the first broker has registered, then waits for a stop signal.
async fn serve_until_stopped(
    first: &RunningBroker,
    namesrv_addr: SocketAddr,
    controller: Option<SocketAddr>,
    data: &Path,
    stop_signal: &mut StopSignal,
) {
    // Ready means routable: clients look up routes right after the ready line.
    let registered = tokio::select! {
        registered = first.wait_registered(std::time::Duration::from_secs(10)) => Some(registered),
        _ = stop_signal.wait() => None,
    };
    if let Some(registered) = registered {
        if !registered {
            tracing::warn!("the broker has not registered with the embedded name server yet");
        }
        tracing::info!(namesrv = %namesrv_addr, broker = %first.local_addr, data = %data.display(), "quiver is up");
        let mut ready = format!("ready namesrv={namesrv_addr} broker={}", first.local_addr);
        if let Some(grpc) = first.grpc_addr {
            ready.push_str(&format!(" grpc={grpc}"));
        }
        if let Some(controller) = controller {
            ready.push_str(&format!(" controller={controller}"));
        }
        println!("{ready}");
        stop_signal.wait().await;
    }
}

async fn namesrv(
    config_path: Option<&Path>,
    mut listen: SocketAddr,
    broker_expiry_ms: i64,
    mut stop_signal: StopSignal,
) -> anyhow::Result<()> {
    let text = match config_path {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?,
        None => String::new(),
    };
    let mut with_controller = false;
    for entry in quiver_wire::properties::entries(&text) {
        let (line, key, value) = entry
            .map_err(|(line, text)| anyhow::anyhow!("line {line}: {text}: not a key=value line"))?;
        match key {
            "listenPort" => listen.set_port(
                value
                    .parse()
                    .with_context(|| format!("line {line}: listenPort={value}: not a port"))?,
            ),
            "enableControllerInNamesrv" => with_controller = value == "true",
            _ => {}
        }
    }
    let controller = if with_controller {
        Some(start_controller(&text, "namesrv.conf").await?)
    } else {
        None
    };
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let local = listener.local_addr()?;
    let (stop, stopped) = watch::channel(false);
    let config = NamesrvConfig {
        broker_expiry_ms,
        ..NamesrvConfig::default()
    };
    let task = tokio::spawn(quiver_namesrv::run(listener, config, stopped));
    tracing::info!(addr = %local, "name server listening");
    match &controller {
        Some((_, _, address)) => println!("ready namesrv={local} controller={address}"),
        None => println!("ready namesrv={local}"),
    }
    stop_signal.wait().await;
    let _ = stop.send(true);
    let _ = task.await;
    if let Some((stop, task, _)) = controller {
        let _ = stop.send(true);
        let _ = task.await;
    }
    Ok(())
}

async fn controller(config_path: &Path, mut stop_signal: StopSignal) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(config_path)
        .with_context(|| format!("cannot read {}", config_path.display()))?;
    let (stop, task, address) = start_controller(&text, "controller.conf").await?;
    println!("ready controller={address}");
    stop_signal.wait().await;
    let _ = stop.send(true);
    let _ = task.await;
    Ok(())
}

/// A controller node from the controller keys of `text` (the rest are the name server's, or
/// RocketMQ's that Quiver does without, and are logged), listening on its own peer address.
async fn start_controller(text: &str, file: &str) -> anyhow::Result<ControllerNode> {
    let mut config = quiver_controller::ControllerConfig::default();
    let others = config
        .apply_properties(text)
        .with_context(|| format!("{file}: a controller key is wrong"))?;
    const NAMESRV_KEYS: [&str; 3] = ["listenPort", "enableControllerInNamesrv", "rocketmqHome"];
    for key in others
        .iter()
        .filter(|key| !NAMESRV_KEYS.contains(&key.as_str()))
    {
        tracing::warn!(key, "{file}: key not used");
    }
    let wanted = config
        .listen_addr()
        .map_err(|why| anyhow::anyhow!("{file}: {why}"))?;
    let listener = TcpListener::bind(wanted)
        .await
        .with_context(|| format!("cannot listen on {wanted} for the controller"))?;
    serve_controller(config, listener).await
}

/// Opens a controller node and serves it on `listener`.
async fn serve_controller(
    config: quiver_controller::ControllerConfig,
    listener: TcpListener,
) -> anyhow::Result<ControllerNode> {
    let address = listener.local_addr()?;
    let controller = quiver_controller::Controller::open(config, address)
        .await
        .map_err(|why| anyhow::anyhow!("controller: {why}"))?;
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(quiver_controller::run(
        listener,
        std::sync::Arc::new(controller),
        stopped,
    ));
    tracing::info!(addr = %address, "controller listening");
    Ok((stop, task, address))
}

async fn broker(
    config_path: &Path,
    namesrv: Option<String>,
    mut stop_signal: StopSignal,
) -> anyhow::Result<()> {
    let mut config = BrokerConfig::default();
    apply_config_file(&mut config, config_path)?;
    if let Some(addrs) = namesrv {
        config.namesrv_addrs = addrs
            .split(';')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(String::from)
            .collect();
    }
    let running = quiver_broker::start(config).await?;
    if !stop_signal.received().await {
        match running.grpc_addr {
            Some(grpc) => println!("ready broker={} grpc={grpc}", running.local_addr),
            None => println!("ready broker={}", running.local_addr),
        }
        stop_signal.wait().await;
    }
    tracing::info!("stopping");
    running.shutdown().await;
    Ok(())
}

/// SIGTERM and SIGINT, watched from the moment it is made: a signal that arrives before
/// `wait` is kept, not lost to the default action (which would end the process at once).
struct StopSignal {
    terminate: Option<tokio::signal::unix::Signal>,
    interrupt: Option<tokio::signal::unix::Signal>,
}

impl StopSignal {
    fn watch() -> StopSignal {
        use tokio::signal::unix::{signal, SignalKind};
        let watch = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(signal) => Some(signal),
            Err(error) => {
                tracing::warn!(%error, "cannot watch {name}");
                None
            }
        };
        StopSignal {
            terminate: watch(SignalKind::terminate(), "SIGTERM"),
            interrupt: watch(SignalKind::interrupt(), "SIGINT"),
        }
    }

    /// True when a stop signal arrived since the last look (while the broker was starting).
    async fn received(&mut self) -> bool {
        // A timeout polls its future once before looking at the clock: a pending signal is seen.
        let received = tokio::time::timeout(std::time::Duration::ZERO, self.wait())
            .await
            .is_ok();
        if received {
            tracing::info!("stop requested while starting");
        }
        received
    }

    async fn wait(&mut self) {
        let terminate = async {
            match &mut self.terminate {
                Some(signal) => signal.recv().await,
                None => std::future::pending().await,
            }
        };
        let interrupt = async {
            match &mut self.interrupt {
                Some(signal) => signal.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = terminate => {}
            _ = interrupt => {}
        }
    }
}
