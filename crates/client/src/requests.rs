//! Typed broker requests used by producers, consumers and tools.

use std::time::Duration;

use quiver_wire::body::{self, ConsumerIdList, HeartbeatData, MessageQueue};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{
    CreateTopicRequestHeader, GetConsumerListByGroupRequestHeader, OffsetResponseHeader,
    PullMessageRequestHeader, PullMessageResponseHeader, QueryConsumerOffsetRequestHeader,
    TopicQueueHeader, UnregisterClientRequestHeader, UpdateConsumerOffsetRequestHeader,
};
use quiver_wire::message::StoredMessage;

use crate::client::{refused, Client};
use crate::error::ClientError;
use crate::route::{PERM_READ, PERM_WRITE};

/// What a pull found.
#[derive(Debug)]
pub enum PullStatus {
    Found(Vec<StoredMessage>),
    NoNewMessage,
    NoMatchedMessage,
    OffsetIllegal,
}

#[derive(Debug)]
pub struct PullResult {
    pub status: PullStatus,
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
}

impl Client {
    pub async fn heartbeat(&self, addr: &str, data: &HeartbeatData) -> Result<(), ClientError> {
        let request = self
            .request(request_code::HEART_BEAT)
            .with_body(body::to_json(data));
        self.call_expecting(addr, request, &[response_code::SUCCESS])
            .await
            .map(drop)
    }

    pub async fn unregister(
        &self,
        addr: &str,
        producer_group: Option<&str>,
        consumer_group: Option<&str>,
    ) -> Result<(), ClientError> {
        let header = UnregisterClientRequestHeader {
            client_id: self.client_id().to_owned(),
            producer_group: producer_group.map(String::from),
            consumer_group: consumer_group.map(String::from),
        };
        let request = self
            .request(request_code::UNREGISTER_CLIENT)
            .with_ext(header.to_ext());
        self.call_expecting(addr, request, &[response_code::SUCCESS])
            .await
            .map(drop)
    }

    /// GET_CONSUMER_LIST_BY_GROUP: the client ids of the group's live members.
    pub async fn consumer_ids(&self, addr: &str, group: &str) -> Result<Vec<String>, ClientError> {
        let header = GetConsumerListByGroupRequestHeader {
            consumer_group: group.to_owned(),
        };
        let request = self
            .request(request_code::GET_CONSUMER_LIST_BY_GROUP)
            .with_ext(header.to_ext());
        let response = self
            .call_expecting(addr, request, &[response_code::SUCCESS])
            .await?;
        let list: ConsumerIdList = body::from_json(&response.body)
            .map_err(|error| ClientError::bad_response(addr, error))?;
        Ok(list.consumer_id_list)
    }

