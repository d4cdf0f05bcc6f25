package dev.quiver.compat;

import static dev.quiver.compat.Compat.WAIT;
import static dev.quiver.compat.Compat.body;
import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * DefaultMQPushConsumer: tag filters, retry through CONSUMER_SEND_MSG_BACK and the dead-letter
 * topic, delayed messages, orderly consumption with queue locks.
 *
 * <p>compat/run.sh starts the server with messageDelayLevel "1s 2s 1s 1s ...", so level 2 waits
 * 2 s and the automatic retry levels (3 + reconsume times) wait 1 s each.
 */
@Timeout(180)
class PushConsumerTest {
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

    private DefaultMQPushConsumer consumer(String group, String topic, String expression) throws Exception {
        DefaultMQPushConsumer consumer = Compat.pushConsumer(group);
        consumer.subscribe(topic, expression);
        consumers.add(consumer);
        return consumer;
    }

    private static Message message(String topic, String tag, String key, String body) {
        Message message = new Message(topic, tag, key, body.getBytes(UTF_8));
        message.putUserProperty("origin", "compat");
        return message;
    }

    @Test
    void tagFilterDeliversOnlyTheChosenTags() throws Exception {
        String topic = Compat.createTopic(producer, "tags", 1);
        Set<String> expected = new HashSet<>();
        String[] tags = {"TagA", "TagB", "TagC"};
        for (int i = 0; i < 15; i++) {
            String tag = tags[i % 3];
            producer.send(message(topic, tag, "k" + i, tag + "-" + i));
            if (!tag.equals("TagC")) {
                expected.add(tag + "-" + i);
            }
        }
        producer.send(message(topic, "TagA", "end", "end"));
        Map<String, MessageExt> got = new ConcurrentHashMap<>();
        DefaultMQPushConsumer consumer = consumer(Compat.unique("tags"), topic, "TagA || TagB");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                got.put(body(message), message);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        // The queue is consumed in order, so every TagC message lies before "end" and would
        // have been delivered by the time it is.
        Compat.waitUntil("all TagA/TagB messages", WAIT, () -> got.keySet().containsAll(expected) && got.containsKey("end"));
        expected.add("end");
        assertEquals(expected, got.keySet());
        for (MessageExt message : got.values()) {
            assertTrue(message.getTags().equals("TagA") || message.getTags().equals("TagB"));
            assertEquals("compat", message.getUserProperty("origin"));
            assertEquals(topic, message.getTopic());
        }
    }

    /** One delivery as the listener saw it. */
    private record Delivery(String body, String topic, String keys, String tags, String origin, String msgId,
                            int reconsumeTimes, long atMillis) {
        static Delivery of(MessageExt message) {
            return new Delivery(Compat.body(message), message.getTopic(), message.getKeys(), message.getTags(),
                message.getUserProperty("origin"), message.getMsgId(), message.getReconsumeTimes(),
                System.currentTimeMillis());
        }
    }

    @Test
    void reconsumeLaterRetriesWithDelaysThenGoesToTheDeadLetterTopic() throws Exception {
        String topic = Compat.createTopic(producer, "retry", 1);
        String group = Compat.unique("retry");
        String failId = producer.send(message(topic, "TagA", "fail-key", "fail")).getMsgId();
        producer.send(message(topic, "TagB", "ok-key", "ok"));
        List<Delivery> deliveries = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer consumer = consumer(group, topic, "*");
        consumer.setMaxReconsumeTimes(2);
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            boolean fail = false;
            for (MessageExt message : messages) {
                deliveries.add(Delivery.of(message));
                fail |= body(message).equals("fail");
            }
            return fail ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        Compat.waitUntil("three deliveries of the failing message", WAIT,
            () -> deliveries.stream().filter(d -> d.body().equals("fail")).count() >= 3);

        List<MessageExt> dead = Compat.readTopic("%DLQ%" + group, 1);
        assertEquals(1, dead.size());
        MessageExt deadMessage = dead.get(0);
        assertEquals("fail", body(deadMessage));
        assertEquals("fail-key", deadMessage.getKeys());
        assertEquals("TagA", deadMessage.getTags());
        assertEquals("compat", deadMessage.getUserProperty("origin"));
        assertEquals(failId, deadMessage.getMsgId());
        assertEquals(3, deadMessage.getReconsumeTimes());
        assertEquals(topic, deadMessage.getProperty("RETRY_TOPIC"));

        List<Delivery> fails = deliveries.stream().filter(d -> d.body().equals("fail")).toList();
        assertEquals(3, fails.size(), "no delivery after the message went to the DLQ: " + fails);
        for (int i = 0; i < 3; i++) {
            Delivery delivery = fails.get(i);
            assertEquals(i, delivery.reconsumeTimes());
            assertEquals(topic, delivery.topic(), "the client restores the original topic");
            assertEquals("fail-key", delivery.keys());
            assertEquals("TagA", delivery.tags());
            assertEquals("compat", delivery.origin());
            assertEquals(failId, delivery.msgId());
            if (i > 0) {
                long gap = delivery.atMillis() - fails.get(i - 1).atMillis();
                assertTrue(gap >= 1000, "retry " + i + " came " + gap + " ms after the previous delivery");
            }
        }
        List<Delivery> oks = deliveries.stream().filter(d -> d.body().equals("ok")).toList();
        assertEquals(1, oks.size());
        assertEquals(0, oks.get(0).reconsumeTimes());
    }

