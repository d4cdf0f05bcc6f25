//! BROKER_HEARTBEAT to every controller, and the master lease its answers extend.

use std::sync::Arc;
use std::time::Duration;

use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::BrokerHeartbeatRequestHeader;
use quiver_wire::{Command, Encoding};
use tokio::sync::watch;

use super::controlled;
use crate::clock::now_ms;
use crate::outbound::Link;
use crate::state::Broker;

/// BROKER_HEARTBEAT to every controller every `brokerHeartbeatInterval`, with the broker's
/// epoch, log end and priority. Each answered one extends a master's lease.
pub(super) async fn heartbeats(owner: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let config = owner.lifecycle().config.clone();
    let mut links: Vec<Link> = config
        .controller
        .addrs
        .iter()
        .cloned()
        .map(Link::new)
        .collect();
    let mut tick = tokio::time::interval(Duration::from_millis(
        config.controller.heartbeat_interval_ms,
    ));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let timeout = Duration::from_millis(config.controller.heartbeat_interval_ms.max(500));
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            _ = tick.tick() => {}
        }
        let controlled = controlled(&owner);
        let stats = owner.replicating().store.stats();
        let header = BrokerHeartbeatRequestHeader {
            cluster_name: config.cluster_name.clone(),
            broker_addr: owner.replicating().store_host.to_string(),
            broker_name: config.broker_name.clone(),
            broker_id: Some(controlled.own_id()),
            epoch: Some(controlled.last_epoch()),
            max_offset: Some(stats.written_position as i64),
            confirm_offset: Some(stats.written_position as i64),
            heartbeat_timeout_millis: Some(config.controller.heartbeat_timeout_ms as i64),
            election_priority: Some(config.controller.election_priority),
        };
        let request = Command::request(request_code::BROKER_HEARTBEAT, Encoding::Json)
            .with_ext(header.to_ext());
        for link in links.iter_mut() {
            let sent_ms = now_ms();
            match link.call(request.clone(), timeout).await {
                Ok(answer) if answer.code == response_code::SUCCESS => {
                    // Measured from when it was sent: the controller heard it no earlier. Only
                    // the leader's answer counts, as only the leader elects: a master that
                    // reaches a follower but not the leader must not keep its lease. A
                    // controller that does not say whether it leads (RocketMQ's) counts.
                    if answer_from_leader(&answer) {
                        controlled.extend_lease(sent_ms, config.controller.heartbeat_timeout_ms);
                    }
                }
                Ok(answer) => {
                    tracing::debug!(controller = %link.addr, code = answer.code, "heartbeat refused")
                }
                Err(error) => tracing::debug!(controller = %link.addr, %error, "heartbeat failed"),
            }
        }
    }
}

/// Whether a heartbeat's answer may extend a master's lease: it says its node leads, or it does
/// not say (a controller that does not tell).
fn answer_from_leader(answer: &Command) -> bool {
    answer
        .ext
        .as_ref()
        .and_then(|ext| ext.get("isLeader"))
        .is_none_or(|leads| leads == "true")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_leaders_answer_or_one_that_does_not_say_extends_a_lease() {
        let answer = |is_leader: Option<&str>| {
            let mut ext = quiver_wire::ExtFields::new();
            if let Some(value) = is_leader {
                ext = ext.with("isLeader", value);
            }
            Command::request(request_code::BROKER_HEARTBEAT, Encoding::Json)
                .response_to(response_code::SUCCESS)
                .with_ext(ext)
        };
        assert!(answer_from_leader(&answer(Some("true"))));
        assert!(!answer_from_leader(&answer(Some("false"))));
        assert!(
            answer_from_leader(&answer(None)),
            "RocketMQ's controller does not say"
        );
    }
}
