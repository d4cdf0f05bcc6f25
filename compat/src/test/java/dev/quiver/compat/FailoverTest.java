package dev.quiver.compat;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.reflect.InvocationTargetException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.Callable;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import java.util.stream.Stream;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.CommandCustomHeader;
import org.apache.rocketmq.remoting.RemotingClient;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A master failure under unchanged Java clients. Unlike the other compat tests, which share the
 * one `quiver up` that compat/run.sh starts, this one runs its own cluster as separate processes
 * (`quiver namesrv`, a SYNC_MASTER and its slave as `quiver broker`), because it kills the
 * master.
 *
 * <p>Everything the producer was told is SEND_OK is on the slave; once the master is gone and the
 * name server lists only the slave, a push consumer of the same group reads from the slave every
 * message its group had not consumed, starting at the offsets the slave copied from the master,
 * and commits its offsets to the slave.
 *
 * <p>When the master returns, the offsets the group committed on the slave reach it, so the group
 * resumes there without consuming again what it consumed on the slave.
 *
 * <p>Needs `compat.quiverBinary` (compat/run.sh passes it); skipped without it, as in a
 * `--reference` run against Apache RocketMQ.
 */
@Timeout(240)
class FailoverTest {
    private static final String BINARY = System.getProperty("compat.quiverBinary");
    /**
     * Each step's deadline. The slowest step, a new consumer's route lookup, rebalance and first
     * pulls, takes a few seconds on a loaded 2-core machine; the whole test stays under 240 s.
     */
    private static final Duration STEP = Duration.ofSeconds(30);
    private static final Duration READY = Duration.ofSeconds(20);
    /** 200 records of about 2.2 KiB fill a 256 KiB segment and most of a second one. */
    private static final int SEGMENT_BYTES = 256 * 1024;
    private static final int BODY_BYTES = 2048;
    private static final int QUEUES = 4;
    private static final int BATCH = 100;
    private static final String BROKER_NAME = "broker-a";

    // Request and response codes, the same in 4.9.7 and 5.5.0 (whose RequestCode classes live
    // in different packages).
    private static final int QUERY_CONSUMER_OFFSET = 14;
    private static final int GET_MAX_OFFSET = 30;
    private static final int SUCCESS = 0;
    private static final int QUERY_NOT_FOUND = 22;
    private static final long CALL_TIMEOUT_MS = 3000;

    private Path dir;
    private final List<Server> servers = new ArrayList<>();
    private final List<DefaultMQPushConsumer> consumers = new ArrayList<>();
    private DefaultMQProducer producer;
    private String namesrv;
    /** Messages a consumer got with another body or topic than was sent. */
    private final List<String> damaged = new CopyOnWriteArrayList<>();

    /** One `quiver` process: its output is read on a thread, its log goes to a file. */
    private record Server(String name, Process process, Tools.Output stdout, Path log, String address) {}

    @BeforeEach
    void startCluster() throws Exception {
        Assumptions.assumeTrue(BINARY != null && !BINARY.isBlank(),
            "compat.quiverBinary is not set: the failover test runs only against a quiver build");
        dir = Files.createTempDirectory("quiver-failover");
        namesrv = start("namesrv", "namesrv", List.of("namesrv", "--listen", "127.0.0.1:0")).address();
    }

    @AfterEach
    void stopEverything() throws Exception {
        for (DefaultMQPushConsumer consumer : consumers) {
            consumer.shutdown();
        }
        if (producer != null) {
            producer.shutdown();
        }
        for (Server server : servers) {
            server.process().destroyForcibly();
        }
        for (Server server : servers) {
            server.process().waitFor(10, TimeUnit.SECONDS);
        }
        if (dir != null) {
            try (Stream<Path> paths = Files.walk(dir)) {
                paths.sorted(Comparator.reverseOrder()).forEach(path -> path.toFile().delete());
            }
        }
    }

    @Test
    void afterTheMasterIsKilledAConsumerGroupCarriesOnFromTheSlaveWithoutLoss() throws Throwable {
        try {
            failover();
        } catch (Throwable failure) {
            for (Server server : servers) {
                System.err.println("--- last lines of " + server.name() + " (" + server.log() + "):");
                System.err.println(tail(server.log(), 40));
            }
            throw failure;
        }
    }

