package dev.quiver.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The official benchmark tools (rocketmq-example 5.5.0): the Producer sends a fixed count
 * (`-q`, so it ends by itself) with no send or response failure, and the Consumer, running at
 * the same time, consumes every message: its group's committed offsets reach the end of every
 * queue, as `mqadmin consumerProgress` reports.
 */
@Tag("tools")
@Timeout(300)
class BenchmarkTest {
    /** Messages to send: about 10 s of the benchmark on a 2-core machine with a debug build. */
    private static final int MESSAGES = Integer.getInteger("compat.benchmarkMessages", 20_000);
    private static final int QUEUES = 4;

    @Test
    void benchmarkProducerAndConsumerLoseNothing() throws Exception {
        DefaultMQProducer admin = Compat.producer();
        String topic;
        String group = Compat.unique("bench");
        try {
            topic = Compat.createTopic(admin, "bench", QUEUES);
            commitZeroOffsets(admin, topic, group);
        } finally {
            admin.shutdown();
        }

        Process consumer = Tools.java("org.apache.rocketmq.example.benchmark.Consumer",
            List.of("-n", Compat.NAMESRV, "-t", topic, "-g", group, "-ri", "2000")).start();
        Tools.Output consumerOutput = Tools.Output.collect(consumer.getInputStream());
        try {
            Process producer = Tools.java("org.apache.rocketmq.example.benchmark.Producer",
                List.of("-n", Compat.NAMESRV, "-t", topic, "-w", "16", "-s", "512", "-k", "true",
                    "-q", Integer.toString(MESSAGES), "-ri", "2000")).start();
            Tools.Output producerOutput = Tools.Output.collect(producer.getInputStream());
            assertTrue(producer.waitFor(180, TimeUnit.SECONDS), "producer ends:\n" + producerOutput.text());
            producerOutput.join();
            String sent = producerOutput.text();
            System.out.println("benchmark Producer output:\n" + sent);
            // The separators differ with the run's length: "| " between fields once a report
            // interval has passed, plain spaces when the whole run ended before the first one.
            Matcher complete = Pattern.compile("\\[Complete\\] Send Total: (\\d+)\\D.*?Send Failed: (\\d+)\\D+?Response Failed: (\\d+)")
                .matcher(sent);
            assertTrue(complete.find(), sent);
            assertEquals(MESSAGES, Integer.parseInt(complete.group(1)), sent);
            assertEquals("0", complete.group(2), "send failures");
            assertEquals("0", complete.group(3), "response failures");
            for (String line : sent.lines().filter(l -> l.contains("Send TPS")).toList()) {
                assertTrue(line.contains("Send Failed: 0 | Response Failed: 0"), line);
            }

            String[] last = {""};
            String progress;
            try {
                progress = Compat.waitFor("the benchmark consumer to commit every offset", Duration.ofSeconds(90), () -> {
                    try {
                        last[0] = Tools.mqadmin("consumerProgress", "-g", group);
                        return consumed(last[0], topic) == MESSAGES ? Optional.of(last[0]) : Optional.empty();
                    } catch (Exception e) {
                        throw new AssertionError(e);
                    }
                });
            } catch (AssertionError e) {
                throw new AssertionError(e.getMessage() + "; last consumerProgress:\n" + last[0]
                    + "\nconsumer output:\n" + consumerOutput.text(), e);
            }
            assertTrue(progress.contains("Diff Total: 0"), progress);
            // Its first report line comes a report interval after it started, which a fast run
            // can beat: wait for one before stopping it, so the check below has lines to read.
            try {
                Compat.waitUntil("a Consume TPS line from the benchmark consumer", Duration.ofSeconds(30),
                    () -> consumerOutput.text().contains("Consume TPS"));
            } catch (AssertionError e) {
                throw new AssertionError(e.getMessage() + "\nconsumer output:\n" + consumerOutput.text(), e);
            }
        } finally {
            consumer.destroy();
            consumer.waitFor(30, TimeUnit.SECONDS);
        }
        consumerOutput.join();
        String consumed = consumerOutput.text();
        System.out.println("benchmark Consumer output:\n" + consumed);
        assertTrue(consumed.contains("Consume TPS"), consumed);
        assertFalse(Pattern.compile("Consume Fail: [1-9]").matcher(consumed).find(), consumed);
    }

    /** Sum of the consumer offsets mqadmin prints for the topic's queues, -1 if unparsable. */
    private static long consumed(String progress, String topic) {
        Matcher row = Pattern.compile("(?m)^" + topic + "\\s+broker-a\\s+(\\d+)\\s+(\\d+)\\s+(\\d+)\\s").matcher(progress);
        long total = 0;
        int rows = 0;
        while (row.find()) {
            assertEquals(Long.parseLong(row.group(2)) >= Long.parseLong(row.group(3)), true, progress);
            total += Long.parseLong(row.group(3));
            rows++;
        }
        return rows == QUEUES ? total : -1;
    }

    /**
     * The benchmark Consumer starts from the last offset when its group has none, and would miss
     * what the Producer sent before it joined; committed zero offsets make it start at the front.
     * A lite-pull consumer of the group commits them and leaves; the test then waits until the
     * broker no longer lists it, or the benchmark Consumer would share the queues with it.
     */
    private static void commitZeroOffsets(DefaultMQProducer producer, String topic, String group) throws Exception {
        DefaultLitePullConsumer offsets = Compat.litePullConsumer(group);
        offsets.start();
        try {
            Map<MessageQueue, Long> zero = new HashMap<>();
            for (MessageQueue queue : offsets.fetchMessageQueues(topic)) {
                zero.put(queue, 0L);
            }
            assertEquals(QUEUES, zero.size());
            offsets.assign(zero.keySet());
            offsets.commitSync(zero, true);
            for (MessageQueue queue : zero.keySet()) {
                Compat.waitUntil("committed offset of " + queue, Compat.WAIT, () -> {
                    try {
                        return Long.valueOf(0).equals(offsets.committed(queue));
                    } catch (Exception e) {
                        return false;
                    }
                });
            }
        } finally {
            offsets.shutdown();
        }
        MQClientInstance client = producer.getDefaultMQProducerImpl().getMqClientFactory();
        String broker = client.findBrokerAddressInPublish(producer.fetchPublishMessageQueues(topic).get(0).getBrokerName());
        Compat.waitUntil("the offset committer to leave " + group, Compat.WAIT, () -> {
            try {
                return client.getMQClientAPIImpl().getConsumerIdListByGroup(broker, group, 5_000).isEmpty();
            } catch (Exception e) {
                // Both brokers answer an error for a group without members.
                return true;
            }
        });
    }
}
