// Checks that a slave holds what its master acknowledged, message by message, by reading both
// brokers directly at their own addresses. compat/replication.sh runs it as a single-file Java
// program (`java -cp <RocketMQ 5.5.0 jars> Replication.java ...`), so it needs no build step.
//
//   create-topic NAMESRV MASTER_ADDR TOPIC QUEUES
//       creates TOPIC with QUEUES queues on the master (UPDATE_AND_CREATE_TOPIC).
//   replicate NAMESRV BROKER_NAME MASTER_ADDR SLAVE_ADDR TOPIC QUEUES COUNT BODY_BYTES DEADLINE_S
//       sends COUNT messages with Apache RocketMQ's producer (message i to queue i % QUEUES, with
//       a key, a tag and a property), waits until the slave's max offset of every queue equals
//       the master's, then pulls every queue from both brokers and checks that the slave answers
//       each offset with the record the master stored, byte for byte, and that it is the message
//       that was sent. Before the pulls it prints `end position P` (the master's CommitLog end)
//       and reads every record from the slave by CommitLog position (VIEW_MESSAGE_BY_ID), which
//       needs no topic metadata on the slave.
//
// Exits 0 when every check holds, 1 with the first differences otherwise.

import static java.nio.charset.StandardCharsets.UTF_8;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.Random;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.sysflag.PullSysFlag;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyRemotingClient;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.header.GetMaxOffsetRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.GetMaxOffsetResponseHeader;
import org.apache.rocketmq.remoting.protocol.header.GetMinOffsetRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.GetMinOffsetResponseHeader;
import org.apache.rocketmq.remoting.protocol.header.PullMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.PullMessageResponseHeader;
import org.apache.rocketmq.remoting.protocol.header.ViewMessageRequestHeader;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public final class Replication {
    private static final long REQUEST_TIMEOUT_MS = 5_000;
    private static final int PULL_BATCH_MAX = 32;
    private static final String GROUP = "replication_check";
    private static final int DIFFERENCES_SHOWN_MAX = 10;

    public static void main(String[] args) throws Exception {
        if (args.length == 5 && args[0].equals("create-topic")) {
            createTopic(args[1], args[2], args[3], Integer.parseInt(args[4]));
        } else if (args.length == 10 && args[0].equals("replicate")) {
            Run run = new Run(args[1], args[2], args[3], args[4], args[5], Integer.parseInt(args[6]),
                Integer.parseInt(args[7]), Integer.parseInt(args[8]), Long.parseLong(args[9]));
            System.exit(run.replicate() ? 0 : 1);
        } else {
            System.err.println("usage: create-topic NAMESRV MASTER_ADDR TOPIC QUEUES"
                + " | replicate NAMESRV BROKER_NAME MASTER_ADDR SLAVE_ADDR TOPIC QUEUES COUNT BODY_BYTES DEADLINE_S");
            System.exit(2);
        }
        System.exit(0);
    }

    static void createTopic(String namesrv, String master, String topic, int queues) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("replication-admin");
        admin.start();
        try {
            admin.createAndUpdateTopicConfig(master, new TopicConfig(topic, queues, queues, 6));
            System.out.println("created " + topic + " with " + queues + " queues on " + master);
        } finally {
            admin.shutdown();
        }
    }

    /** Message i's body: its number, then bytes drawn from a generator seeded with i. */
    static byte[] body(int index, int size) {
        byte[] body = new byte[size];
        new Random(index).nextBytes(body);
        byte[] head = ("message " + index + " ").getBytes(UTF_8);
        System.arraycopy(head, 0, body, 0, Math.min(head.length, size));
        return body;
    }

    static String key(int index) {
        return "key-" + index;
    }

    static String tag(int index) {
        return "tag-" + (index % 3);
    }

    record Sent(int index, int queueId, long queueOffset, String msgId, String offsetMsgId) {}

    record Pulled(long queueOffset, byte[] record, MessageExt message) {}

    static final class Run {
        final String namesrv, brokerName, master, slave, topic;
        final int queues, count, bodyBytes;
        final long deadlineMs;
        final NettyRemotingClient remoting = new NettyRemotingClient(new NettyClientConfig());
        final List<String> differences = new ArrayList<>();

        Run(String namesrv, String brokerName, String master, String slave, String topic, int queues,
            int count, int bodyBytes, long deadlineS) {
            this.namesrv = namesrv;
            this.brokerName = brokerName;
            this.master = master;
            this.slave = slave;
            this.topic = topic;
            this.queues = queues;
            this.count = count;
            this.bodyBytes = bodyBytes;
            this.deadlineMs = System.currentTimeMillis() + deadlineS * 1000;
        }

        boolean replicate() throws Exception {
            remoting.start();
            try {
                Sent[] sent = send();
                if (sent == null) {
                    return false;
                }
                long[] masterMax = new long[queues];
                for (int queue = 0; queue < queues; queue++) {
                    masterMax[queue] = maxOffset(master, queue);
                    long expected = (count - queue + queues - 1) / queues;
                    if (masterMax[queue] != expected) {
                        differ("master queue " + queue + ": max offset " + masterMax[queue] + ", sent " + expected);
                    }
                }
                if (!differences.isEmpty()) {
                    return report();
                }
                waitForSlave(masterMax);
                if (!differences.isEmpty()) {
                    return report();
                }
                // The master's records: the reference for the slave, and where its log ends.
                List<List<Pulled>> fromMaster = new ArrayList<>();
                long endPosition = 0;
                for (int queue = 0; queue < queues; queue++) {
                    List<Pulled> pulled = pullAll(master, queue, masterMax[queue]);
                    if (pulled == null) {
                        return report();
                    }
                    fromMaster.add(pulled);
                    for (Pulled record : pulled) {
                        endPosition = Math.max(endPosition, record.message.getCommitLogOffset() + record.record.length);
                    }
                }
                System.out.println("end position " + endPosition);
                // By CommitLog position first: this reads the slave's log without its topic table.
                int byPosition = 0;
                for (List<Pulled> queue : fromMaster) {
                    for (Pulled record : queue) {
                        byte[] onSlave = viewByPosition(slave, record.message.getCommitLogOffset());
                        if (!Arrays.equals(onSlave, record.record)) {
                            differ("position " + record.message.getCommitLogOffset() + ": the slave answers "
                                + (onSlave == null ? "nothing" : onSlave.length + " bytes, differing from byte "
                                + Arrays.mismatch(onSlave, record.record)) + "; the master's record has "
                                + record.record.length + " bytes");
                        } else {
                            byPosition++;
                        }
                    }
                }
                if (!differences.isEmpty()) {
                    return report();
                }
                System.out.println("the slave holds all " + byPosition + " records at the master's CommitLog positions,"
                    + " byte for byte (read by position)");
                // Then through the slave's topic table and ConsumeQueues, as a consumer reads it.
                for (int queue = 0; queue < queues; queue++) {
                    List<Pulled> fromSlave = pullAll(slave, queue, masterMax[queue]);
                    if (fromSlave == null) {
                        return report();
                    }
                    compare(queue, fromMaster.get(queue), fromSlave, sent);
                }
                if (!differences.isEmpty()) {
                    return report();
                }
                System.out.println("the slave " + slave + " answers pulls of all " + count + " messages of " + topic
                    + " at the master's queue offsets with the master's records, each the message sent ("
                    + queues + " queues, max offsets " + Arrays.toString(masterMax) + ")");
                return true;
            } finally {
                remoting.shutdown();
            }
        }

        byte[] viewByPosition(String address, long position) throws Exception {
            ViewMessageRequestHeader header = new ViewMessageRequestHeader();
            header.setTopic(topic);
            header.setOffset(position);
            RemotingCommand response = remoting.invokeSync(address,
                RemotingCommand.createRequestCommand(RequestCode.VIEW_MESSAGE_BY_ID, header), REQUEST_TIMEOUT_MS);
            if (response.getCode() != ResponseCode.SUCCESS) {
                differ("VIEW_MESSAGE_BY_ID at " + address + " position " + position + ": code " + response.getCode()
                    + " " + response.getRemark());
                return null;
            }
            return response.getBody();
        }

        /**
         * Sends every message; the first alone, then waits for it on the slave, so the slave is
         * known to follow before the master's log grows past its first segment (a slave that
         * has nothing starts at the base of its master's last segment).
         */
        Sent[] send() throws Exception {
            DefaultMQProducer producer = new DefaultMQProducer("replication_producer");
            producer.setNamesrvAddr(namesrv);
            producer.setInstanceName("replication-producer");
            producer.setSendMsgTimeout((int) REQUEST_TIMEOUT_MS);
            producer.start();
            try {
                Sent[] sent = new Sent[count];
                long started = System.currentTimeMillis();
                for (int index = 0; index < count; index++) {
                    Message message = new Message(topic, tag(index), key(index), body(index, bodyBytes));
                    message.putUserProperty("index", Integer.toString(index));
                    MessageQueue queue = new MessageQueue(topic, brokerName, index % queues);
                    SendResult result = producer.send(message, queue);
                    if (result.getSendStatus() != SendStatus.SEND_OK) {
                        differ("message " + index + ": " + result.getSendStatus());
                        return null;
                    }
                    sent[index] = new Sent(index, result.getMessageQueue().getQueueId(), result.getQueueOffset(),
                        result.getMsgId(), result.getOffsetMsgId());
                    if (index == 0) {
                        long firstOnSlave = waitForFirst();
                        if (firstOnSlave < 0) {
                            return null;
                        }
                        System.out.println("the first message reached the slave in " + firstOnSlave + " ms");
                        started = System.currentTimeMillis();
                    }
                }
                System.out.println("sent " + count + " messages of " + bodyBytes + " bytes to " + master + " in "
                    + (System.currentTimeMillis() - started) + " ms after the first");
                return sent;
            } finally {
                producer.shutdown();
            }
        }

        long waitForFirst() throws Exception {
            long started = System.currentTimeMillis();
            String last = "";
            while (System.currentTimeMillis() < deadlineMs) {
                try {
                    long max = maxOffset(slave, 0);
                    if (max >= 1) {
                        return System.currentTimeMillis() - started;
                    }
                    last = "max offset " + max;
                } catch (Exception error) {
                    last = error.toString();
                }
                Thread.sleep(200);
            }
            differ("the first message never reached the slave (queue 0: " + last + ")");
            return -1;
        }

        void waitForSlave(long[] masterMax) throws Exception {
            long[] slaveMax = new long[queues];
            String last = "";
            while (true) {
                try {
                    for (int queue = 0; queue < queues; queue++) {
                        slaveMax[queue] = maxOffset(slave, queue);
                    }
                    if (Arrays.equals(slaveMax, masterMax)) {
                        return;
                    }
                    last = "slave max offsets " + Arrays.toString(slaveMax);
                } catch (Exception error) {
                    last = error.toString();
                }
                if (System.currentTimeMillis() >= deadlineMs) {
                    differ("the slave did not catch up: master max offsets " + Arrays.toString(masterMax) + ", " + last);
                    return;
                }
                Thread.sleep(200);
            }
        }

        long maxOffset(String address, int queue) throws Exception {
            GetMaxOffsetRequestHeader header = new GetMaxOffsetRequestHeader();
            header.setTopic(topic);
            header.setQueueId(queue);
            RemotingCommand response = remoting.invokeSync(address,
                RemotingCommand.createRequestCommand(RequestCode.GET_MAX_OFFSET, header), REQUEST_TIMEOUT_MS);
            if (response.getCode() != ResponseCode.SUCCESS) {
                throw new IllegalStateException("GET_MAX_OFFSET at " + address + ": code " + response.getCode()
                    + " " + response.getRemark());
            }
            return response.decodeCommandCustomHeader(GetMaxOffsetResponseHeader.class).getOffset();
        }

        long minOffset(String address, int queue) throws Exception {
            GetMinOffsetRequestHeader header = new GetMinOffsetRequestHeader();
            header.setTopic(topic);
            header.setQueueId(queue);
            RemotingCommand response = remoting.invokeSync(address,
                RemotingCommand.createRequestCommand(RequestCode.GET_MIN_OFFSET, header), REQUEST_TIMEOUT_MS);
            if (response.getCode() != ResponseCode.SUCCESS) {
                throw new IllegalStateException("GET_MIN_OFFSET at " + address + ": code " + response.getCode()
                    + " " + response.getRemark());
            }
            return response.decodeCommandCustomHeader(GetMinOffsetResponseHeader.class).getOffset();
        }

        /**
         * Pulls offsets 0 until `max` of one queue from one broker, retrying answers that say
         * "not yet" (a RocketMQ slave knows a topic only once it has copied its master's topics).
         */
        List<Pulled> pullAll(String address, int queue, long max) throws Exception {
            long min = minOffset(address, queue);
            if (min != 0) {
                differ(address + " queue " + queue + ": min offset " + min + ", expected 0");
                return null;
            }
            List<Pulled> pulled = new ArrayList<>();
            long offset = 0;
            String last = "";
            while (offset < max) {
                if (System.currentTimeMillis() >= deadlineMs) {
                    differ(address + " queue " + queue + ": pulled up to offset " + offset + " of " + max
                        + " before the deadline (last answer: " + (last.isEmpty() ? "none" : last) + ")");
                    return null;
                }
                PullMessageRequestHeader header = new PullMessageRequestHeader();
                header.setConsumerGroup(GROUP);
                header.setTopic(topic);
                header.setQueueId(queue);
                header.setQueueOffset(offset);
                header.setMaxMsgNums(PULL_BATCH_MAX);
                header.setSysFlag(PullSysFlag.buildSysFlag(false, false, true, false));
                header.setCommitOffset(0L);
                header.setSuspendTimeoutMillis(0L);
                header.setSubscription("*");
                header.setSubVersion(0L);
                header.setExpressionType("TAG");
                RemotingCommand response = remoting.invokeSync(address,
                    RemotingCommand.createRequestCommand(RequestCode.PULL_MESSAGE, header), REQUEST_TIMEOUT_MS);
                last = "code " + response.getCode() + " " + response.getRemark();
                if (response.getCode() != ResponseCode.SUCCESS) {
                    if (response.getCode() == ResponseCode.TOPIC_NOT_EXIST
                        || response.getCode() == ResponseCode.PULL_RETRY_IMMEDIATELY
                        || response.getCode() == ResponseCode.PULL_NOT_FOUND) {
                        Thread.sleep(500);
                        continue;
                    }
                    differ(address + " queue " + queue + " offset " + offset + ": " + last);
                    return null;
                }
                ByteBuffer body = ByteBuffer.wrap(response.getBody());
                while (body.hasRemaining()) {
                    int size = body.getInt(body.position());
                    byte[] record = new byte[size];
                    body.get(record);
                    MessageExt message = MessageDecoder.decode(ByteBuffer.wrap(record), true, true, false);
                    pulled.add(new Pulled(message.getQueueOffset(), record, message));
                }
                long next = response.decodeCommandCustomHeader(PullMessageResponseHeader.class).getNextBeginOffset();
                if (next <= offset) {
                    differ(address + " queue " + queue + " offset " + offset + ": answer does not advance (" + last + ")");
                    return null;
                }
                offset = next;
            }
            return pulled;
        }

        void compare(int queue, List<Pulled> fromMaster, List<Pulled> fromSlave, Sent[] sent) {
            String where = "queue " + queue;
            if (fromMaster.size() != fromSlave.size()) {
                differ(where + ": " + fromMaster.size() + " messages on the master, " + fromSlave.size() + " on the slave");
            }
            for (int i = 0; i < Math.min(fromMaster.size(), fromSlave.size()); i++) {
                Pulled m = fromMaster.get(i);
                Pulled s = fromSlave.get(i);
                String at = where + " offset " + s.queueOffset;
                if (m.queueOffset != i || s.queueOffset != i) {
                    differ(where + " entry " + i + ": queue offset " + m.queueOffset + " on the master, "
                        + s.queueOffset + " on the slave");
                    continue;
                }
                if (!Arrays.equals(m.record, s.record)) {
                    differ(at + ": the slave's record (" + s.record.length + " bytes at position "
                        + s.message.getCommitLogOffset() + ") differs from the master's (" + m.record.length
                        + " bytes at position " + m.message.getCommitLogOffset() + ") from byte "
                        + Arrays.mismatch(m.record, s.record));
                }
                int index = i * queues + queue;
                Sent expected = index < sent.length ? sent[index] : null;
                MessageExt message = s.message;
                if (expected == null || expected.queueId != queue || expected.queueOffset != i) {
                    differ(at + ": no message was sent to this offset (" + expected + ")");
                    continue;
                }
                check(at, "body", Arrays.equals(message.getBody(), body(index, bodyBytes)),
                    "bytes differ from what was sent");
                check(at, "index", Objects.equals(message.getUserProperty("index"), Integer.toString(index)),
                    message.getUserProperty("index"));
                check(at, "keys", Objects.equals(message.getKeys(), key(index)), message.getKeys());
                check(at, "tags", Objects.equals(message.getTags(), tag(index)), message.getTags());
                check(at, "topic", Objects.equals(message.getTopic(), topic), message.getTopic());
                check(at, "queue id", message.getQueueId() == queue, Integer.toString(message.getQueueId()));
                check(at, "UNIQ_KEY", Objects.equals(message.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
                    expected.msgId), message.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
                check(at, "offset message id", Objects.equals(message.getMsgId(), expected.offsetMsgId),
                    message.getMsgId() + " (sent: " + expected.offsetMsgId + ")");
            }
        }

        void check(String at, String what, boolean holds, String seen) {
            if (!holds) {
                differ(at + ": " + what + " " + seen);
            }
        }

        void differ(String difference) {
            differences.add(difference);
        }

        boolean report() {
            System.out.println("FAILED: " + differences.size() + " differences; the first:");
            differences.stream().limit(DIFFERENCES_SHOWN_MAX).forEach(d -> System.out.println("  " + d));
            return false;
        }
    }
}