    private void failover() throws Exception {
        String masterConf = String.join("\n",
            "brokerName=" + BROKER_NAME, "brokerId=0", "brokerRole=SYNC_MASTER",
            "listenPort=0", "haListenPort=0", "slaveTimeout=2000",
            "storePathRootDir=" + dir.resolve("master-store"),
            "mappedFileSizeCommitLog=" + SEGMENT_BYTES, "");
        Server master = broker("master", masterConf);
        Server slave = broker("slave", String.join("\n",
            "brokerName=" + BROKER_NAME, "brokerId=1", "brokerRole=SLAVE",
            "listenPort=0", "registerNameServerPeriod=1000",
            "storePathRootDir=" + dir.resolve("slave-store"),
            "mappedFileSizeCommitLog=" + SEGMENT_BYTES, ""));
        producer = new DefaultMQProducer(Compat.unique("failover_producer"));
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName(Compat.unique("p"));
        producer.setSendMsgTimeout(10_000);
        producer.setPollNameServerInterval(1000);
        producer.start();

        String topic = createTopic(Compat.unique("failover"));
        waitUntil("the route of " + topic + " to list the master and the slave",
            () -> brokerAddrs(topic).equals(Map.of(0L, master.address(), 1L, slave.address())),
            () -> "route: " + routeOrError(topic));
        int[] probes = {0};
        probeUntilSendOk(topic, probes);

        // 1. Every send of the first batch is SEND_OK: the slave confirmed each before the answer.
        for (int i = 0; i < BATCH; i++) {
            SendResult sent = send(topic, "first-" + i);
            assertEquals(SendStatus.SEND_OK, sent.getSendStatus(), "first-" + i + ": " + sent);
        }

        // 2. The group consumes the whole first batch and commits it on the master.
        String group = Compat.unique("failover_group");
        Map<String, Integer> before = new ConcurrentHashMap<>();
        DefaultMQPushConsumer first = consumer(group, topic, before);
        waitUntil("the first consumer to get the first batch", () -> before.keySet().containsAll(keys("first-", BATCH)),
            () -> missing(before, keys("first-", BATCH)));
        Map<Integer, Long> committedOnMaster = waitForValue("the group's offsets to reach the master's ends", () -> {
            first.getDefaultMQPushConsumerImpl().persistConsumerOffset();
            Map<Integer, Long> committed = committedOffsets(master.address(), topic, group);
            return committed.equals(maxOffsets(master.address(), topic)) ? committed : null;
        }, () -> "committed " + committedOffsets(master.address(), topic, group)
            + ", ends " + maxOffsets(master.address(), topic));
        first.shutdown();
        consumers.remove(first);

        // A second batch nobody consumed yet, every send SEND_OK as well.
        for (int i = 0; i < BATCH; i++) {
            SendResult sent = send(topic, "second-" + i);
            assertEquals(SendStatus.SEND_OK, sent.getSendStatus(), "second-" + i + ": " + sent);
        }
        Map<Integer, Long> ends = maxOffsets(master.address(), topic);
        // SEND_OK already means the slave has the records; its copy of the group's offsets (and
        // of the topic) arrives within its 2 s copy interval.
        assertEquals(ends, maxOffsets(slave.address(), topic), "the slave holds every acknowledged record");
        waitUntil("the slave to copy the group's offsets from the master",
            () -> committedOffsets(slave.address(), topic, group).equals(committedOnMaster),
            () -> "on the slave " + committedOffsets(slave.address(), topic, group) + ", on the master " + committedOnMaster);

        // 3. The master dies; its registration connection closes and the name server drops it.
        master.process().destroyForcibly();
        assertTrue(master.process().waitFor(10, TimeUnit.SECONDS), "the master exits after SIGKILL");
        long killedAt = System.nanoTime();
        waitUntil("the route of " + topic + " to list only the slave",
            () -> brokerAddrs(topic).equals(Map.of(1L, slave.address())),
            () -> "route: " + routeOrError(topic));
        long routeChangedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killedAt);

