//! One function per request code; each turns a request into its response. The server writes
//! the response; nothing here touches a socket.

use std::sync::Mutex;

use quiver_wire::body::{self, DataVersion, RegisterBrokerBody};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{
    ext_or_err, DeleteTopicFromNamesrvRequestHeader, GetRouteInfoRequestHeader, HeaderError,
    KvConfigHeader, RegisterBrokerRequestHeader, UnregisterBrokerRequestHeader,
};
use quiver_wire::message::body_crc;
use quiver_wire::register_body::{self, REGISTER_BODY_INFLATED_BYTES_MAX};
use quiver_wire::{Command, ExtFields};

use crate::route_table::{ConnectionId, Registration, RouteTable};

/// What a handler sees besides the request.
pub struct Call<'a> {
    pub table: &'a Mutex<RouteTable>,
    pub connection: ConnectionId,
    pub now_ms: i64,
}

type Handler = fn(&Call, &Command) -> Result<Command, HeaderError>;

fn handler_for(code: i32) -> Option<Handler> {
    Some(match code {
        request_code::PUT_KV_CONFIG => put_kv_config,
        request_code::GET_KV_CONFIG => get_kv_config,
        request_code::DELETE_KV_CONFIG => delete_kv_config,
        request_code::REGISTER_BROKER => register_broker,
        request_code::UNREGISTER_BROKER => unregister_broker,
        request_code::GET_ROUTEINFO_BY_TOPIC => route_by_topic,
        request_code::GET_BROKER_CLUSTER_INFO => cluster_info,
        request_code::GET_ALL_TOPIC_LIST_FROM_NAMESERVER => topic_list,
        request_code::QUERY_DATA_VERSION => query_data_version,
        request_code::BROKER_HEARTBEAT => broker_heartbeat,
        request_code::DELETE_TOPIC_IN_NAMESRV => delete_topic,
        request_code::WIPE_WRITE_PERM_OF_BROKER => wipe_write_perm,
        request_code::ADD_WRITE_PERM_OF_BROKER => add_write_perm,
        request_code::GET_TOPICS_BY_CLUSTER => topics_by_cluster,
        request_code::GET_SYSTEM_TOPIC_LIST_FROM_NS => system_topic_list,
        _ => return None,
    })
}

/// Answers one request. Unknown codes get REQUEST_CODE_NOT_SUPPORTED as from Java; requests
/// with missing or bad header fields get SYSTEM_ERROR naming the field.
pub fn handle(call: &Call, request: &Command) -> Command {
    let Some(handler) = handler_for(request.code) else {
        return request
            .response_to(response_code::REQUEST_CODE_NOT_SUPPORTED)
            .with_remark(format!("request type {} not supported", request.code));
    };
    match handler(call, request) {
        Ok(response) => response,
        Err(error) => request
            .response_to(response_code::SYSTEM_ERROR)
            .with_remark(error.to_string()),
    }
}

fn lock<'a>(call: &Call<'a>) -> std::sync::MutexGuard<'a, RouteTable> {
    // A poisoned lock means a handler panicked mid-update: the table may be inconsistent and
    // serving it would hand out wrong routes, so stop.
    call.table.lock().expect("route table lock poisoned")
}

fn register_broker(call: &Call, request: &Command) -> Result<Command, HeaderError> {
    let header = RegisterBrokerRequestHeader::from_ext(ext_or_err(request)?)?;
    if header.body_crc32 != 0 && body_crc(&request.body) != header.body_crc32 {
        return Ok(request
            .response_to(response_code::SYSTEM_ERROR)
            .with_remark("crc32 not match"));
    }
    // A Java broker sends JSON unless `compressedRegister` is set; Quiver's broker compresses
    // a large registration. The compressed body inflates to at most a bounded size.
    let parsed = if request.body.is_empty() {
        None
    } else if header.compressed {
        match register_body::decode_compressed(&request.body, REGISTER_BODY_INFLATED_BYTES_MAX) {
            Ok(parsed) => Some(parsed),
            Err(error) => return Ok(refused(request, error.to_string())),
        }
    } else {
        match body::from_json::<RegisterBrokerBody>(&request.body) {
            Ok(parsed) => Some(parsed),
            Err(error) => return Ok(refused(request, error.to_string())),
        }
    };
    let (data_version, topics) = match parsed {
        Some(parsed) => {
            let wrapper = parsed.topic_config_serialize_wrapper;
            (Some(wrapper.data_version), wrapper.topic_config_table)
        }
        None => (None, Default::default()),
    };
    let registration = Registration {
        cluster: header.cluster_name,
        broker_name: header.broker_name,
        broker_addr: header.broker_addr,
        broker_id: header.broker_id,
        expiry_ms: header.heartbeat_timeout_millis,
        ha_server_addr: header.ha_server_addr,
        data_version,
        topics,
    };
    let registered = lock(call).register(registration, Some(call.connection), call.now_ms);
    // RocketMQ's RegisterBrokerResponseHeader: how a slave finds its master.
    let mut ext = ExtFields::new();
    if let Some(master_addr) = registered.master_addr {
        ext = ext.with("masterAddr", master_addr);
    }
    if let Some(ha_server_addr) = registered.ha_server_addr {
        ext = ext.with("haServerAddr", ha_server_addr);
    }
    Ok(request.response_to(response_code::SUCCESS).with_ext(ext))
}

