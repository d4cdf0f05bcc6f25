import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.producer.Producer;

/**
 * RocketMQ 5's gRPC Java client as a load generator for bench/grpc.sh: THREADS threads share one
 * producer, each sending one message at a time for WARMUP + SECONDS seconds; the messages sent
 * and the send latencies of the last SECONDS are printed as one line:
 * `sent N tps T p50 A p99 B failed F` (milliseconds).
 *
 *   java -cp rocketmq-client-java-5.2.0.jar GrpcProducerBench.java ENDPOINT TOPIC THREADS SIZE WARMUP SECONDS
 */
public class GrpcProducerBench {
    public static void main(String[] args) throws Exception {
        try {
            run(args);
        } catch (Throwable failure) {
            failure.printStackTrace();
            System.exit(1);
        }
    }

    private static void run(String[] args) throws Exception {
        String endpoint = args[0];
        String topic = args[1];
        int threads = Integer.parseInt(args[2]);
        int size = Integer.parseInt(args[3]);
        long warmupMs = Long.parseLong(args[4]) * 1000;
        long measureMs = Long.parseLong(args[5]) * 1000;
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration configuration = ClientConfiguration.newBuilder()
            .setEndpoints(endpoint)
            .enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10))
            .build();
        byte[] body = new byte[size];
        Arrays.fill(body, (byte) 'q');
        AtomicBoolean stop = new AtomicBoolean();
        AtomicLong failed = new AtomicLong();
        long start = System.nanoTime();
        long measureFrom = start + warmupMs * 1_000_000;
        long end = measureFrom + measureMs * 1_000_000;
        List<long[]> latencies = new ArrayList<>();
        List<Thread> senders = new ArrayList<>();
        try (Producer producer = provider.newProducerBuilder()
            .setClientConfiguration(configuration)
            .setTopics(topic)
            .build()) {
            for (int t = 0; t < threads; t++) {
                // Microseconds of each measured send (a sender sends well under 10,000 a second);
                // sends past the array's end are counted by none.
                long[] own = new long[300_000];
                latencies.add(own);
                Thread sender = new Thread(() -> {
                    int count = 0;
                    while (!stop.get()) {
                        Message message = provider.newMessageBuilder().setTopic(topic).setBody(body).build();
                        long sent = System.nanoTime();
                        try {
                            producer.send(message);
                        } catch (Exception e) {
                            failed.incrementAndGet();
                            continue;
                        }
                        long now = System.nanoTime();
                        if (sent >= measureFrom && now <= end && count < own.length - 1) {
                            own[++count] = (now - sent) / 1_000;
                            own[0] = count;
                        }
                    }
                });
                sender.setDaemon(true);
                sender.start();
                senders.add(sender);
            }
            Thread.sleep((end - System.nanoTime()) / 1_000_000 + 1);
            stop.set(true);
            for (Thread sender : senders) {
                sender.join();
            }
        }
        int total = 0;
        for (long[] own : latencies) {
            total += (int) own[0];
        }
        long[] all = new long[total];
        int at = 0;
        for (long[] own : latencies) {
            System.arraycopy(own, 1, all, at, (int) own[0]);
            at += (int) own[0];
        }
        Arrays.sort(all);
        double p50 = total == 0 ? 0 : all[total / 2] / 1000.0;
        double p99 = total == 0 ? 0 : all[Math.min(total - 1, (int) (total * 0.99))] / 1000.0;
        System.out.printf("sent %d tps %.0f p50 %.3f p99 %.3f failed %d%n",
            total, total * 1000.0 / measureMs, p50, p99, failed.get());
        System.exit(0);
    }
}
