package dev.quiver.compat;

import static dev.quiver.compat.Compat.WAIT;
import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Broadcasting consumption: every consumer of a group gets every message, each keeping its own
 * offsets on the client; a clustering group's consumers split the queues between them instead.
 */
@Timeout(180)
class BroadcastTest {
    private static final int MESSAGES = 20;
    private static final int QUEUES = 2;
    private DefaultMQProducer producer;
    private final List<DefaultMQPushConsumer> consumers = new ArrayList<>();

    @BeforeEach
    void start() throws Exception {
        producer = Compat.producer();
    }

    @AfterEach
    void stop() {
        for (DefaultMQPushConsumer consumer : consumers) {
            consumer.shutdown();
        }
        producer.shutdown();
    }

    /** A started consumer of `group` that records the bodies it consumes. */
    private DefaultMQPushConsumer consumer(String group, String topic, String model, List<String> got)
        throws Exception {
        DefaultMQPushConsumer consumer = Compat.pushConsumer(group);
        setMessageModel(consumer, model);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                got.add(Compat.body(message));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        consumers.add(consumer);
        return consumer;
    }

    /**
     * MessageModel moved from org.apache.rocketmq.common.protocol.heartbeat (4.9.x) to
     * org.apache.rocketmq.remoting.protocol.heartbeat (5.x): set it by name.
     */
    @SuppressWarnings({"unchecked", "rawtypes"})
    private static void setMessageModel(DefaultMQPushConsumer consumer, String model) throws Exception {
        Class type = DefaultMQPushConsumer.class.getMethod("getMessageModel").getReturnType();
        Object value = Enum.valueOf(type, model);
        DefaultMQPushConsumer.class.getMethod("setMessageModel", type).invoke(consumer, value);
    }

    /**
     * Waits until the consumer's rebalance has given it `queues` queues of the topic. The table
     * also holds a clustering group's retry queue, and a queue given up is marked dropped before
     * it leaves.
     */
    private static void waitForQueues(DefaultMQPushConsumer consumer, String topic, int queues) {
        Compat.waitUntil(queues + " queues of " + topic + " assigned", WAIT, () -> consumer
            .getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().entrySet().stream()
            .filter(entry -> entry.getKey().getTopic().equals(topic) && !entry.getValue().isDropped())
            .count() == queues);
    }

    private Set<String> sendAll(String topic) throws Exception {
        Set<String> sent = new HashSet<>();
        for (int i = 0; i < MESSAGES; i++) {
            String body = "m-" + i;
            producer.send(new Message(topic, body.getBytes(UTF_8)));
            sent.add(body);
        }
        return sent;
    }

    @Test
    void everyBroadcastingConsumerGetsEveryMessage() throws Exception {
        String topic = Compat.createTopic(producer, "broadcast", QUEUES);
        String group = Compat.unique("broadcasters");
        List<String> first = new CopyOnWriteArrayList<>();
        List<String> second = new CopyOnWriteArrayList<>();
        waitForQueues(consumer(group, topic, "BROADCASTING", first), topic, QUEUES);
        waitForQueues(consumer(group, topic, "BROADCASTING", second), topic, QUEUES);
        Set<String> sent = sendAll(topic);

        Compat.waitUntil("both consumers got all " + MESSAGES, WAIT,
            () -> new HashSet<>(first).equals(sent) && new HashSet<>(second).equals(sent));
        assertEquals(MESSAGES, first.size(), "each message once: " + first);
        assertEquals(MESSAGES, second.size(), "each message once: " + second);
    }

    @Test
    void clusteringConsumersSplitTheMessagesBetweenThem() throws Exception {
        String topic = Compat.createTopic(producer, "clustering", QUEUES);
        String group = Compat.unique("clusterers");
        List<String> first = new CopyOnWriteArrayList<>();
        List<String> second = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer a = consumer(group, topic, "CLUSTERING", first);
        DefaultMQPushConsumer b = consumer(group, topic, "CLUSTERING", second);
        // Each holds one queue once both have rebalanced with the other in the group.
        waitForQueues(a, topic, 1);
        waitForQueues(b, topic, 1);
        Set<String> sent = sendAll(topic);

        Set<String> union = ConcurrentHashMap.newKeySet();
        Compat.waitUntil("the group got all " + MESSAGES, WAIT, () -> {
            union.addAll(first);
            union.addAll(second);
            return union.equals(sent);
        });
        assertFalse(first.isEmpty(), "both consumers get a share");
        assertFalse(second.isEmpty(), "both consumers get a share");
        assertEquals(MESSAGES, first.size() + second.size(), "no message to both: " + first + " " + second);
        Set<String> both = new HashSet<>(first);
        both.retainAll(second);
        assertTrue(both.isEmpty(), "delivered to both: " + both);
    }
}
