//! Which queues a consumer takes: Java's default "AVG" strategy, run by every member of the
//! group on the same sorted lists so that together they cover each queue exactly once.

use quiver_wire::body::MessageQueue;

/// The share of `queues` that `client_id` takes among `client_ids`: contiguous blocks in sorted
/// order, the first `queues % clients` members taking one extra. Both lists are sorted here,
/// so callers may pass them in any order. A client not in the list takes nothing.
pub fn allocate_average(
    queues: &[MessageQueue],
    client_ids: &[String],
    client_id: &str,
) -> Vec<MessageQueue> {
    let mut queues = queues.to_vec();
    queues.sort();
    queues.dedup();
    let mut ids: Vec<&str> = client_ids.iter().map(String::as_str).collect();
    ids.sort_unstable();
    ids.dedup();
    let Some(index) = ids.iter().position(|id| *id == client_id) else {
        return Vec::new();
    };
    let (queue_count, client_count) = (queues.len(), ids.len());
    if queue_count == 0 {
        return Vec::new();
    }
    let remainder = queue_count % client_count;
    let share = if queue_count <= client_count {
        1
    } else if remainder > 0 && index < remainder {
        queue_count / client_count + 1
    } else {
        queue_count / client_count
    };
    let start = if remainder > 0 && index < remainder {
        index * share
    } else {
        index * share + remainder
    };
    let take = share.min(queue_count.saturating_sub(start));
    (0..take)
        .map(|step| queues[(start + step) % queue_count].clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues(count: i32) -> Vec<MessageQueue> {
        (0..count)
            .map(|queue_id| MessageQueue {
                topic: "T".into(),
                broker_name: "broker-a".into(),
                queue_id,
            })
            .collect()
    }

    fn ids(count: usize) -> Vec<String> {
        (0..count).map(|i| format!("127.0.0.1@{i}")).collect()
    }

    fn ids_of(share: &[MessageQueue]) -> Vec<i32> {
        share.iter().map(|q| q.queue_id).collect()
    }

    #[test]
    fn every_queue_goes_to_exactly_one_member() {
        for queue_count in 0..20 {
            for client_count in 1..7 {
                let all = queues(queue_count);
                let members = ids(client_count);
                let mut taken: Vec<MessageQueue> = members
                    .iter()
                    .flat_map(|id| allocate_average(&all, &members, id))
                    .collect();
                taken.sort();
                assert_eq!(taken, all, "{queue_count} queues, {client_count} clients");
            }
        }
    }

    #[test]
    fn shares_match_java_for_eight_queues_and_three_members() {
        let all = queues(8);
        let members = ids(3);
        assert_eq!(
            ids_of(&allocate_average(&all, &members, &members[0])),
            [0, 1, 2]
        );
        assert_eq!(
            ids_of(&allocate_average(&all, &members, &members[1])),
            [3, 4, 5]
        );
        assert_eq!(
            ids_of(&allocate_average(&all, &members, &members[2])),
            [6, 7]
        );
    }

    #[test]
    fn input_order_does_not_matter_and_strangers_get_nothing() {
        let mut all = queues(4);
        all.reverse();
        let mut members = ids(2);
        members.reverse();
        assert_eq!(
            ids_of(&allocate_average(&all, &members, "127.0.0.1@0")),
            [0, 1]
        );
        assert!(allocate_average(&all, &members, "other").is_empty());
        assert_eq!(allocate_average(&queues(2), &ids(3), "127.0.0.1@2"), vec![]);
    }
}
