package dev.quiver.compat;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A non-persistent topic made with the unchanged mqadmin (`updateTopic -a +persistence=memory`,
 * RocketMQ 5's topic attributes) looks like any topic to mqadmin and the Java client: it is
 * listed and routed, a push consumer gets what is sent with its tag filter applied, and
 * topicStatus counts it. Quiver only: Apache RocketMQ refuses an attribute it does not know.
 */
@Tag("tools")
@Timeout(180)
class NonPersistentTopicTest {
    private static final String BINARY = System.getProperty("compat.quiverBinary");
    private DefaultMQProducer producer;
    private DefaultMQPushConsumer consumer;

    @BeforeEach
    void start() throws Exception {
        Assumptions.assumeTrue(BINARY != null && !BINARY.isBlank(),
            "compat.quiverBinary is not set: non-persistent topics are Quiver's");
        producer = Compat.producer();
    }

    @AfterEach
    void stop() {
        if (consumer != null) {
            consumer.shutdown();
        }
        if (producer != null) {
            producer.shutdown();
        }
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

    @Test
    void aTopicMadeNonPersistentWithMqadminDeliversWithFiltersAndIsListed() throws Exception {
        mqadminUntil("broker-a in clusterList", out -> out.contains("broker-a"), "clusterList");
        String topic = Compat.unique("prices");
        String created = Tools.mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2",
            "-a", "+persistence=memory");
        assertTrue(created.contains("success"), created);
        assertTrue(created.contains("persistence"), "mqadmin echoes the attribute: " + created);
        mqadminUntil("topicList with " + topic, out -> out.lines().anyMatch(topic::equals), "topicList");
        String route = mqadminUntil("route of " + topic, out -> out.contains("\"perm\":6"), "topicRoute", "-t", topic);
        assertTrue(route.contains("broker-a"), route);
        Compat.waitUntil("producer sees 2 queues", Compat.WAIT, () -> {
            try {
                return producer.fetchPublishMessageQueues(topic).size() == 2;
            } catch (Exception e) {
                return false;
            }
        });

        Map<String, String> got = new ConcurrentHashMap<>();
        consumer = Compat.pushConsumer(Compat.unique("prices_group"));
        consumer.subscribe(topic, "Quote");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                got.put(message.getKeys(), Compat.body(message) + "@" + message.getTags());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        for (int i = 0; i < 20; i++) {
            String tag = i % 2 == 0 ? "Quote" : "Trade";
            SendResult sent = producer.send(new Message(topic, tag, "k" + i, ("price " + i).getBytes(UTF_8)));
            assertEquals(SendStatus.SEND_OK, sent.getSendStatus(), sent.toString());
        }
        Compat.waitUntil("the 10 quotes", Compat.WAIT, () -> got.size() >= 10);
        for (int i = 0; i < 20; i += 2) {
            assertEquals("price " + i + "@Quote", got.get("k" + i), got.toString());
        }
        assertEquals(10, got.size(), "only the Quote tag: " + got);

        String status = Tools.mqadmin("topicStatus", "-t", topic);
        Matcher row = Pattern.compile("(?m)^broker-a\\s+(\\d+)\\s+(\\d+)\\s+(\\d+)\\s").matcher(status);
        long total = 0;
        int rows = 0;
        while (row.find()) {
            rows++;
            total += Long.parseLong(row.group(3));
        }
        assertEquals(2, rows, status);
        assertEquals(20, total, "max offsets of the two queues: " + status);
        List<String> config = Tools.mqadmin("topicList").lines().toList();
        assertTrue(config.contains(topic), "listed: " + config);
    }
}
