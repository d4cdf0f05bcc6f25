package dev.quiver.compat;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * mqadmin's consumer-group commands (rocketmq-tools 5.5.0) against running Java clients:
 * subscription groups whose settings act, connections, a consumer's running status, offset
 * resets for running and stopped consumers, and the put rate in brokerStatus.
 */
@Tag("tools")
@Timeout(300)
class ConsumerAdminTest {
    /** RocketMQ's NO_PERMISSION response code. */
    private static final int NO_PERMISSION = 16;
    private DefaultMQProducer producer;

    @BeforeEach
    void start() throws Exception {
        producer = Compat.producer();
    }

    @AfterEach
    void stop() {
        producer.shutdown();
    }

    private static String brokerAddress() {
        return Compat.waitFor("broker-a in clusterList", Compat.WAIT, () -> {
            try {
                Matcher address = Pattern.compile("\\d+\\.\\d+\\.\\d+\\.\\d+:\\d+")
                    .matcher(Tools.mqadmin("clusterList"));
                return address.find() ? Optional.of(address.group()) : Optional.empty();
            } catch (Exception e) {
                throw new AssertionError(e);
            }
        });
    }

    private static String mqadminUntil(String what, java.util.function.Predicate<String> ready, String... args) {
        return Compat.waitFor(what, Compat.WAIT, () -> {
            try {
                String output = Tools.mqadmin(args);
                return ready.test(output) ? Optional.of(output) : Optional.empty();
            } catch (Exception e) {
                throw new AssertionError(e);
            }
        });
    }

    private void send(String topic, int count) throws Exception {
        for (int i = 0; i < count; i++) {
            producer.send(new Message(topic, ("m" + i).getBytes(UTF_8)));
        }
    }

    /** A push consumer of `topic` that counts what it receives. */
    private static DefaultMQPushConsumer counting(String group, String topic, AtomicInteger received) throws Exception {
        DefaultMQPushConsumer consumer = Compat.pushConsumer(group);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            received.addAndGet(messages.size());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        // Commit offsets every second, so a stopped consumer's offsets are on the broker soon.
        consumer.setPersistConsumerOffsetInterval(1000);
        consumer.start();
        return consumer;
    }

    /** Pulls queue 0 of `topic` as `group` with the plain pull API, which reports refusals. */
    private static PullResult pullOnce(String group, String topic) throws Exception {
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(group);
        consumer.setNamesrvAddr(Compat.NAMESRV);
        consumer.setInstanceName(Compat.unique("pull"));
        consumer.start();
        try {
            MessageQueue queue = consumer.fetchSubscribeMessageQueues(topic).iterator().next();
            return consumer.pull(new MessageQueue(topic, queue.getBrokerName(), 0), "*", 0, 32);
        } finally {
            consumer.shutdown();
        }
    }

    @Test
    void subGroupCommandsCreateReadAndDeleteAGroupWhoseSettingsAct() throws Exception {
        String broker = brokerAddress();
        String topic = Compat.createTopic(producer, "subgroup", 1);
        send(topic, 3);
        String group = Compat.unique("closed");
        String created = Tools.mqadmin("updateSubGroup", "-b", broker, "-g", group, "-s", "false", "-r", "5");
        assertTrue(created.contains("create subscription group to"), created);

        String config = Tools.mqadmin("getConsumerConfig", "-g", group);
        assertTrue(config.matches("(?s).*consumeEnable\\s+=\\s+false.*"), config);
        assertTrue(config.matches("(?s).*retryMaxTimes\\s+=\\s+5.*"), config);

        try {
            pullOnce(group, topic);
            throw new AssertionError("a group with consumeEnable=false was served");
        } catch (MQBrokerException refused) {
            assertEquals(NO_PERMISSION, refused.getResponseCode(), refused.toString());
        }

        Tools.mqadmin("updateSubGroup", "-b", broker, "-g", group, "-s", "true", "-r", "5");
        assertTrue(Tools.mqadmin("getConsumerConfig", "-g", group).matches("(?s).*retryMaxTimes\\s+=\\s+5\\s.*"));
        PullResult served = pullOnce(group, topic);
        assertEquals(PullStatus.FOUND, served.getPullStatus());
        assertEquals(3, served.getMsgFoundList().size());

        String deleted = Tools.mqadmin("deleteSubGroup", "-b", broker, "-g", group, "-r", "true");
        assertTrue(deleted.contains("delete subscription group [" + group + "] from broker"), deleted);
        // Its settings are gone. (A RocketMQ broker may list the group again at once with the
        // default settings, created afresh by a background task that looks it up.)
        String gone = Tools.mqadmin("getConsumerConfig", "-g", group);
        assertTrue(!gone.matches("(?s).*retryMaxTimes\\s+=\\s+5\\s.*"), gone);
    }

