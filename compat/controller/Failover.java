// Sends and checks across a failover with Apache RocketMQ's own producer and consumer, for
// compat/controller.sh, as a single-file Java program (`java -cp <RocketMQ 5.5.0 jars>
// Failover.java ...`), so it needs no build step.
//
//   create-topic NAMESRV BROKER_ADDR TOPIC QUEUES
//       creates TOPIC on one broker (UPDATE_AND_CREATE_TOPIC), so that every replica has it
//       before a failover (a RocketMQ slave otherwise learns topics with its periodic copy).
//   send NAMESRV TOPIC ACKED_FILE STOP_FILE DEADLINE_S [SENDERS]
//       sends message after message from SENDERS threads (1; synchronously, body
//       "message <i>", one producer) until STOP_FILE exists
//       or the deadline, and appends "<i> <millis> <broker address>" to ACKED_FILE for each
//       SEND_OK (the address that stored it, from its offset message id), flushed at once. Prints how many were acknowledged and failed, and the longest time between two
//       acknowledgements.
//   check NAMESRV TOPIC ACKED_FILE DEADLINE_S
//       consumes the whole topic from its first offset with a DefaultLitePullConsumer of a new
//       group and checks that every acknowledged message is there.
//
// Exits 0 when every check holds, 1 otherwise.

import static java.nio.charset.StandardCharsets.UTF_8;

import java.io.FileWriter;
import java.io.PrintWriter;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public final class Failover {
    private static final int SEND_TIMEOUT_MS = 3_000;
    private static final int ROUTE_POLL_MS = 1_000;

    public static void main(String[] args) throws Exception {
        boolean ok;
        if (args.length == 5 && args[0].equals("create-topic")) {
            createTopic(args[1], args[2], args[3], Integer.parseInt(args[4]));
            ok = true;
        } else if ((args.length == 6 || args.length == 7) && args[0].equals("send")) {
            int senders = args.length == 7 ? Integer.parseInt(args[6]) : 1;
            ok = send(args[1], args[2], Path.of(args[3]), Path.of(args[4]), Long.parseLong(args[5]), senders);
        } else if (args.length == 5 && args[0].equals("check")) {
            ok = check(args[1], args[2], Path.of(args[3]), Long.parseLong(args[4]));
        } else {
            System.err.println("usage: create-topic NAMESRV BROKER_ADDR TOPIC QUEUES"
                + " | send NAMESRV TOPIC ACKED_FILE STOP_FILE DEADLINE_S [SENDERS] | check NAMESRV TOPIC ACKED_FILE DEADLINE_S");
            ok = false;
        }
        System.exit(ok ? 0 : 1);
    }

    static void createTopic(String namesrv, String broker, String topic, int queues) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("failover-admin-" + broker);
        admin.start();
        try {
            admin.createAndUpdateTopicConfig(broker, new TopicConfig(topic, queues, queues, 6));
            System.out.println("created " + topic + " with " + queues + " queues on " + broker);
        } finally {
            admin.shutdown();
        }
    }

    static boolean send(String namesrv, String topic, Path acked, Path stop, long deadlineS, int senders)
        throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("failover_producer");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("failover-producer");
        producer.setSendMsgTimeout(SEND_TIMEOUT_MS);
        producer.setPollNameServerInterval(ROUTE_POLL_MS);
        producer.start();
        long deadline = System.currentTimeMillis() + deadlineS * 1000;
        Totals totals = new Totals();
        try (PrintWriter out = new PrintWriter(new FileWriter(acked.toFile(), UTF_8, true))) {
            List<Thread> threads = new java.util.ArrayList<>();
            for (int sender = 0; sender < senders; sender++) {
                int first = sender;
                Thread thread = new Thread(() -> sendFrom(producer, topic, first, senders, out, stop, deadline, totals));
                thread.start();
                threads.add(thread);
            }
            for (Thread thread : threads) {
                thread.join();
            }
        } finally {
            producer.shutdown();
        }
        System.out.println("acknowledged " + totals.acked + ", failed " + totals.failed
            + ", longest time between acknowledgements " + totals.longestGap + " ms");
        return totals.acked > 0;
    }

    /** What the senders counted, under its own lock. */
    static final class Totals {
        long acked, failed, lastAck, longestGap;
    }

    /** One sender: messages first, first + step, first + 2 step, ... */
    static void sendFrom(DefaultMQProducer producer, String topic, int first, int step, PrintWriter out,
        Path stop, long deadline, Totals totals) {
        {
            for (int index = first; !Files.exists(stop) && System.currentTimeMillis() < deadline; index += step) {
                Message message = new Message(topic, ("message " + index).getBytes(UTF_8));
                message.setKeys("key-" + index);
                String storedBy;
                try {
                    SendResult result = producer.send(message);
                    if (result.getSendStatus() != SendStatus.SEND_OK) {
                        synchronized (totals) {
                            totals.failed++;
                        }
                        continue;
                    }
                    InetSocketAddress address = (InetSocketAddress) MessageDecoder
                        .decodeMessageId(result.getOffsetMsgId()).getAddress();
                    storedBy = address.getAddress().getHostAddress() + ":" + address.getPort();
                } catch (Exception error) {
                    synchronized (totals) {
                        totals.failed++;
                    }
                    continue;
                }
                synchronized (totals) {
                    long now = System.currentTimeMillis();
                    if (totals.lastAck > 0) {
                        totals.longestGap = Math.max(totals.longestGap, now - totals.lastAck);
                    }
                    totals.lastAck = now;
                    totals.acked++;
                    out.println(index + " " + now + " " + storedBy);
                    out.flush();
                }
            }
        }
    }

    static boolean check(String namesrv, String topic, Path acked, long deadlineS) throws Exception {
        Set<Integer> expected = new TreeSet<>();
        for (String line : Files.readAllLines(acked, UTF_8)) {
            String[] parts = line.trim().split(" ");
            if (parts.length >= 2) {
                expected.add(Integer.parseInt(parts[0]));
            }
        }
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer("failover_check_" + System.nanoTime());
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("failover-check");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.start();
        Set<Integer> found = new HashSet<>();
        long deadline = System.currentTimeMillis() + deadlineS * 1000;
        int duplicates = 0;
        try {
            while (!found.containsAll(expected) && System.currentTimeMillis() < deadline) {
                List<MessageExt> polled = consumer.poll(1_000);
                for (MessageExt message : polled) {
                    String body = new String(message.getBody(), UTF_8);
                    if (body.startsWith("message ")) {
                        if (!found.add(Integer.parseInt(body.substring(8)))) {
                            duplicates++;
                        }
                    }
                }
            }
        } finally {
            consumer.shutdown();
        }
        Set<Integer> missing = new TreeSet<>(expected);
        missing.removeAll(found);
        System.out.println("acknowledged " + expected.size() + ", consumed " + found.size() + " distinct ("
            + duplicates + " again), acknowledged and missing " + missing.size()
            + (missing.isEmpty() ? "" : ": first " + missing.stream().limit(10).toList()));
        return missing.isEmpty() && !expected.isEmpty();
    }
}
