// Measures how late timer messages are delivered, for bench/timer.sh, the same way for Quiver
// and for Apache RocketMQ: a push consumer (its own group) records, for every message, the time
// it was handed to the listener minus the time it was due (the MY_RECORD_TIMER_DELIVER_MS
// property RocketMQ's TimerProducer sets on each message), and prints exact percentiles over
// all of them once EXPECTED messages arrived or TIMEOUT_S passed.
//
//   TimerLateness NAMESRV TOPIC EXPECTED TIMEOUT_S
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public class TimerLateness {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1];
        int expected = Integer.parseInt(args[2]);
        long timeoutMs = Long.parseLong(args[3]) * 1000;
        long[] lateness = new long[expected];
        AtomicInteger received = new AtomicInteger();
        AtomicInteger unmarked = new AtomicInteger();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("timer_lateness");
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("timer_lateness_" + System.nanoTime());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setConsumeMessageBatchMaxSize(32);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            long now = System.currentTimeMillis();
            for (MessageExt message : messages) {
                String due = message.getProperty("MY_RECORD_TIMER_DELIVER_MS");
                if (due == null) {
                    unmarked.incrementAndGet();
                    continue;
                }
                int i = received.getAndIncrement();
                if (i < lateness.length) {
                    lateness[i] = now - Long.parseLong(due);
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        System.out.println("ready");
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (received.get() < expected && System.currentTimeMillis() < deadline) {
            Thread.sleep(200);
        }
        consumer.shutdown();
        int n = Math.min(received.get(), expected);
        long[] sorted = Arrays.copyOf(lateness, n);
        Arrays.sort(sorted);
        long early = Arrays.stream(sorted).filter(v -> v < 0).count();
        System.out.printf("received=%d expected=%d unmarked=%d early=%d%n", received.get(), expected, unmarked.get(), early);
        if (n > 0) {
            System.out.printf("lateness_ms p50=%d p90=%d p99=%d p999=%d max=%d min=%d%n",
                sorted[(int) (n * 0.5)], sorted[(int) (n * 0.9)], sorted[(int) (n * 0.99)],
                sorted[Math.min(n - 1, (int) (n * 0.999))], sorted[n - 1], sorted[0]);
        }
    }
}