        // 4. A new consumer of the same group, with the same unchanged client, reads from the slave.
        Map<String, Integer> after = new ConcurrentHashMap<>();
        DefaultMQPushConsumer second = consumer(group, topic, after);
        waitUntil("the consumer started after the kill to get the second batch from the slave",
            () -> after.keySet().containsAll(keys("second-", BATCH)), () -> missing(after, keys("second-", BATCH)));
        Map<Integer, Long> committedOnSlave = waitForValue("the group's offsets to reach the slave's ends", () -> {
            // The client's own persist: with no master in the route it commits to the slave.
            second.getDefaultMQPushConsumerImpl().persistConsumerOffset();
            Map<Integer, Long> committed = committedOffsets(slave.address(), topic, group);
            return committed.equals(ends) ? committed : null;
        }, () -> "committed " + committedOffsets(slave.address(), topic, group) + ", ends " + ends);
        assertEquals(ends, committedOnSlave);

        Set<String> redelivered = new TreeSet<>(after.keySet());
        redelivered.removeIf(key -> key.startsWith("second-"));
        int repeats = after.values().stream().mapToInt(n -> n - 1).sum();
        System.out.printf("failover (client %s): %d probes; before the kill group consumed %d; route without the"
                + " master %d ms after the kill; after it %d distinct (%d of them consumed before the kill),"
                + " %d repeated deliveries; offsets committed on the slave %s%n",
            System.getProperty("compat.clientVersion"), probes[0], before.size(), routeChangedMs, after.size(),
            redelivered.size(), repeats, committedOnSlave);
        for (String key : after.keySet()) {
            assertTrue(before.containsKey(key) || key.startsWith("second-"), "delivered but never sent: " + key);
        }