    /// QUERY_CONSUMER_OFFSET; `Ok(None)` when the group has no committed offset there.
    pub async fn query_offset(
        &self,
        addr: &str,
        group: &str,
        queue: &MessageQueue,
    ) -> Result<Option<i64>, ClientError> {
        let header = QueryConsumerOffsetRequestHeader {
            consumer_group: group.to_owned(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            set_zero_if_not_found: Some(false),
        };
        let request = self
            .request(request_code::QUERY_CONSUMER_OFFSET)
            .with_ext(header.to_ext());
        let accepted = [response_code::SUCCESS, response_code::QUERY_NOT_FOUND];
        let response = self.call_expecting(addr, request, &accepted).await?;
        if response.code == response_code::QUERY_NOT_FOUND {
            return Ok(None);
        }
        offset_of(addr, &response).map(Some)
    }

    /// GET_MAX_OFFSET (the next offset to be written) or GET_MIN_OFFSET.
    pub async fn queue_offset(
        &self,
        addr: &str,
        queue: &MessageQueue,
        max: bool,
    ) -> Result<i64, ClientError> {
        let header = TopicQueueHeader {
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
        };
        let code = if max {
            request_code::GET_MAX_OFFSET
        } else {
            request_code::GET_MIN_OFFSET
        };
        let request = self.request(code).with_ext(header.to_ext());
        let response = self
            .call_expecting(addr, request, &[response_code::SUCCESS])
            .await?;
        offset_of(addr, &response)
    }

    /// UPDATE_CONSUMER_OFFSET, oneway (as the Java offset store sends it) or acknowledged.
    pub async fn commit_offset(
        &self,
        addr: &str,
        group: &str,
        queue: &MessageQueue,
        offset: i64,
        acknowledged: bool,
    ) -> Result<(), ClientError> {
        let header = UpdateConsumerOffsetRequestHeader {
            consumer_group: group.to_owned(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            commit_offset: offset,
        };
        let request = self
            .request(request_code::UPDATE_CONSUMER_OFFSET)
            .with_ext(header.to_ext());
        if acknowledged {
            self.call_expecting(addr, request, &[response_code::SUCCESS])
                .await
                .map(drop)
        } else {
            self.oneway(addr, request).await
        }
    }

    /// UPDATE_AND_CREATE_TOPIC on one broker, readable and writable.
    pub async fn create_topic(
        &self,
        addr: &str,
        topic: &str,
        queue_nums: i32,
    ) -> Result<(), ClientError> {
        self.create_topic_with_attributes(addr, topic, queue_nums, None)
            .await
    }

    /// The same with RocketMQ 5 attribute changes (`+persistence=memory`).
    pub async fn create_topic_with_attributes(
        &self,
        addr: &str,
        topic: &str,
        queue_nums: i32,
        attributes: Option<&str>,
    ) -> Result<(), ClientError> {
        let header = CreateTopicRequestHeader {
            topic: topic.to_owned(),
            default_topic: crate::route::AUTO_CREATE_TOPIC.to_owned(),
            read_queue_nums: queue_nums,
            write_queue_nums: queue_nums,
            perm: PERM_READ | PERM_WRITE,
            topic_filter_type: "SINGLE_TAG".into(),
            topic_sys_flag: 0,
            order: false,
            attributes: attributes.map(str::to_owned),
        };
        let request = self
            .request(request_code::UPDATE_AND_CREATE_TOPIC)
            .with_ext(header.to_ext());
        self.call_expecting(addr, request, &[response_code::SUCCESS])
            .await
            .map(drop)
    }

    /// PULL_MESSAGE (or LITE_PULL_MESSAGE with `code`), waiting up to the suspend time plus
    /// the request timeout.
    pub async fn pull(
        &self,
        addr: &str,
        code: i32,
        header: &PullMessageRequestHeader,
    ) -> Result<PullResult, ClientError> {
        let suspend_ms = u64::try_from(header.suspend_timeout_millis).unwrap_or(0);
        let timeout = self.request_timeout() + Duration::from_millis(suspend_ms);
        let request = self.request(code).with_ext(header.to_ext());
        let response = self.call_with_timeout(addr, request, timeout).await?;
        let status = match response.code {
            response_code::SUCCESS => PullStatus::Found(
                StoredMessage::decode_all_shared(&response.body)
                    .map_err(|error| ClientError::bad_response(addr, error))?,
            ),
            response_code::PULL_NOT_FOUND => PullStatus::NoNewMessage,
            response_code::PULL_RETRY_IMMEDIATELY => PullStatus::NoMatchedMessage,
            response_code::PULL_OFFSET_MOVED => PullStatus::OffsetIllegal,
            _ => return Err(refused(addr, code, &response)),
        };
        let ext = response
            .ext
            .as_ref()
            .ok_or_else(|| ClientError::bad_response(addr, "pull response without header"))?;
        let header = PullMessageResponseHeader::from_ext(ext)
            .map_err(|error| ClientError::bad_response(addr, error))?;
        Ok(PullResult {
            status,
            next_begin_offset: header.next_begin_offset,
            min_offset: header.min_offset,
            max_offset: header.max_offset,
        })
    }
}

fn offset_of(addr: &str, response: &quiver_wire::Command) -> Result<i64, ClientError> {
    let ext = response
        .ext
        .as_ref()
        .ok_or_else(|| ClientError::bad_response(addr, "offset response without header"))?;
    OffsetResponseHeader::from_ext(ext)
        .map(|header| header.offset)
        .map_err(|error| ClientError::bad_response(addr, error))
}
