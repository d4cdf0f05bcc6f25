package dev.quiver.compat;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.HashMap;
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
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** mqadmin (rocketmq-tools 5.5.0): what it prints matches what the test sent. */
@Tag("tools")
@Timeout(300)
class ToolsTest {
    private static final Pattern ADDRESS = Pattern.compile("\\d+\\.\\d+\\.\\d+\\.\\d+:\\d+");
    private DefaultMQProducer producer;

    @BeforeEach
    void start() throws Exception {
        producer = Compat.producer();
    }

    @AfterEach
    void stop() {
        producer.shutdown();
    }

    /** The value of `key : value` lines as brokerStatus prints them. */
    private static long brokerFigure(String output, String key) {
        Matcher matcher = Pattern.compile("(?m)^" + key + "\\s*:\\s*(\\d+)").matcher(output);
        assertTrue(matcher.find(), key + " missing in:\n" + output);
        return Long.parseLong(matcher.group(1));
    }

    /** Reruns an mqadmin command until its output satisfies `ready` (routes register asynchronously). */
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
    void clusterListAndBrokerStatusCountWhatWasSent() throws Exception {
        String clusters = Tools.mqadmin("clusterList");
        String line = clusters.lines().filter(l -> l.startsWith("DefaultCluster") && l.contains("broker-a"))
            .findFirst().orElseThrow(() -> new AssertionError("no broker-a line in:\n" + clusters));
        Matcher address = ADDRESS.matcher(line);
        assertTrue(address.find(), line);
        String broker = address.group();
        assertTrue(line.trim().endsWith("true"), "broker is active: " + line);

        String topic = Compat.createTopic(producer, "status", 2);
        long before = brokerFigure(Tools.mqadmin("brokerStatus", "-b", broker), "msgPutTotalTodayNow");
        for (int i = 0; i < 7; i++) {
            producer.send(new Message(topic, ("s" + i).getBytes(UTF_8)));
        }
        String status = Tools.mqadmin("brokerStatus", "-b", broker);
        assertEquals(before + 7, brokerFigure(status, "msgPutTotalTodayNow"), status);
        assertTrue(status.contains("brokerActive") && status.matches("(?s).*brokerActive\\s*:\\s*true.*"), status);
    }

    /** The `key  =  value` lines getBrokerConfig prints. */
    private static Map<String, String> brokerConfigLines(String output) {
        Map<String, String> config = new HashMap<>();
        Matcher line = Pattern.compile("(?m)^(\\w+)\\s*=  (.*)$").matcher(output);
        while (line.find()) {
            config.put(line.group(1), line.group(2).trim());
        }
        return config;
    }

    @Test
    void getBrokerConfigPrintsTheConfigurationInEffect() throws Exception {
        String clusters = mqadminUntil("broker-a in clusterList", out -> out.contains("broker-a"), "clusterList");
        String line = clusters.lines().filter(l -> l.contains("broker-a")).findFirst().orElseThrow();
        Matcher address = ADDRESS.matcher(line);
        assertTrue(address.find(), line);
        String broker = address.group();

        Map<String, String> byAddress = brokerConfigLines(Tools.mqadmin("getBrokerConfig", "-b", broker));
        assertEquals("broker-a", byAddress.get("brokerName"), byAddress.toString());
        assertEquals("DefaultCluster", byAddress.get("brokerClusterName"), byAddress.toString());
        assertEquals("ASYNC_FLUSH", byAddress.get("flushDiskType"), byAddress.toString());
        assertEquals("ASYNC_MASTER", byAddress.get("brokerRole"), byAddress.toString());
        assertEquals(broker.substring(broker.lastIndexOf(':') + 1), byAddress.get("listenPort"), byAddress.toString());
        assertTrue(byAddress.getOrDefault("messageDelayLevel", "").startsWith("1s "), byAddress.toString());
        // Escaped on the wire (`\:`), read back by java.util.Properties as it was set.
        assertTrue(byAddress.getOrDefault("namesrvAddr", "").contains(Compat.NAMESRV), byAddress.toString());

        String byCluster = Tools.mqadmin("getBrokerConfig", "-c", "DefaultCluster");
        assertTrue(byCluster.contains("Master: " + broker), byCluster);
        assertEquals(byAddress.get("flushDiskType"), brokerConfigLines(byCluster).get("flushDiskType"), byCluster);
    }