fn refused(request: &Command, remark: String) -> Command {
    tracing::warn!(%remark, "registration refused");
    request
        .response_to(response_code::SYSTEM_ERROR)
        .with_remark(remark)
}

fn unregister_broker(call: &Call, request: &Command) -> Result<Command, HeaderError> {
    let header = UnregisterBrokerRequestHeader::from_ext(ext_or_err(request)?)?;
    lock(call).unregister(&header.broker_addr);
    Ok(request
        .response_to(response_code::SUCCESS)
        .with_ext(ExtFields::new()))
}

fn broker_heartbeat(call: &Call, request: &Command) -> Result<Command, HeaderError> {
    // Liveness only: registration carries the topics, so a heartbeat from an unknown broker
    // changes nothing until it registers.
    let addr = required(request, "brokerAddr")?;
    lock(call).touch(addr, call.now_ms);
    Ok(request.response_to(response_code::SUCCESS))
}

/// Whether the broker's topic config changed since its last registration (the body is its
/// DataVersion); a body we cannot read counts as changed, which only costs a registration.
fn query_data_version(call: &Call, request: &Command) -> Result<Command, HeaderError> {
    let addr = required(request, "brokerAddr")?;
    let mut table = lock(call);
    table.touch(addr, call.now_ms);
    let changed = match body::from_json::<DataVersion>(&request.body) {
        Ok(version) => table.data_version_changed(addr, &version),
        Err(_) => true,
    };
    Ok(request
        .response_to(response_code::SUCCESS)
        .with_ext(ExtFields::new().with("changed", changed)))
}

/// A header field the request must carry.
fn required<'a>(request: &'a Command, field: &'static str) -> Result<&'a str, HeaderError> {
    ext_or_err(request)?
        .get(field)
        .ok_or(HeaderError::Missing(field))
}

/// `mqadmin wipeWritePerm`: answers how many topics lost their write permission.
fn wipe_write_perm(call: &Call, request: &Command) -> Result<Command, HeaderError> {
    change_write_perm(call, request, RouteTable::wipe_write_perm, "wipeTopicCount")
}

/// `mqadmin addWritePerm`: answers how many topics got read and write permission back.
fn add_write_perm(call: &Call, request: &Command) -> Result<Command, HeaderError> {
    change_write_perm(call, request, RouteTable::add_write_perm, "addTopicCount")
}

fn change_write_perm(
    call: &Call,
    request: &Command,
    change: fn(&mut RouteTable, &str) -> usize,
    count_field: &'static str,
) -> Result<Command, HeaderError> {
    let name = required(request, "brokerName")?;
    let count = change(&mut lock(call), name);
    tracing::info!(
        broker = name,
        topics = count,
        answer = count_field,
        "write permission changed"
    );
    Ok(request
        .response_to(response_code::SUCCESS)
        .with_ext(ExtFields::new().with(count_field, count)))
}

fn topics_by_cluster(call: &Call, request: &Command) -> Result<Command, HeaderError> {
    let cluster = required(request, "cluster")?;
    let list = lock(call).topics_by_cluster(cluster);
    Ok(request
        .response_to(response_code::SUCCESS)
        .with_body(body::to_json(&list)))
}

fn system_topic_list(call: &Call, request: &Command) -> Result<Command, HeaderError> {
    let list = lock(call).system_topic_list();
    Ok(request
        .response_to(response_code::SUCCESS)
        .with_body(body::to_json(&list)))
}

fn route_by_topic(call: &Call, request: &Command) -> Result<Command, HeaderError> {
    let header = GetRouteInfoRequestHeader::from_ext(ext_or_err(request)?)?;
    let route = lock(call).route(&header.topic);
    Ok(match route {
        Some(route) => request
            .response_to(response_code::SUCCESS)
            .with_body(body::to_json(&route)),
        None => request
            .response_to(response_code::TOPIC_NOT_EXIST)
            .with_remark(format!(
                "No topic route info in name server for the topic: {}",
                header.topic
            )),
    })
}

fn cluster_info(call: &Call, request: &Command) -> Result<Command, HeaderError> {
    let info = lock(call).cluster_info();
    Ok(request
        .response_to(response_code::SUCCESS)
        .with_body(body::to_json(&info)))
}

fn topic_list(call: &Call, request: &Command) -> Result<Command, HeaderError> {
    let list = lock(call).topic_list();
    Ok(request
        .response_to(response_code::SUCCESS)
        .with_body(body::to_json(&list)))
}

