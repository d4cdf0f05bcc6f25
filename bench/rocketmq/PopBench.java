// Pop consumption throughput for bench/pop.sh, the same way for Quiver and for Apache RocketMQ:
// CONSUMERS DefaultMQPushConsumer instances of one group (already switched to POP on the broker)
// with clientRebalance=false, so that they pop, each with the client's default 20 consume
// threads and 32 messages per pop; the listener only counts. Prints the rate over the time from
// the first message to the EXPECTED-th, or what arrived when TIMEOUT_S passed.
//
//   PopBench NAMESRV TOPIC GROUP CONSUMERS EXPECTED TIMEOUT_S
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;

public class PopBench {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1], group = args[2];
        int consumers = Integer.parseInt(args[3]);
        long expected = Long.parseLong(args[4]);
        long timeoutMs = Long.parseLong(args[5]) * 1000;
        AtomicLong consumed = new AtomicLong();
        AtomicLong firstAt = new AtomicLong();
        List<DefaultMQPushConsumer> started = new ArrayList<>();
        for (int i = 0; i < consumers; i++) {
            DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
            consumer.setNamesrvAddr(namesrv);
            consumer.setInstanceName("pop_bench_" + i + "_" + System.nanoTime());
            consumer.setClientRebalance(false);
            consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            consumer.setPopBatchNums(32);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
                firstAt.compareAndSet(0, System.nanoTime());
                consumed.addAndGet(messages.size());
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.start();
            started.add(consumer);
        }
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (consumed.get() < expected && System.currentTimeMillis() < deadline) {
            Thread.sleep(20);
        }
        long end = System.nanoTime();
        long count = consumed.get();
        for (DefaultMQPushConsumer consumer : started) {
            consumer.shutdown();
        }
        double seconds = firstAt.get() == 0 ? 0 : (end - firstAt.get()) / 1e9;
        System.out.printf("consumers=%d consumed=%d expected=%d seconds=%.2f tps=%.0f%n",
            consumers, count, expected, seconds, seconds > 0 ? count / seconds : 0.0);
        // Client threads left by shutdown would keep the JVM alive.
        System.exit(0);
    }
}
