package dev.quiver.compat;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Transactional messages with TransactionMQProducer: the local transaction commits some
 * messages, rolls back some and answers UNKNOW for the rest, which the broker then checks
 * (CHECK_TRANSACTION_STATE) and the listener's checkLocalTransaction commits, at its second
 * check. A push consumer gets exactly the committed messages, each once, and none before its
 * commit. compat/run.sh sets transactionTimeOut=5000 and transactionCheckInterval=1000 on both
 * servers, and on RocketMQ transactionOpBatchInterval=100: with its default of 3 s a check round
 * runs before the op record of a commit made at the previous round's check is written, asks
 * again, and RocketMQ stores the message a second time.
 */
@Timeout(180)
class TransactionTest {
    private static final int EACH = 5;
    private TransactionMQProducer producer;
    private DefaultMQPushConsumer consumer;

    @AfterEach
    void stop() {
        if (consumer != null) {
            consumer.shutdown();
        }
        if (producer != null) {
            producer.shutdown();
        }
    }

    /** What the producer decided for each key, and when, by this JVM's clock. */
    private static final class Ledger implements TransactionListener {
        final Map<String, Long> committedAt = new ConcurrentHashMap<>();
        final Map<String, AtomicInteger> checks = new ConcurrentHashMap<>();

        private LocalTransactionState decide(String key, boolean checking) {
            if (key.startsWith("commit") || (key.startsWith("unknown") && checking
                && checks.get(key).get() >= 2)) {
                committedAt.putIfAbsent(key, System.currentTimeMillis());
                return LocalTransactionState.COMMIT_MESSAGE;
            }
            if (key.startsWith("rollback")) {
                return LocalTransactionState.ROLLBACK_MESSAGE;
            }
            return LocalTransactionState.UNKNOW;
        }

        @Override
        public LocalTransactionState executeLocalTransaction(Message message, Object arg) {
            return decide(message.getKeys(), false);
        }

        @Override
        public LocalTransactionState checkLocalTransaction(MessageExt message) {
            String key = message.getKeys();
            checks.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet();
            return decide(key, true);
        }
    }

    @Test
    void consumersSeeExactlyTheCommittedMessagesOnceAndNotBeforeTheirCommit() throws Exception {
        String group = Compat.unique("tx_producer");
        Ledger ledger = new Ledger();
        producer = new TransactionMQProducer(group);
        producer.setNamesrvAddr(Compat.NAMESRV);
        producer.setInstanceName(Compat.unique("tp"));
        producer.setSendMsgTimeout(10_000);
        // The broker checks only producers it knows from a heartbeat; the first one after the
        // topic's route is learned would otherwise come up to 30 s later.
        producer.setHeartbeatBrokerInterval(1_000);
        producer.setPollNameServerInterval(1_000);
        producer.setTransactionListener(ledger);
        producer.start();
        String topic = Compat.createTopic(producer, "tx", 2);

        Map<String, Long> receivedAt = new ConcurrentHashMap<>();
        Map<String, AtomicInteger> deliveries = new ConcurrentHashMap<>();
        consumer = Compat.pushConsumer(Compat.unique("tx_consumer"));
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            long now = System.currentTimeMillis();
            for (MessageExt message : messages) {
                receivedAt.putIfAbsent(message.getKeys(), now);
                deliveries.computeIfAbsent(message.getKeys(), k -> new AtomicInteger()).incrementAndGet();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        for (String kind : new String[] {"commit", "rollback", "unknown"}) {
            for (int i = 0; i < EACH; i++) {
                String key = kind + i;
                Message message = new Message(topic, "TagX", key, ("body of " + key).getBytes(UTF_8));
                SendResult sent = producer.sendMessageInTransaction(message, null);
                assertEquals(SendStatus.SEND_OK, sent.getSendStatus(), sent.toString());
            }
        }
        Compat.waitUntil("the committed and the checked messages", Compat.WAIT,
            () -> deliveries.size() >= 2 * EACH);

        // One more UNKNOW message, committed at its second check: when it arrives, check
        // rounds have passed over every other half too.
        String last = "unknown_last";
        producer.sendMessageInTransaction(new Message(topic, "TagX", last, "last".getBytes(UTF_8)), null);
        Compat.waitUntil("the last checked message", Compat.WAIT, () -> deliveries.containsKey(last));

        Map<String, Integer> counts = new TreeMap<>();
        deliveries.forEach((key, n) -> counts.put(key, n.get()));
        Map<String, Integer> expected = new TreeMap<>();
        for (int i = 0; i < EACH; i++) {
            expected.put("commit" + i, 1);
            expected.put("unknown" + i, 1);
        }
        expected.put(last, 1);
        assertEquals(expected, counts, "each committed message once, no rolled-back one");
        for (Map.Entry<String, Long> received : receivedAt.entrySet()) {
            Long committed = ledger.committedAt.get(received.getKey());
            assertTrue(committed != null && received.getValue() >= committed,
                received.getKey() + " arrived before its commit");
        }
        Map<String, Integer> checked = new HashMap<>();
        ledger.checks.forEach((key, n) -> checked.put(key, n.get()));
        for (int i = 0; i < EACH; i++) {
            assertTrue(checked.getOrDefault("unknown" + i, 0) >= 2, "unknown" + i + " checked twice: " + checked);
        }
        System.out.printf("transactions (client %s): checks per key %s%n",
            System.getProperty("compat.clientVersion"), new TreeMap<>(checked));
    }
}
