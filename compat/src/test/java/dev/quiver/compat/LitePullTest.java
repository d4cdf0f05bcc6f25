package dev.quiver.compat;

import static dev.quiver.compat.Compat.WAIT;
import static dev.quiver.compat.Compat.body;
import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** DefaultLitePullConsumer: subscribe, and assign with seek to an offset, begin, end and time. */
@Timeout(120)
class LitePullTest {
    private DefaultMQProducer producer;
    private DefaultLitePullConsumer consumer;

    @BeforeEach
    void start() throws Exception {
        producer = Compat.producer();
    }

    @AfterEach
    void stop() {
        if (consumer != null) {
            consumer.shutdown();
        }
        producer.shutdown();
    }

    private void send(String topic, int queueId, String body) throws Exception {
        Message message = new Message(topic, "TagL", "key-" + body, body.getBytes(UTF_8));
        message.putUserProperty("kind", "lite");
        producer.send(message, (queues, msg, arg) -> queues.get(queueId), null);
    }

    private List<MessageExt> pollUntil(int count) {
        List<MessageExt> got = new ArrayList<>();
        Compat.waitUntil(count + " messages", WAIT, () -> {
            got.addAll(consumer.poll(200));
            return got.size() >= count;
        });
        return got;
    }

    private static List<String> bodies(List<MessageExt> messages) {
        List<String> bodies = new ArrayList<>();
        for (MessageExt message : messages) {
            bodies.add(body(message));
        }
        return bodies;
    }

    private static List<String> range(int from, int to) {
        List<String> bodies = new ArrayList<>();
        for (int i = from; i < to; i++) {
            bodies.add("m" + i);
        }
        return bodies;
    }

    @Test
    void subscribeReceivesEveryQueue() throws Exception {
        String topic = Compat.createTopic(producer, "litesub", 3);
        for (int i = 0; i < 12; i++) {
            send(topic, i % 3, "m" + i);
        }
        consumer = Compat.litePullConsumer(Compat.unique("litesub"));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "TagL");
        consumer.start();
        Map<String, MessageExt> got = new HashMap<>();
        for (MessageExt message : pollUntil(12)) {
            got.put(body(message), message);
        }
        assertEquals(12, got.size());
        for (int i = 0; i < 12; i++) {
            MessageExt message = got.get("m" + i);
            assertEquals("key-m" + i, message.getKeys());
            assertEquals("TagL", message.getTags());
            assertEquals("lite", message.getUserProperty("kind"));
            assertEquals(i % 3, message.getQueueId());
            assertEquals(i / 3, message.getQueueOffset());
        }
    }

    @Test
    void assignSeeksToOffsetTimestampBeginAndEnd() throws Exception {
        String topic = Compat.createTopic(producer, "liteseek", 2);
        for (int i = 0; i < 5; i++) {
            send(topic, 1, "m" + i);
        }
        // A timestamp strictly between the store times of m4 and m5.
        long between = System.currentTimeMillis() + 1;
        Compat.waitUntil("the clock to pass the boundary", WAIT, () -> System.currentTimeMillis() > between);
        for (int i = 5; i < 10; i++) {
            send(topic, 1, "m" + i);
        }
        consumer = Compat.litePullConsumer(Compat.unique("liteseek"));
        consumer.start();
        MessageQueue queue = null;
        for (MessageQueue candidate : consumer.fetchMessageQueues(topic)) {
            if (candidate.getQueueId() == 1) {
                queue = candidate;
            }
        }
        consumer.assign(List.of(queue));

        assertEquals(5L, consumer.offsetForTimestamp(queue, between));
        consumer.seek(queue, consumer.offsetForTimestamp(queue, between));
        assertEquals(range(5, 10), bodies(pollUntil(5)));

        consumer.seekToBegin(queue);
        List<MessageExt> all = pollUntil(10);
        assertEquals(range(0, 10), bodies(all));
        for (int i = 0; i < 10; i++) {
            assertEquals(i, all.get(i).getQueueOffset());
            assertEquals("key-m" + i, all.get(i).getKeys());
        }

        consumer.seek(queue, 7);
        assertEquals(range(7, 10), bodies(pollUntil(3)));

        consumer.seekToEnd(queue);
        assertTrue(consumer.poll(1000).isEmpty(), "nothing after the end");
        send(topic, 1, "m10");
        List<MessageExt> tail = pollUntil(1);
        assertEquals(List.of("m10"), bodies(tail));
        assertEquals(10, tail.get(0).getQueueOffset());
    }
}