    @Test
    void deleteTopicRemovesTheTopicAndItsNameStartsAgainEmpty() throws Exception {
        // updateTopic -c needs the cluster listed; a broker just started may not have registered.
        mqadminUntil("broker-a in clusterList", out -> out.contains("broker-a"), "clusterList");
        String topic = Compat.unique("doomed");
        String created = Tools.mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2");
        assertTrue(created.contains("success"), created);
        mqadminUntil("topicList with " + topic, out -> out.lines().anyMatch(topic::equals), "topicList");
        Compat.waitUntil("producer sees 2 queues", Compat.WAIT, () -> {
            try {
                return producer.fetchPublishMessageQueues(topic).size() == 2;
            } catch (Exception e) {
                return false;
            }
        });
        for (int i = 0; i < 4; i++) {
            producer.send(new Message(topic, "TagD", "old-" + i, ("old " + i).getBytes(UTF_8)));
        }

        String deleted = Tools.mqadmin("deleteTopic", "-c", "DefaultCluster", "-t", topic);
        assertTrue(deleted.contains("delete topic [" + topic + "] from cluster [DefaultCluster] success."), deleted);
        assertTrue(deleted.contains("delete topic [" + topic + "] from NameServer success."), deleted);
        mqadminUntil("topicList without " + topic, out -> out.lines().noneMatch(topic::equals), "topicList");

        // Created again under the same name, the topic starts empty, at offset 0.
        created = Tools.mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2");
        assertTrue(created.contains("success"), created);
        mqadminUntil("topicList with " + topic + " again", out -> out.lines().anyMatch(topic::equals), "topicList");
        Map<Integer, long[]> empty = topicStatusRows(Tools.mqadmin("topicStatus", "-t", topic));
        assertEquals(2, empty.size(), empty.toString());
        for (long[] row : empty.values()) {
            assertEquals(0, row[0], "min offset after the delete");
            assertEquals(0, row[1], "max offset after the delete");
        }
        for (int i = 0; i < 3; i++) {
            producer.send(new Message(topic, "TagD", "new-" + i, ("new " + i).getBytes(UTF_8)));
        }
        Map<Integer, long[]> rows = topicStatusRows(Tools.mqadmin("topicStatus", "-t", topic));
        assertEquals(3, rows.values().stream().mapToLong(row -> row[1]).sum(), "max offsets after 3 sends");
        List<MessageExt> read = Compat.readTopic(topic, 3);
        assertEquals(3, read.size(), "read back");
        for (MessageExt message : read) {
            assertTrue(Compat.body(message).startsWith("new "), Compat.body(message));
        }
    }

    private static Map<Integer, long[]> topicStatusRows(String output) {
        Map<Integer, long[]> rows = new HashMap<>();
        Matcher row = Pattern.compile("(?m)^broker-a\\s+(\\d+)\\s+(\\d+)\\s+(\\d+)\\s").matcher(output);
        while (row.find()) {
            rows.put(Integer.parseInt(row.group(1)),
                new long[] {Long.parseLong(row.group(2)), Long.parseLong(row.group(3))});
        }
        return rows;
    }

    /**
     * wipeWritePerm takes a broker out of producers' routes on the name server (consumers keep
     * reading), and the broker's periodic registration does not undo it; addWritePerm brings it
     * back.
     */
    @Test
    void wipeWritePermStopsSendsUntilAddWritePerm() throws Exception {
        String topic = Compat.unique("wiped");
        String created = Tools.mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2");
        assertTrue(created.contains("success"), created);
        mqadminUntil("route of " + topic, out -> out.contains("\"perm\":6"), "topicRoute", "-t", topic);
        try {
            String wiped = Tools.mqadmin("wipeWritePerm", "-b", "broker-a");
            Matcher count = Pattern.compile("wipe write perm of broker\\[broker-a\\] in name server\\[[^]]+\\] OK, (\\d+)")
                .matcher(wiped);
            assertTrue(count.find(), wiped);
            assertTrue(Integer.parseInt(count.group(1)) >= 2, "at least the new topic and the default one: " + wiped);
            String route = Tools.mqadmin("topicRoute", "-t", topic);
            assertTrue(route.contains("\"perm\":4"), route);

            DefaultMQProducer fresh = Compat.producer();
            try {
                Message message = new Message(topic, ("wiped").getBytes(UTF_8));
                Exception refused = null;
                try {
                    fresh.send(message);
                } catch (Exception e) {
                    refused = e;
                }
                assertTrue(refused != null, "a send to a broker without write permission fails");
            } finally {
                fresh.shutdown();
            }
            // The broker registers again every few seconds in the test setup; the wipe stays.
            Thread.sleep(Duration.ofSeconds(Compat.REGISTER_INTERVAL_S + 2).toMillis());
            route = Tools.mqadmin("topicRoute", "-t", topic);
            assertTrue(route.contains("\"perm\":4"), "still wiped after a registration: " + route);
        } finally {
            String added = Tools.mqadmin("addWritePerm", "-b", "broker-a");
            assertTrue(added.matches("(?s).*add write perm of broker\\[broker-a\\] in name server\\[[^]]+\\] OK, \\d+.*"), added);
        }
        String route = Tools.mqadmin("topicRoute", "-t", topic);
        assertTrue(route.contains("\"perm\":6"), route);
        DefaultMQProducer fresh = Compat.producer();
        try {
            SendResult result = fresh.send(new Message(topic, ("after").getBytes(UTF_8)));
            assertEquals("SEND_OK", result.getSendStatus().name());
        } finally {
            fresh.shutdown();
        }
    }

