//! The topic a produce run sends to: the name server checked, the topic created on every
//! master with `--queues` and waited for in the routes, or found to be creatable from TBW102.

use std::time::Duration;

use quiver_client::{Client, ClientConfig, ClientError};
use tokio::time::Instant;

use crate::report::Print;
use crate::{lookup_error, BenchError, ProduceArgs};

/// Brokers register with the name server asynchronously, so a cluster that has just started
/// may not list its broker or TBW102 yet: look again for this long before calling them missing.
const REGISTRATION_GRACE_MS: u64 = 3_000;
/// How long `--queues` waits for the cluster to list a broker: an Apache RocketMQ broker may
/// register several seconds after its "boot success" line.
const BROKER_WAIT_MS: u64 = 15_000;
/// How long `--queues` waits for the name server to route the new topic.
const ROUTE_WAIT_MS: u64 = 15_000;

/// Creates the topic of `args` as a produce run would, for consumers that must start first.
pub(crate) async fn ensure(args: &ProduceArgs) -> Result<(), BenchError> {
    let client = Client::new(ClientConfig::new(&args.run.namesrv))?;
    prepare(&client, args, Print::Quiet).await
}

/// Checks the name server, creates the topic with `--queues`, and refuses a topic that
/// neither exists nor can be auto-created.
pub(crate) async fn prepare(
    client: &Client,
    args: &ProduceArgs,
    print: Print,
) -> Result<(), BenchError> {
    let namesrv = &args.run.namesrv;
    if let Some(queues) = args.queues {
        create(client, args, queues as i32, print).await?;
    }
    let exists = client
        .fetch_route(&args.topic)
        .await
        .map_err(|error| lookup_error(error, namesrv, &args.topic))?;
    if exists.is_none() {
        let deadline = Instant::now() + Duration::from_millis(REGISTRATION_GRACE_MS);
        loop {
            match client.publish_route(&args.topic).await {
                Ok(_) => break,
                Err(ClientError::TopicNotFound { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(error) => return Err(lookup_error(error, namesrv, &args.topic)),
            }
        }
        if print != Print::Quiet {
            println!(
                "topic {} does not exist yet: the brokers will create it from TBW102 on the first send",
                args.topic
            );
        }
    }
    Ok(())
}

async fn create(
    client: &Client,
    args: &ProduceArgs,
    queues: i32,
    print: Print,
) -> Result<(), BenchError> {
    let namesrv = &args.run.namesrv;
    let deadline = Instant::now() + Duration::from_millis(BROKER_WAIT_MS);
    let masters = loop {
        let cluster = client
            .cluster_info()
            .await
            .map_err(|error| lookup_error(error, namesrv, &args.topic))?;
        let masters: Vec<String> = cluster
            .broker_addr_table
            .values()
            .filter_map(|broker| broker.broker_addrs.get(&0).cloned())
            .collect();
        if !masters.is_empty() {
            break masters;
        }
        if Instant::now() >= deadline {
            return Err(BenchError::NoBroker {
                namesrv: namesrv.clone(),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for broker in &masters {
        client
            .create_topic(broker, &args.topic, queues)
            .await
            .map_err(|error| BenchError::CreateTopic {
                topic: args.topic.clone(),
                broker: broker.clone(),
                reason: error.to_string(),
            })?;
    }
    // Brokers register the new topic with the name server right away, but asynchronously.
    let wanted = masters.len() * queues as usize;
    let deadline = Instant::now() + Duration::from_millis(ROUTE_WAIT_MS);
    loop {
        match client.refresh_route(&args.topic).await {
            Ok(route) if route.write_queues.len() >= wanted => break,
            _ if Instant::now() >= deadline => break,
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    if print != Print::Quiet {
        println!(
            "created topic {} with {queues} queues on {} broker(s)",
            args.topic,
            masters.len()
        );
    }
    Ok(())
}
