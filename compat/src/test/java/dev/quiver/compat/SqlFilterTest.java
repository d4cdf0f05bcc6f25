package dev.quiver.compat;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Optional;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * SQL92 subscriptions (`MessageSelector.bySql`, with `enablePropertyFilter=true` in the broker's
 * conf): push, lite pull and pop consumers get exactly the messages the expression selects out
 * of a mix, and a consumer with an expression the broker cannot parse fails to start (the client
 * asks the broker with CHECK_CLIENT_CONFIG).
 */
@Timeout(180)
class SqlFilterTest {
    private static final String SELECTOR = "a BETWEEN 3 AND 8 AND TAGS IN ('A', 'B')";
    /** Of `sendMix`'s messages, those SELECTOR takes; "end" is sent last and is taken too. */
    private static final Set<String> SELECTED = new TreeSet<>(Set.of("m3", "m4", "m6", "m7", "end"));
    /** How long to wait, once everything selected has come, for anything else to come. */
    private static final Duration SETTLE = Duration.ofSeconds(2);

    private DefaultMQProducer producer;

    @BeforeEach
    void start() throws Exception {
        producer = Compat.producer();
    }

    @AfterEach
    void stop() {
        producer.shutdown();
    }

    private void send(String topic, String key, String tags, String a) throws Exception {
        Message message = new Message(topic, tags, key, key.getBytes(UTF_8));
        if (a != null) {
            message.putUserProperty("a", a);
        }
        assertEquals(SendStatus.SEND_OK, producer.send(message).getSendStatus());
    }

    /**
     * m0..m11 with tags A, B, C in turn and `a` = their number; a message with no `a`, one whose
     * `a` is not a number (its evaluation fails: not selected), then "end".
     */
    private void sendMix(String topic) throws Exception {
        for (int i = 0; i < 12; i++) {
            send(topic, "m" + i, new String[] {"A", "B", "C"}[i % 3], Integer.toString(i));
        }
        send(topic, "no-a", "A", null);
        send(topic, "not-a-number", "A", "four");
        send(topic, "end", "A", "5");
    }

    /** Waits for every selected message, then a moment more for any that should not come. */
    private static void assertExactlySelected(Set<String> got) throws InterruptedException {
        Compat.waitUntil("the selected messages " + SELECTED, Compat.WAIT, () -> got.containsAll(SELECTED));
        Thread.sleep(SETTLE.toMillis());
        assertEquals(SELECTED, new TreeSet<>(got));
    }

    private static DefaultMQPushConsumer listening(DefaultMQPushConsumer consumer, Set<String> got) {
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                got.add(message.getKeys());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        return consumer;
    }

    @Test
    void aPushConsumerGetsExactlyTheSelectedMessages() throws Exception {
        String topic = Compat.createTopic(producer, "sql_push", 1);
        sendMix(topic);
        Set<String> got = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer = listening(Compat.pushConsumer(Compat.unique("sql_push_group")), got);
        consumer.subscribe(topic, MessageSelector.bySql(SELECTOR));
        consumer.start();
        try {
            assertExactlySelected(got);
        } finally {
            consumer.shutdown();
        }
    }

    @Test
    void aLitePullConsumerGetsExactlyTheSelectedMessages() throws Exception {
        String topic = Compat.createTopic(producer, "sql_lite", 1);
        sendMix(topic);
        Set<String> got = ConcurrentHashMap.newKeySet();
        DefaultLitePullConsumer consumer = Compat.litePullConsumer(Compat.unique("sql_lite_group"));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, MessageSelector.bySql(SELECTOR));
        consumer.start();
        try {
            long deadline = System.nanoTime() + Compat.WAIT.toNanos();
            while (!got.containsAll(SELECTED) && System.nanoTime() < deadline) {
                consumer.poll().forEach(message -> got.add(message.getKeys()));
            }
            long settle = System.nanoTime() + SETTLE.toNanos();
            while (System.nanoTime() < settle) {
                consumer.poll().forEach(message -> got.add(message.getKeys()));
            }
            assertEquals(SELECTED, new TreeSet<>(got));
        } finally {
            consumer.shutdown();
        }
    }

    /** Pop needs a RocketMQ 5 client and mqadmin's setConsumeMode: the "tools" group. */
    @Test
    @Tag("tools")
    void aPopConsumerGetsExactlyTheSelectedMessages() throws Exception {
        Compat.waitFor("broker-a in clusterList", Compat.WAIT, () -> {
            try {
                return Optional.of(Tools.mqadmin("clusterList")).filter(out -> out.contains("broker-a"));
            } catch (Exception e) {
                throw new AssertionError(e);
            }
        });
        String topic = Compat.createTopic(producer, "sql_pop", 1);
        String group = Compat.unique("sql_pop_group");
        String set = Tools.mqadmin("setConsumeMode", "-c", "DefaultCluster", "-t", topic, "-g", group, "-m", "POP", "-q", "0");
        assertTrue(set.contains("success"), set);
        sendMix(topic);
        Set<String> got = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer = listening(Compat.pushConsumer(group), got);
        // RocketMQ 5 pops only when the broker assigns the queues (QUERY_ASSIGNMENT). By name:
        // the method is 5.x's, and this file also compiles against 4.9.7 (which skips the test).
        DefaultMQPushConsumer.class.getMethod("setClientRebalance", boolean.class).invoke(consumer, false);
        consumer.subscribe(topic, MessageSelector.bySql(SELECTOR));
        consumer.start();
        try {
            assertExactlySelected(got);
        } finally {
            consumer.shutdown();
        }
    }

    @Test
    void aLitePullConsumerWithABadExpressionFailsToStart() throws Exception {
        String topic = Compat.createTopic(producer, "sql_bad_lite", 1);
        DefaultLitePullConsumer consumer = Compat.litePullConsumer(Compat.unique("sql_bad_lite_group"));
        // RocketMQ refuses 0.0 as a literal (below Double.MIN_VALUE).
        consumer.subscribe(topic, MessageSelector.bySql("a > 0.0"));
        try {
            MQClientException refused = assertThrows(MQClientException.class, consumer::start);
            assertEquals(23, refused.getResponseCode(), refused.toString());
            System.out.printf("bad SQL92 expression refused: %s%n", refused.getErrorMessage());
        } finally {
            try {
                consumer.shutdown();
            } catch (RuntimeException ignored) {
                // A consumer that failed to start may refuse to shut down as well.
            }
        }
    }

    @Test
    void aPushConsumerWithABadExpressionFailsToStart() throws Exception {
        String topic = Compat.createTopic(producer, "sql_bad", 1);
        DefaultMQPushConsumer consumer = listening(Compat.pushConsumer(Compat.unique("sql_bad_group")),
            ConcurrentHashMap.newKeySet());
        // RocketMQ's grammar has `<>` and no `!=`.
        consumer.subscribe(topic, MessageSelector.bySql("a != 3"));
        try {
            MQClientException refused = assertThrows(MQClientException.class, consumer::start);
            // SUBSCRIPTION_PARSE_FAILED, from CHECK_CLIENT_CONFIG.
            assertEquals(23, refused.getResponseCode(), refused.toString());
            System.out.printf("bad SQL92 expression refused: %s%n", refused.getErrorMessage());
        } finally {
            try {
                consumer.shutdown();
            } catch (RuntimeException ignored) {
                // A consumer that failed to start may refuse to shut down as well.
            }
        }
    }
}
