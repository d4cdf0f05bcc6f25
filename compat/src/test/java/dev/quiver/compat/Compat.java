package dev.quiver.compat;

import static java.nio.charset.StandardCharsets.UTF_8;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/** Shared set-up: the server under test, unique names, clients, and polling with a deadline. */
final class Compat {
    /** Set by compat/run.sh to the name server it started. */
    static final String NAMESRV = System.getProperty("compat.namesrv", "127.0.0.1:9876");
    static final Duration WAIT = Duration.ofSeconds(60);
    /** registerNameServerPeriod of the broker run.sh starts, in seconds. */
    static final int REGISTER_INTERVAL_S = 2;
    private static final AtomicLong SEQUENCE = new AtomicLong();

    private Compat() {}

    /** A fresh topic or group name, so tests never see each other's messages. */
    static String unique(String prefix) {
        return prefix + "_" + Long.toString(System.currentTimeMillis(), 36) + "_" + SEQUENCE.incrementAndGet();
    }

    static String body(MessageExt message) {
        return new String(message.getBody(), UTF_8);
    }

    /** Polls until the supplier yields a value or the deadline passes. */
    static <T> T waitFor(String what, Duration timeout, Supplier<Optional<T>> condition) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (true) {
            Optional<T> value = condition.get();
            if (value.isPresent()) {
                return value.get();
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out after " + timeout + " waiting for " + what);
            }
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionError("interrupted waiting for " + what, e);
            }
        }
    }

    static void waitUntil(String what, Duration timeout, Supplier<Boolean> condition) {
        waitFor(what, timeout, () -> condition.get() ? Optional.of(true) : Optional.empty());
    }

    static DefaultMQProducer producer() throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(unique("producer"));
        producer.setNamesrvAddr(NAMESRV);
        producer.setInstanceName(unique("p"));
        producer.setSendMsgTimeout(10_000);
        producer.start();
        return producer;
    }

    /** Creates a topic through the client's admin API and waits until its route is served. */
    static String createTopic(DefaultMQProducer producer, String prefix, int queues) throws Exception {
        String topic = unique(prefix);
        // Right after the server starts, the TBW102 route the client asks for may still be on
        // its way to the name server: retry until the deadline.
        waitUntil("creating " + topic, WAIT, () -> {
            try {
                createTopicOnce(producer, topic, queues);
                return true;
            } catch (Exception e) {
                return false;
            }
        });
        waitUntil("route of " + topic, WAIT, () -> {
            try {
                return producer.fetchPublishMessageQueues(topic).size() == queues;
            } catch (Exception e) {
                return false;
            }
        });
        return topic;
    }

    /** 5.x added an attributes map to createTopic and dropped the 3-argument form of 4.9.x. */
    private static void createTopicOnce(DefaultMQProducer producer, String topic, int queues) throws Exception {
        try {
            DefaultMQProducer.class.getMethod("createTopic", String.class, String.class, int.class, java.util.Map.class)
                .invoke(producer, "TBW102", topic, queues, new java.util.HashMap<String, String>());
        } catch (NoSuchMethodException e) {
            DefaultMQProducer.class.getMethod("createTopic", String.class, String.class, int.class)
                .invoke(producer, "TBW102", topic, queues);
        }
    }

    static DefaultMQPushConsumer pushConsumer(String group) {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(NAMESRV);
        consumer.setInstanceName(unique("c"));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        // A new group's retry topic is created by its first heartbeat, after the client's first
        // route lookup; look routes up every second instead of every 30 s so retries start soon.
        consumer.setPollNameServerInterval(1000);
        return consumer;
    }

    static DefaultLitePullConsumer litePullConsumer(String group) {
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
        consumer.setNamesrvAddr(NAMESRV);
        consumer.setInstanceName(unique("l"));
        consumer.setAutoCommit(false);
        consumer.setPollTimeoutMillis(500);
        return consumer;
    }

    /** Reads `expected` messages from the chosen queues of a topic, from their first offset. */
    static List<MessageExt> read(String topic, int expected, QueueFilter filter) throws Exception {
        DefaultLitePullConsumer consumer = litePullConsumer(unique("reader"));
        // A new group with no offsets starts each queue at 0. No seekToBegin: with the 5.x client
        // a seek after assign interrupts a pull thread, whose call then fails and closes the
        // client's connection under the seek's own GET_MIN_OFFSET ("send request failed").
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.start();
        try {
            Collection<MessageQueue> all = waitFor("queues of " + topic, WAIT, () -> {
                try {
                    return Optional.of(consumer.fetchMessageQueues(topic));
                } catch (Exception e) {
                    return Optional.empty();
                }
            });
            List<MessageQueue> chosen = new ArrayList<>();
            for (MessageQueue queue : all) {
                if (filter.accept(queue.getQueueId())) {
                    chosen.add(queue);
                }
            }
            consumer.assign(chosen);
            List<MessageExt> got = new ArrayList<>();
            waitUntil(expected + " messages in " + topic, WAIT, () -> {
                got.addAll(consumer.poll(200));
                return got.size() >= expected;
            });
            return got;
        } finally {
            consumer.shutdown();
        }
    }

    static List<MessageExt> readTopic(String topic, int expected) throws Exception {
        return read(topic, expected, queueId -> true);
    }

    static List<MessageExt> readQueue(String topic, int queueId, int expected) throws Exception {
        return read(topic, expected, id -> id == queueId);
    }

    interface QueueFilter {
        boolean accept(int queueId);
    }
}