    @Test
    void topicCommandsShowTheTopicItsQueuesAndItsMessages() throws Exception {
        String topic = Compat.unique("admin");
        String created = Tools.mqadmin("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "3", "-w", "3");
        assertTrue(created.contains("success"), created);
        mqadminUntil("topicList with " + topic, out -> out.lines().anyMatch(topic::equals), "topicList");
        String route = mqadminUntil("route of " + topic, out -> out.contains("\"readQueueNums\":3"), "topicRoute", "-t", topic);
        assertTrue(route.contains("\"writeQueueNums\":3"), route);
        assertTrue(route.contains("\"perm\":6"), route);
        Compat.waitUntil("producer sees 3 queues", Compat.WAIT, () -> {
            try {
                return producer.fetchPublishMessageQueues(topic).size() == 3;
            } catch (Exception e) {
                return false;
            }
        });

        int[] perQueue = {2, 3, 5};
        Map<String, SendResult> sent = new HashMap<>();
        for (int queue = 0; queue < 3; queue++) {
            for (int i = 0; i < perQueue[queue]; i++) {
                String key = "tk-" + queue + "-" + i;
                Message message = new Message(topic, "TagT", key, ("admin " + key).getBytes(UTF_8));
                sent.put(key, producer.send(message, (queues, msg, arg) -> queues.get((Integer) arg), queue));
            }
        }

        Map<Integer, long[]> rows = topicStatusRows(Tools.mqadmin("topicStatus", "-t", topic));
        assertEquals(3, rows.size(), rows.toString());
        for (int queue = 0; queue < 3; queue++) {
            assertEquals(0, rows.get(queue)[0], "min offset of queue " + queue);
            assertEquals(perQueue[queue], rows.get(queue)[1], "max offset of queue " + queue);
        }

        SendResult target = sent.get("tk-1-2");
        String byKey = Tools.mqadmin("queryMsgByKey", "-t", topic, "-k", "tk-1-2");
        Matcher keyRow = Pattern.compile("(?m)^([0-9A-F]+)\\s+(\\d+)\\s+(\\d+)(\\s|$)").matcher(byKey);
        assertTrue(keyRow.find(), byKey);
        assertEquals(target.getMsgId(), keyRow.group(1), byKey);
        assertEquals("1", keyRow.group(2));
        assertEquals("2", keyRow.group(3));
        assertTrue(!keyRow.find(), "one message has key tk-1-2:\n" + byKey);

        String byId = Tools.mqadmin("queryMsgById", "-t", topic, "-i", target.getOffsetMsgId());
        assertTrue(byId.matches("(?s).*Topic:\\s+" + topic + "\\s.*"), byId);
        assertTrue(byId.matches("(?s).*Tags:\\s+\\[TagT\\].*"), byId);
        assertTrue(byId.matches("(?s).*Keys:\\s+\\[tk-1-2\\].*"), byId);
        assertTrue(byId.matches("(?s).*Queue ID:\\s+1\\s.*"), byId);
        assertTrue(byId.matches("(?s).*Queue Offset:\\s+2\\s.*"), byId);

        String group = Compat.unique("progress");
        Map<String, MessageExt> consumed = new ConcurrentHashMap<>();
        DefaultMQPushConsumer consumer = Compat.pushConsumer(group);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            messages.forEach(m -> consumed.put(Compat.body(m), m));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        Compat.waitUntil("all 10 consumed", Compat.WAIT, () -> consumed.size() == 10);
        consumer.shutdown();
        String progress = mqadminUntil("consumer offsets at the end", out -> out.contains("Diff Total: 0"),
            "consumerProgress", "-g", group);
        Matcher progressRow = Pattern.compile("(?m)^" + topic + "\\s+broker-a\\s+(\\d+)\\s+(\\d+)\\s+(\\d+)\\s").matcher(progress);
        int seen = 0;
        while (progressRow.find()) {
            int queue = Integer.parseInt(progressRow.group(1));
            assertEquals(perQueue[queue], Long.parseLong(progressRow.group(2)), "broker offset of " + queue);
            assertEquals(perQueue[queue], Long.parseLong(progressRow.group(3)), "consumer offset of " + queue);
            seen++;
        }
        assertEquals(3, seen, progress);
    }
}
