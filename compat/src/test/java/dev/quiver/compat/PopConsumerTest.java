package dev.quiver.compat;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Seed 004's scenario with the unchanged Java client 5.5.0: a topic of 2 queues, two consumers
 * of one group with one consume thread each, and a message whose listener blocks for up to
 * 30 s. With push (clustering) each consumer owns a queue, and the messages behind the slow one
 * in its queue wait for it. With the group switched to pop (`mqadmin setConsumeMode -m POP`,
 * and the client's `clientRebalance=false`, as RocketMQ 5 needs) the other consumer pops them
 * meanwhile. Then a message that is not acknowledged comes back with its reconsume count raised,
 * and `mqadmin resetOffsetByTime` rewinds a pop group as it rewinds a push group.
 */
@Tag("tools")
@Timeout(240)
class PopConsumerTest {
    private static final Duration BLOCK = Duration.ofSeconds(30);
    private DefaultMQProducer producer;
    private final List<DefaultMQPushConsumer> consumers = new ArrayList<>();
    private final CountDownLatch release = new CountDownLatch(1);
    /** Who consumed each key, from which queue, and when: printed when an assertion fails. */
    private final Map<String, String> seen = new ConcurrentHashMap<>();
    private final long started = System.nanoTime();

    @BeforeEach
    void start() throws Exception {
        producer = Compat.producer();
    }

    @AfterEach
    void stop() {
        release.countDown();
        consumers.forEach(DefaultMQPushConsumer::shutdown);
        producer.shutdown();
    }

    private static String mqadminUntil(String what, java.util.function.Predicate<String> ready, String... args) {
        return Compat.waitFor(what, Duration.ofSeconds(60), () -> {
            try {
                String output = Tools.mqadmin(args);
                return ready.test(output) ? Optional.of(output) : Optional.empty();
            } catch (Exception e) {
                throw new AssertionError(e);
            }
        });
    }

    /** A new group of `prefix`, switched to pop for `topic` with mqadmin, as seed 004 does. */
    private static String popGroup(String topic, String prefix) throws Exception {
        mqadminUntil("broker-a in clusterList", out -> out.contains("broker-a"), "clusterList");
        String group = Compat.unique(prefix);
        String set = Tools.mqadmin("setConsumeMode", "-c", "DefaultCluster", "-t", topic, "-g", group, "-m", "POP", "-q", "0");
        assertTrue(set.contains("success"), set);
        return group;
    }

    /** A consumer with one consume thread; "slow" blocks it until `release` (at most 30 s). */
    private DefaultMQPushConsumer consumer(String group, String topic, boolean pop, Map<String, Integer> got,
                                           CountDownLatch slowStarted, CountDownLatch release) throws Exception {
        DefaultMQPushConsumer consumer = Compat.pushConsumer(group);
        consumer.setConsumeThreadMin(1);
        consumer.setConsumeThreadMax(1);
        consumer.setConsumeMessageBatchMaxSize(1);
        if (pop) {
            // RocketMQ 5 pops only when the broker assigns the queues (QUERY_ASSIGNMENT).
            consumer.setClientRebalance(false);
            // One message at a time, and no more cached while one is being consumed.
            consumer.setPopBatchNums(1);
            consumer.setPopThresholdForQueue(1);
        }
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                String key = message.getKeys();
                if (key.equals("slow")) {
                    slowStarted.countDown();
                    try {
                        release.await(BLOCK.toMillis(), TimeUnit.MILLISECONDS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }
                got.merge(key, 1, Integer::sum);
                seen.put(key, consumer.getInstanceName() + " q" + message.getQueueId() + " at "
                    + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started) + " ms");
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumers.add(consumer);
        consumer.start();
        return consumer;
    }

    /** "slow" then 9 more on queue 0, and 10 on queue 1. */
    private void sendBatch(String topic) throws Exception {
        SendResult slow = producer.send(new Message(topic, "T", "slow", "slow".getBytes(UTF_8)), new MessageQueue(topic, "broker-a", 0));
        assertEquals(SendStatus.SEND_OK, slow.getSendStatus());
        for (int i = 0; i < 10; i++) {
            for (int queue = 0; queue < 2; queue++) {
                if (queue == 0 && i == 9) {
                    continue;
                }
                String key = "q" + queue + "-" + i;
                SendResult sent = producer.send(new Message(topic, "T", key, key.getBytes(UTF_8)), new MessageQueue(topic, "broker-a", queue));
                assertEquals(SendStatus.SEND_OK, sent.getSendStatus());
            }
        }
    }

    /** Queues of `topic` the consumer pulls (its group's retry topic left out). */
    private static long ownedQueues(DefaultMQPushConsumer consumer, String topic) {
        return consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet().stream()
            .filter(queue -> queue.getTopic().equals(topic)).count();
    }

    private static Set<String> keys(String prefix, int count) {
        Set<String> keys = new TreeSet<>();
        for (int i = 0; i < count; i++) {
            keys.add(prefix + i);
        }
        return keys;
    }

    @Test
    void withPushTheQueueBehindASlowMessageWaits() throws Exception {
        String topic = Compat.createTopic(producer, "seed004_push", 2);
        String group = Compat.unique("push_group");
        Map<String, Integer> got = new ConcurrentHashMap<>();
        CountDownLatch slowStarted = new CountDownLatch(1);
        DefaultMQPushConsumer first = consumer(group, topic, false, got, slowStarted, release);
        DefaultMQPushConsumer second = consumer(group, topic, false, got, slowStarted, release);
        Compat.waitUntil("each push consumer to own one queue", Compat.WAIT, () ->
            ownedQueues(first, topic) == 1 && ownedQueues(second, topic) == 1);
        // A consumer's first pulls after the rebalance carry its new subscription version, and
        // the heartbeat that tells the broker of it is skipped when the client's scheduled one
        // holds the heartbeat lock at that moment: every broker, RocketMQ's too, then answers
        // SUBSCRIPTION_NOT_LATEST until the next heartbeat, up to 30 s later. One message per
        // queue, consumed, shows both consumers pull before the scenario starts.
        for (int queue = 0; queue < 2; queue++) {
            SendResult sent = producer.send(new Message(topic, "T", "warm-" + queue, "warm".getBytes(UTF_8)),
                new MessageQueue(topic, "broker-a", queue));
            assertEquals(SendStatus.SEND_OK, sent.getSendStatus());
        }
        Compat.waitUntil("a first message consumed from each queue", Duration.ofSeconds(90),
            () -> got.containsKey("warm-0") && got.containsKey("warm-1"));
        sendBatch(topic);
        assertTrue(slowStarted.await(60, TimeUnit.SECONDS), "the slow message reached a listener");
        Compat.waitUntil("queue 1 consumed", Compat.WAIT, () -> got.keySet().containsAll(keys("q1-", 10)));
        // The slow message's consumer has one thread, blocked in it: what is behind it waits.
        Set<String> behindSlow = new TreeSet<>(keys("q0-", 9));
        behindSlow.retainAll(got.keySet());
        assertEquals(Set.of(), behindSlow, "with push, queue 0 waits behind the slow message; consumed: "
            + new java.util.TreeMap<>(seen) + "; queues owned now: " + first.getInstanceName() + " "
            + ownedQueues(first, topic) + ", " + second.getInstanceName() + " " + ownedQueues(second, topic));
        release.countDown();
        Compat.waitUntil("queue 0 after the slow message", Compat.WAIT, () -> got.keySet().containsAll(keys("q0-", 9)));
    }

    @Test
    void withPopTheOtherConsumerTakesWhatIsBehindASlowMessage() throws Exception {
        String topic = Compat.createTopic(producer, "seed004_pop", 2);
        String group = popGroup(topic, "pop_group");
        Map<String, Integer> got = new ConcurrentHashMap<>();
        CountDownLatch slowStarted = new CountDownLatch(1);
        consumer(group, topic, true, got, slowStarted, release);
        consumer(group, topic, true, got, slowStarted, release);
        sendBatch(topic);
        assertTrue(slowStarted.await(60, TimeUnit.SECONDS), "the slow message reached a listener");
        long slowSince = System.nanoTime();
        // The slow message's consumer may have taken one more before it blocked (the client
        // pops again while its cache holds no more than popThresholdForQueue, here 1), from
        // either queue: every other message but that one is consumed by the other consumer
        // meanwhile, so at least 8 of queue 0's 9 behind the slow one.
        Set<String> others = keys("q0-", 9);
        others.addAll(keys("q1-", 10));
        try {
            Compat.waitUntil("the messages behind the slow one, while it blocks", Duration.ofSeconds(25),
                () -> others.stream().filter(got::containsKey).count() >= others.size() - 1);
        } catch (AssertionError e) {
            throw new AssertionError(e.getMessage() + "; consumed: " + got, e);
        }
        assertTrue(!got.containsKey("slow"), "the slow message was still being consumed");
        System.out.printf("pop: %d other messages were consumed within %d ms of the slow one starting%n",
            got.size(), TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - slowSince));
        release.countDown();
        // The slow message's consumer consumes the one it held back only after the slow one
        // returns, on the same thread: wait for both.
        Compat.waitUntil("the slow message and the one held behind it consumed", Compat.WAIT,
            () -> got.size() == 20);
        Set<String> all = new TreeSet<>(keys("q0-", 9));
        all.addAll(keys("q1-", 10));
        all.add("slow");
        assertEquals(all, got.keySet(), got.toString());
    }

    @Test
    void anUnacknowledgedPoppedMessageComesBackWithItsReconsumeCountRaised() throws Exception {
        String topic = Compat.createTopic(producer, "pop_retry", 1);
        String group = popGroup(topic, "pop_retry_group");
        Map<Integer, String> attempts = new ConcurrentHashMap<>();
        DefaultMQPushConsumer consumer = Compat.pushConsumer(group);
        consumer.setClientRebalance(false);
        consumer.setPopInvisibleTime(5_000);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                attempts.put(message.getReconsumeTimes(), message.getTopic() + "/" + Compat.body(message));
            }
            // Fails the first time, without asking for a later time: it comes back when its
            // invisible time runs out; succeeds after.
            return messages.get(0).getReconsumeTimes() == 0 ? ConsumeConcurrentlyStatus.RECONSUME_LATER
                : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumers.add(consumer);
        consumer.start();
        producer.send(new Message(topic, "T", "again", "try again".getBytes(UTF_8)));
        Compat.waitUntil("the message to come back", Compat.WAIT, () -> attempts.containsKey(1));
        assertEquals(topic + "/try again", attempts.get(0));
        assertEquals(topic + "/try again", attempts.get(1));
    }

    @Test
    void resetOffsetByTimeRewindsAPopGroup() throws Exception {
        String topic = Compat.createTopic(producer, "pop_reset", 1);
        String group = popGroup(topic, "pop_reset_group");
        AtomicInteger got = new AtomicInteger();
        DefaultMQPushConsumer consumer = Compat.pushConsumer(group);
        consumer.setClientRebalance(false);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            got.addAndGet(messages.size());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumers.add(consumer);
        consumer.start();
        for (int i = 0; i < 5; i++) {
            String key = "r" + i;
            SendResult sent = producer.send(new Message(topic, "T", key, key.getBytes(UTF_8)));
            assertEquals(SendStatus.SEND_OK, sent.getSendStatus());
        }
        Compat.waitUntil("the pop group consumes 5", Compat.WAIT, () -> got.get() >= 5);
        String reset = Tools.mqadmin("resetOffsetByTime", "-g", group, "-t", topic, "-s", "0");
        assertTrue(!reset.contains("Exception"), reset);
        Compat.waitUntil("the pop group gets the 5 again", Duration.ofSeconds(90), () -> got.get() >= 10);
    }
}