    @Test
    void delayedMessagesArriveAfterTheirDelayNotBefore() throws Exception {
        String topic = Compat.createTopic(producer, "delay", 2);
        Map<String, Delivery> got = new ConcurrentHashMap<>();
        Map<String, MessageExt> raw = new ConcurrentHashMap<>();
        DefaultMQPushConsumer consumer = consumer(Compat.unique("delay"), topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                got.put(body(message), Delivery.of(message));
                raw.put(body(message), message);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        Compat.waitUntil("consumer subscribed", WAIT, () -> !consumer.getDefaultMQPushConsumerImpl()
            .getRebalanceImpl().getProcessQueueTable().isEmpty());

        Message delayed = message(topic, "TagD", "delayed-key", "delayed");
        delayed.setDelayTimeLevel(2);
        long sentAt = System.currentTimeMillis();
        assertEquals(SendStatus.SEND_OK, producer.send(delayed).getSendStatus());
        producer.send(message(topic, "TagN", "now-key", "now"));
        Compat.waitUntil("the undelayed message", WAIT, () -> got.containsKey("now"));
        assertFalse(got.containsKey("delayed"), "the delayed message came before the undelayed one");
        Compat.waitUntil("the delayed message", WAIT, () -> got.containsKey("delayed"));

        Delivery delivery = got.get("delayed");
        assertTrue(delivery.atMillis() - sentAt >= 2000, "delivered " + (delivery.atMillis() - sentAt) + " ms after sending");
        assertEquals(topic, delivery.topic());
        assertEquals("delayed-key", delivery.keys());
        assertEquals("TagD", delivery.tags());
        assertEquals("compat", delivery.origin());
        MessageExt message = raw.get("delayed");
        assertTrue(message.getStoreTimestamp() - message.getBornTimestamp() >= 2000,
            "stored for delivery " + (message.getStoreTimestamp() - message.getBornTimestamp()) + " ms after birth");
    }

    @Test
    void orderlyConsumerSeesEachShardingKeyInSendOrder() throws Exception {
        String topic = Compat.createTopic(producer, "orderly", 4);
        String[] orders = {"order-a", "order-b", "order-c", "order-d", "order-e"};
        int steps = 12;
        Map<String, Integer> queueOfOrder = new ConcurrentHashMap<>();
        for (int step = 0; step < steps; step++) {
            for (String order : orders) {
                Message message = message(topic, "TagO", order, order + ":" + step);
                int queueId = producer.send(message, (queues, msg, key) -> {
                    int index = Math.floorMod(key.hashCode(), queues.size());
                    return queues.get(index);
                }, order).getMessageQueue().getQueueId();
                queueOfOrder.merge(order, queueId, (a, b) -> {
                    assertEquals(a, b, "one queue per sharding key");
                    return a;
                });
            }
        }
        Map<String, List<Integer>> seen = new ConcurrentHashMap<>();
        DefaultMQPushConsumer consumer = consumer(Compat.unique("orderly"), topic, "*");
        consumer.registerMessageListener((MessageListenerOrderly) (messages, context) -> {
            for (MessageExt message : messages) {
                String[] parts = body(message).split(":");
                seen.computeIfAbsent(parts[0], k -> new CopyOnWriteArrayList<>()).add(Integer.parseInt(parts[1]));
                assertEquals((int) queueOfOrder.get(parts[0]), message.getQueueId());
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        consumer.start();
        Compat.waitUntil("every step of every order", WAIT,
            () -> seen.values().stream().mapToInt(List::size).sum() >= orders.length * steps);
        List<Integer> inOrder = new ArrayList<>();
        for (int step = 0; step < steps; step++) {
            inOrder.add(step);
        }
        for (String order : orders) {
            assertEquals(inOrder, seen.get(order), order);
        }
    }

    private static Set<Integer> assignedQueues(DefaultMQPushConsumer consumer, String topic) {
        Set<Integer> ids = new HashSet<>();
        for (MessageQueue queue : consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
            if (queue.getTopic().equals(topic)) {
                ids.add(queue.getQueueId());
            }
        }
        return ids;
    }

    private DefaultMQPushConsumer recording(String group, String topic, Map<String, Integer> queueByBody) throws Exception {
        DefaultMQPushConsumer consumer = consumer(group, topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                queueByBody.put(body(message), message.getQueueId());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        return consumer;
    }

    private void sendRound(String topic, String prefix, int count) throws Exception {
        for (int i = 0; i < count; i++) {
            producer.send(message(topic, "TagA", prefix + i, prefix + i),
                (queues, msg, arg) -> queues.get((Integer) arg % queues.size()), i);
        }
    }

    private static Set<String> bodies(String prefix, int count) {
        Set<String> all = new HashSet<>();
        for (int i = 0; i < count; i++) {
            all.add(prefix + i);
        }
        return all;
    }

    @Test
    void twoConsumersSplitTheQueuesAndTheSurvivorTakesOverWithoutLoss() throws Exception {
        String topic = Compat.createTopic(producer, "split", 4);
        String group = Compat.unique("split");
        Map<String, Integer> gotA = new ConcurrentHashMap<>();
        Map<String, Integer> gotB = new ConcurrentHashMap<>();
        DefaultMQPushConsumer a = recording(group, topic, gotA);
        DefaultMQPushConsumer b = recording(group, topic, gotB);
        Compat.waitUntil("two queues each", WAIT,
            () -> assignedQueues(a, topic).size() == 2 && assignedQueues(b, topic).size() == 2);
        Set<Integer> queuesOfA = assignedQueues(a, topic);
        Set<Integer> queuesOfB = assignedQueues(b, topic);
        assertTrue(java.util.Collections.disjoint(queuesOfA, queuesOfB), queuesOfA + " vs " + queuesOfB);

        sendRound(topic, "first-", 40);
        Set<String> first = bodies("first-", 40);
        Compat.waitUntil("the first 40 messages", WAIT, () -> {
            Set<String> union = new HashSet<>(gotA.keySet());
            union.addAll(gotB.keySet());
            return union.containsAll(first);
        });
        assertEquals(20, gotA.size());
        assertEquals(20, gotB.size());
        assertTrue(queuesOfA.containsAll(gotA.values()), "A consumed only its queues");
        assertTrue(queuesOfB.containsAll(gotB.values()), "B consumed only its queues");

        b.shutdown();
        consumers.remove(b);
        Compat.waitUntil("A takes every queue", WAIT, () -> assignedQueues(a, topic).size() == 4);
        sendRound(topic, "second-", 40);
        Set<String> second = bodies("second-", 40);
        Compat.waitUntil("the second 40 messages", WAIT, () -> gotA.keySet().containsAll(second));
        Set<Integer> queuesSeen = new HashSet<>();
        for (String body : second) {
            queuesSeen.add(gotA.get(body));
        }
        assertEquals(Set.of(0, 1, 2, 3), queuesSeen);
    }

    @Test
    void committedOffsetsSurviveAConsumerRestart() throws Exception {
        String topic = Compat.createTopic(producer, "restart", 2);
        String group = Compat.unique("restart");
        sendRound(topic, "before-", 20);
        Map<String, Integer> first = new ConcurrentHashMap<>();
        DefaultMQPushConsumer consumer = recording(group, topic, first);
        Compat.waitUntil("the first 20", WAIT, () -> first.keySet().containsAll(bodies("before-", 20)));
        consumer.shutdown();
        consumers.remove(consumer);

        sendRound(topic, "after-", 20);
        Map<String, Integer> second = new ConcurrentHashMap<>();
        recording(group, topic, second);
        Compat.waitUntil("the next 20", WAIT, () -> second.keySet().containsAll(bodies("after-", 20)));
        assertEquals(bodies("after-", 20), second.keySet(), "the restarted consumer resumed at its offsets");
    }
}