    @Test
    void connectionsAndRunningStatusNameTheClients() throws Exception {
        String topic = Compat.createTopic(producer, "connections", 2);
        send(topic, 4);
        String group = Compat.unique("watched");
        AtomicInteger received = new AtomicInteger();
        DefaultMQPushConsumer consumer = counting(group, topic, received);
        try {
            Compat.waitUntil("4 consumed", Compat.WAIT, () -> received.get() >= 4);
            String connections = mqadminUntil("the consumer in consumerConnection",
                out -> out.contains("CONSUME_PASSIVELY"), "consumerConnection", "-g", group);
            assertTrue(connections.contains(topic), connections);
            assertTrue(connections.contains("CLUSTERING"), connections);
            Matcher id = Pattern.compile("(?m)^(\\S+@\\S+)\\s+\\S+\\s+JAVA\\s").matcher(connections);
            assertTrue(id.find(), "a client id line in:\n" + connections);
            String clientId = id.group(1);

            // Every group with its connected clients: 1 push client, clustering.
            mqadminUntil(group + " with its client in consumerProgress",
                out -> out.lines().anyMatch(line -> line.matches(Pattern.quote(group) + "\\s+1\\s+V\\S+\\s+PUSH\\s+CLUSTERING\\s.*")),
                "consumerProgress");

            // The unique-key lookup, and its track of who consumed the message, which asks for the
            // group's connections and progress.
            String msgId = producer.send(new Message(topic, "tracked".getBytes(UTF_8))).getMsgId();
            Compat.waitUntil("5 consumed", Compat.WAIT, () -> received.get() >= 5);
            String track = mqadminUntil("the message consumed by " + group,
                out -> out.contains("consumerGroup=" + group + ", trackType=CONSUMED"),
                "queryMsgByUniqueKey", "-t", topic, "-i", msgId);
            assertTrue(track.contains(topic), track);

            String status = Tools.mqadmin("consumerStatus", "-g", group, "-i", clientId);
            assertTrue(status.contains(topic), "the consumer's own running info:\n" + status);
            assertTrue(status.contains("#Consumer Subscription#"), status);

            // The producer says its group in its heartbeats (every 30 s, the first soon after start).
            mqadminUntil("the producer in producerConnection",
                out -> out.matches("(?s).*0001\\s+\\S+@\\S+\\s+\\S+\\s+JAVA.*"),
                "producerConnection", "-g", producer.getProducerGroup(), "-t", topic);
        } finally {
            consumer.shutdown();
        }
    }

    @Test
    void resetOffsetByTimeRewindsRunningAndStoppedConsumers() throws Exception {
        String topic = Compat.createTopic(producer, "reset", 2);
        send(topic, 10);
        String running = Compat.unique("running");
        String stopped = Compat.unique("stopped");
        AtomicInteger runningGot = new AtomicInteger();
        AtomicInteger stoppedGot = new AtomicInteger();
        DefaultMQPushConsumer live = counting(running, topic, runningGot);
        DefaultMQPushConsumer gone = counting(stopped, topic, stoppedGot);
        try {
            Compat.waitUntil("both groups consume 10", Compat.WAIT,
                () -> runningGot.get() >= 10 && stoppedGot.get() >= 10);
            // The stopped group's offsets reach the broker before it stops (shutdown commits).
            gone.shutdown();
            gone = null;
            mqadminUntil("the stopped group's offsets at the end", out -> out.matches("(?s).*Diff Total:\\s+0.*"),
                "consumerProgress", "-g", stopped);

            for (String group : Set.of(running, stopped)) {
                String reset = Tools.mqadmin("resetOffsetByTime", "-g", group, "-t", topic, "-s", "0");
                assertTrue(!reset.contains("Exception"), reset);
            }
            Compat.waitUntil("the running consumer gets the 10 again", Duration.ofSeconds(90),
                () -> runningGot.get() >= 20);
            AtomicInteger again = new AtomicInteger();
            DefaultMQPushConsumer restarted = counting(stopped, topic, again);
            try {
                Compat.waitUntil("the stopped group, started again, reads from the reset", Compat.WAIT,
                    () -> again.get() >= 10);
            } finally {
                restarted.shutdown();
            }
        } finally {
            live.shutdown();
            if (gone != null) {
                gone.shutdown();
            }
        }
    }

    @Test
    void updateBrokerConfigTurnsGroupCreationOffAndOn() throws Exception {
        String broker = brokerAddress();
        String topic = Compat.createTopic(producer, "strict", 1);
        send(topic, 1);
        String off = Tools.mqadmin("updateBrokerConfig", "-b", broker, "-k", "autoCreateSubscriptionGroup", "-v", "false");
        try {
            assertTrue(off.contains("success"), off);
            String config = Tools.mqadmin("getBrokerConfig", "-b", broker);
            assertTrue(config.matches("(?s).*autoCreateSubscriptionGroup\\s+=\\s+false.*"), config);
            try {
                pullOnce(Compat.unique("unknown"), topic);
                throw new AssertionError("a group that does not exist was served");
            } catch (MQBrokerException refused) {
                // SUBSCRIPTION_GROUP_NOT_EXIST
                assertEquals(26, refused.getResponseCode(), refused.toString());
            }
        } finally {
            String on = Tools.mqadmin("updateBrokerConfig", "-b", broker, "-k", "autoCreateSubscriptionGroup", "-v", "true");
            assertTrue(on.contains("success"), on);
        }
        assertEquals(PullStatus.FOUND, pullOnce(Compat.unique("known"), topic).getPullStatus());
    }

    @Test
    void brokerStatusReportsThePutRate() throws Exception {
        String broker = brokerAddress();
        String topic = Compat.createTopic(producer, "rates", 1);
        // Sends keep coming while the test waits for the broker's next sample (every 10 s).
        Set<String> failures = ConcurrentHashMap.newKeySet();
        Thread sender = new Thread(() -> {
            while (!Thread.currentThread().isInterrupted()) {
                try {
                    producer.send(new Message(topic, "tick".getBytes(UTF_8)));
                    Thread.sleep(20);
                } catch (InterruptedException e) {
                    return;
                } catch (Exception e) {
                    failures.add(e.toString());
                }
            }
        });
        sender.start();
        try {
            String status = mqadminUntil("a put rate above 0", out -> {
                Matcher tps = Pattern.compile("(?m)^putTps\\s*:\\s*([0-9.]+)").matcher(out);
                return tps.find() && Double.parseDouble(tps.group(1)) > 0;
            }, "brokerStatus", "-b", broker);
            assertTrue(status.contains("getTotalTps"), status);
        } finally {
            sender.interrupt();
            sender.join();
        }
        assertTrue(failures.isEmpty(), failures.toString());
    }
}