/// Answers SUCCESS whether or not the topic was known, as Java's name server does.
fn delete_topic(call: &Call, request: &Command) -> Result<Command, HeaderError> {
    let header = DeleteTopicFromNamesrvRequestHeader::from_ext(ext_or_err(request)?)?;
    let cluster = header.cluster_name.as_deref().filter(|c| !c.is_empty());
    let removed = lock(call).delete_topic(&header.topic, cluster);
    tracing::info!(topic = %header.topic, cluster = ?cluster, brokers = removed, "topic route deleted");
    Ok(request.response_to(response_code::SUCCESS))
}

fn put_kv_config(call: &Call, request: &Command) -> Result<Command, HeaderError> {
    let header = KvConfigHeader::from_ext(ext_or_err(request)?)?;
    let value = header.value.ok_or(HeaderError::Missing("value"))?;
    lock(call).kv_put(&header.namespace, &header.key, &value);
    Ok(request.response_to(response_code::SUCCESS))
}

fn get_kv_config(call: &Call, request: &Command) -> Result<Command, HeaderError> {
    let header = KvConfigHeader::from_ext(ext_or_err(request)?)?;
    Ok(match lock(call).kv_get(&header.namespace, &header.key) {
        Some(value) => request
            .response_to(response_code::SUCCESS)
            .with_ext(ExtFields::new().with("value", value)),
        None => request
            .response_to(response_code::QUERY_NOT_FOUND)
            .with_remark(format!(
                "No config item, Namespace: {} Key: {}",
                header.namespace, header.key
            )),
    })
}

fn delete_kv_config(call: &Call, request: &Command) -> Result<Command, HeaderError> {
    let header = KvConfigHeader::from_ext(ext_or_err(request)?)?;
    lock(call).kv_delete(&header.namespace, &header.key);
    Ok(request.response_to(response_code::SUCCESS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiver_wire::body::TopicConfig;
    use quiver_wire::header::GetRouteInfoRequestHeader;
    use quiver_wire::Encoding;

    fn registration(topics: usize, compressed: bool) -> Command {
        let mut body = RegisterBrokerBody::default();
        let wrapper = &mut body.topic_config_serialize_wrapper;
        wrapper.data_version.counter = 1;
        for index in 0..topics {
            let name = format!("T{index}");
            let config = TopicConfig {
                topic_name: name.clone(),
                read_queue_nums: 4,
                write_queue_nums: 4,
                perm: 6,
                topic_filter_type: "SINGLE_TAG".into(),
                ..TopicConfig::default()
            };
            wrapper.topic_config_table.insert(name, config);
        }
        let bytes = if compressed {
            register_body::encode_compressed(&body)
        } else {
            body::to_json(&body)
        };
        signed(bytes, compressed)
    }

    fn signed(bytes: Vec<u8>, compressed: bool) -> Command {
        let header = RegisterBrokerRequestHeader {
            broker_name: "broker-a".into(),
            broker_addr: "127.0.0.1:10911".into(),
            cluster_name: "DefaultCluster".into(),
            ha_server_addr: "127.0.0.1:10912".into(),
            broker_id: 0,
            heartbeat_timeout_millis: None,
            compressed,
            body_crc32: body_crc(&bytes),
        };
        Command::request(request_code::REGISTER_BROKER, Encoding::Json)
            .with_ext(header.to_ext())
            .with_body(bytes)
    }

    fn routed(table: &Mutex<RouteTable>, topic: &str) -> bool {
        let call = Call {
            table,
            connection: 1,
            now_ms: 1,
        };
        let header = GetRouteInfoRequestHeader {
            topic: topic.into(),
        };
        let request = Command::request(request_code::GET_ROUTEINFO_BY_TOPIC, Encoding::Json)
            .with_ext(header.to_ext());
        handle(&call, &request).code == response_code::SUCCESS
    }

    #[test]
    fn compressed_and_json_registrations_are_both_read() {
        for compressed in [true, false] {
            let table = Mutex::new(RouteTable::new(120_000));
            let call = Call {
                table: &table,
                connection: 1,
                now_ms: 1,
            };
            let answer = handle(&call, &registration(3_000, compressed));
            assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
            assert!(routed(&table, "T2999"), "compressed: {compressed}");
        }
    }

    #[test]
    fn a_compressed_body_that_inflates_past_its_bound_is_refused() {
        use std::io::Write;
        // A data version's length that claims the whole bound and more: refused before it is
        // read, whatever the body would inflate to.
        let claimed = (REGISTER_BODY_INFLATED_BYTES_MAX as i32 + 1).to_be_bytes();
        let mut encoder =
            flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(&claimed).expect("compress");
        let bomb = encoder.finish().expect("finish");
        let table = Mutex::new(RouteTable::new(120_000));
        let call = Call {
            table: &table,
            connection: 1,
            now_ms: 1,
        };
        let answer = handle(&call, &signed(bomb, true));
        assert_eq!(answer.code, response_code::SYSTEM_ERROR);
        let remark = answer.remark.unwrap_or_default();
        assert!(remark.contains("inflates past"), "{remark}");
        assert!(!routed(&table, "T0"));
    }
}