        // 5. The master returns with its old offsets, from before the kill. The group, stopped,
        // had committed only on the slave; the slave hands the master those newer offsets, so
        // the group resumes on the master after the second batch instead of consuming it again.
        second.shutdown();
        consumers.remove(second);
        Server returned = broker("master-returned", masterConf);
        waitUntil("the returned master to hold the offsets the group committed on the slave",
            () -> committedOffsets(returned.address(), topic, group).equals(ends),
            () -> "on the master " + committedOffsets(returned.address(), topic, group) + ", ends " + ends);
        probeUntilSendOk(topic, probes);
        for (int i = 0; i < BATCH; i++) {
            SendResult sent = send(topic, "third-" + i);
            assertEquals(SendStatus.SEND_OK, sent.getSendStatus(), "third-" + i + ": " + sent);
        }
        Map<String, Integer> back = new ConcurrentHashMap<>();
        consumer(group, topic, back);
        waitUntil("a consumer on the returned master to get the third batch",
            () -> back.keySet().containsAll(keys("third-", BATCH)), () -> missing(back, keys("third-", BATCH)));
        Set<String> consumedAgain = new TreeSet<>(back.keySet());
        consumedAgain.removeIf(key -> !key.startsWith("first-") && !key.startsWith("second-"));
        System.out.printf("master returned: the group got %d distinct messages, %d of them consumed before%n",
            back.size(), consumedAgain.size());
        assertEquals(Set.of(), consumedAgain, "consumed on the slave, then again on the returned master");
        assertEquals(List.of(), damaged, "messages delivered with another body or topic");
    }

    /** SYNC_MASTER answers SLAVE_NOT_AVAILABLE until the slave follows it over HA: probe till SEND_OK. */
    private void probeUntilSendOk(String topic, int[] probes) throws Exception {
        Object[] lastProbe = {null};
        waitUntil("a SEND_OK, once the slave follows the master", () -> {
            probes[0]++;
            try {
                SendResult sent = send(topic, "probe-" + probes[0]);
                lastProbe[0] = sent.getSendStatus();
                return sent.getSendStatus() == SendStatus.SEND_OK;
            } catch (Exception e) {
                lastProbe[0] = e;
                return false;
            }
        }, () -> probes[0] + " probes sent, the last answered " + lastProbe[0]);
    }

    // --- processes ---

    private Server broker(String name, String conf) throws Exception {
        Path file = dir.resolve(name + ".conf");
        Files.writeString(file, conf, UTF_8);
        return start(name, "broker", List.of("broker", "-c", file.toString(), "-n", namesrv));
    }

    /** Starts `quiver` and waits for its `ready KIND=ADDR` line. */
    private Server start(String name, String kind, List<String> args) throws Exception {
        List<String> command = new ArrayList<>();
        command.add(BINARY);
        command.addAll(args);
        Path log = dir.resolve(name + ".log");
        ProcessBuilder builder = new ProcessBuilder(command).redirectError(log.toFile());
        builder.environment().put("QUIVER_LOG", "info");
        Process process = builder.start();
        Tools.Output stdout = Tools.Output.collect(process.getInputStream());
        Server starting = new Server(name, process, stdout, log, null);
        servers.add(starting);
        String prefix = "ready " + kind + "=";
        String address = Compat.waitFor(name + " to print " + prefix, READY, () -> {
            if (!process.isAlive()) {
                throw new AssertionError(name + " exited with " + process.exitValue() + ":\n" + tail(log, 40));
            }
            for (String line : stdout.text().split("\n")) {
                if (line.startsWith(prefix)) {
                    return java.util.Optional.of(line.substring(prefix.length()).trim().split(" ")[0]);
                }
            }
            return java.util.Optional.empty();
        });
        Server server = new Server(name, process, stdout, log, address);
        servers.set(servers.indexOf(starting), server);
        return server;
    }

    private static String tail(Path log, int lines) {
        try {
            List<String> all = Files.readAllLines(log, UTF_8);
            return String.join("\n", all.subList(Math.max(0, all.size() - lines), all.size()));
        } catch (IOException e) {
            return "(cannot read " + log + ": " + e + ")";
        }
    }

    // --- clients ---

    private DefaultMQPushConsumer consumer(String group, String topic, Map<String, Integer> got) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(Compat.unique("c"));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPollNameServerInterval(1000);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                String key = message.getKeys();
                if (!new String(message.getBody(), UTF_8).equals(body(key)) || !topic.equals(message.getTopic())) {
                    damaged.add(key + " from " + message.getTopic() + " on queue " + message.getQueueId());
                }
                got.merge(key, 1, Integer::sum);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumers.add(consumer);
        consumer.start();
        return consumer;
    }

    private SendResult send(String topic, String key) throws Exception {
        return producer.send(new Message(topic, "TagF", key, body(key).getBytes(UTF_8)));
    }

    private static String body(String key) {
        StringBuilder body = new StringBuilder(BODY_BYTES).append(key).append(' ');
        while (body.length() < BODY_BYTES) {
            body.append((char) ('a' + body.length() % 26));
        }
        return body.toString();
    }

    private static Set<String> keys(String prefix, int count) {
        Set<String> keys = new TreeSet<>();
        for (int i = 0; i < count; i++) {
            keys.add(prefix + i);
        }
        return keys;
    }

    private static String missing(Map<String, Integer> got, Set<String> expected) {
        Set<String> missing = new TreeSet<>(expected);
        missing.removeAll(got.keySet());
        return missing.size() + " missing: " + missing;
    }

    /** Creates the topic on every master of TBW102's route, as Compat.createTopic does. */
    private String createTopic(String topic) {
        waitUntil("creating " + topic, () -> {
            try {
                try {
                    DefaultMQProducer.class.getMethod("createTopic", String.class, String.class, int.class, Map.class)
                        .invoke(producer, "TBW102", topic, QUEUES, new HashMap<String, String>());
                } catch (NoSuchMethodException e) {
                    DefaultMQProducer.class.getMethod("createTopic", String.class, String.class, int.class)
                        .invoke(producer, "TBW102", topic, QUEUES);
                }
                return true;
            } catch (Exception e) {
                return false;
            }
        }, () -> "route of TBW102: " + routeOrError("TBW102"));
        return topic;
    }

    /**
     * The topic's route from the name server. Through reflection: TopicRouteData is in another
     * package in 4.9.7 than in 5.5.0, and the classes compiled once run under both clients.
     */
    private Object route(String topic) throws Exception {
        Object api = producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
        try {
            return api.getClass().getMethod("getTopicRouteInfoFromNameServer", String.class, long.class)
                .invoke(api, topic, CALL_TIMEOUT_MS);
        } catch (InvocationTargetException e) {
            throw e.getCause() instanceof Exception cause ? cause : e;
        }
    }

    private static Object get(Object target, String getter) throws Exception {
        return target.getClass().getMethod(getter).invoke(target);
    }

    /** broker-a's addresses by broker id in the topic's route; empty without a readable route. */
    private Map<Long, String> brokerAddrs(String topic) {
        try {
            Object route = route(topic);
            List<?> queues = (List<?>) get(route, "getQueueDatas");
            if (queues == null || queues.isEmpty()) {
                return Map.of();
            }
            for (Object broker : (List<?>) get(route, "getBrokerDatas")) {
                if (BROKER_NAME.equals(get(broker, "getBrokerName"))) {
                    Map<Long, String> addrs = new TreeMap<>();
                    ((Map<?, ?>) get(broker, "getBrokerAddrs")).forEach((id, addr) -> addrs.put((Long) id, (String) addr));
                    return addrs;
                }
            }
        } catch (Exception e) {
            // No route yet or any more: the caller polls.
        }
        return Map.of();
    }

    private String routeOrError(String topic) {
        try {
            return String.valueOf(route(topic));
        } catch (Exception e) {
            return e.toString();
        }
    }

    // --- direct broker queries ---

    /** The request header of GET_MAX_OFFSET (topic, queueId) and QUERY_CONSUMER_OFFSET (+ group). */
    static final class QueueHeader implements CommandCustomHeader {
        String topic;
        Integer queueId;
        String consumerGroup;

        @Override
        public void checkFields() {}
    }

    /** Each queue's max offset on one broker; a queue that cannot be read is left out. */
    private Map<Integer, Long> maxOffsets(String broker, String topic) {
        return offsets(broker, GET_MAX_OFFSET, topic, null);
    }

    /** The group's committed offset of each queue on one broker; one it has none of is left out. */
    private Map<Integer, Long> committedOffsets(String broker, String topic, String group) {
        return offsets(broker, QUERY_CONSUMER_OFFSET, topic, group);
    }

    private Map<Integer, Long> offsets(String broker, int code, String topic, String group) {
        RemotingClient remoting = producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl()
            .getRemotingClient();
        Map<Integer, Long> offsets = new TreeMap<>();
        for (int queueId = 0; queueId < QUEUES; queueId++) {
            QueueHeader header = new QueueHeader();
            header.topic = topic;
            header.queueId = queueId;
            header.consumerGroup = group;
            try {
                RemotingCommand response = remoting.invokeSync(broker, RemotingCommand.createRequestCommand(code, header),
                    CALL_TIMEOUT_MS);
                if (response.getCode() == SUCCESS) {
                    offsets.put(queueId, Long.parseLong(response.getExtFields().get("offset")));
                } else if (response.getCode() != QUERY_NOT_FOUND) {
                    throw new AssertionError("request " + code + " to " + broker + " answered " + response);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionError(e);
            } catch (org.apache.rocketmq.remoting.exception.RemotingException e) {
                // Not reachable right now: the caller polls.
            }
        }
        return offsets;
    }

    // --- waiting ---

    /** Polls until `condition` holds; on the deadline fails with what was awaited and the state. */
    private static void waitUntil(String what, Callable<Boolean> condition, Supplier<String> state) {
        waitForValue(what, () -> condition.call() ? true : null, state);
    }

    /** Polls until `value` yields non-null; on the deadline fails with what was awaited and the state. */
    private static <T> T waitForValue(String what, Callable<T> value, Supplier<String> state) {
        long deadline = System.nanoTime() + STEP.toNanos();
        while (true) {
            T got;
            try {
                got = value.call();
            } catch (RuntimeException | Error e) {
                throw e;
            } catch (Exception e) {
                throw new AssertionError("waiting for " + what, e);
            }
            if (got != null) {
                return got;
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out after " + STEP + " waiting for " + what + "; " + state.get());
            }
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionError("interrupted waiting for " + what, e);
            }
        }
    }
}
