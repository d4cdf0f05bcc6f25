package dev.quiver.compat.grpc;

import static dev.quiver.compat.grpc.Grpc.body;
import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;
import org.junit.jupiter.api.Test;

/** FIFO, delayed and transactional messages over gRPC. */
class MessageTypesTest {
    @Test
    void theMessagesOfAMessageGroupAreReceivedInTheOrderTheyWereSent() throws Exception {
        String topic = Grpc.createTopic("GrpcFifo", "FIFO");
        String group = Grpc.createGroup("GrpcFifo", true);
        try (Producer producer = Grpc.producer(Grpc.tls(), topic)) {
            for (int i = 0; i < 10; i++) {
                for (String messageGroup : List.of("alpha", "beta", "gamma")) {
                    producer.send(Grpc.PROVIDER.newMessageBuilder()
                        .setTopic(topic)
                        .setMessageGroup(messageGroup)
                        .setBody((messageGroup + " " + i).getBytes(UTF_8))
                        .build());
                }
            }
        }
        Map<String, List<Integer>> seen = new HashMap<>();
        try (SimpleConsumer consumer = Grpc.simpleConsumer(group, topic, "*")) {
            for (MessageView message : Grpc.receive(consumer, 30, Duration.ofSeconds(30), true)) {
                String[] parts = body(message).split(" ");
                assertEquals(parts[0], message.getMessageGroup().orElseThrow());
                seen.computeIfAbsent(parts[0], g -> new ArrayList<>()).add(Integer.parseInt(parts[1]));
            }
        }
        List<Integer> inOrder = List.of(0, 1, 2, 3, 4, 5, 6, 7, 8, 9);
        assertEquals(Map.of("alpha", inOrder, "beta", inOrder, "gamma", inOrder), seen);
    }

    @Test
    void aDelayedMessageIsReceivedAtItsDeliveryTimeAndNotBefore() throws Exception {
        String topic = Grpc.createTopic("GrpcDelay", "DELAY");
        String group = Grpc.unique("GrpcDelay");
        long due;
        try (Producer producer = Grpc.producer(Grpc.tls(), topic);
             SimpleConsumer consumer = Grpc.simpleConsumer(group, topic, "*")) {
            due = System.currentTimeMillis() + 4_000;
            producer.send(Grpc.PROVIDER.newMessageBuilder()
                .setTopic(topic)
                .setDeliveryTimestamp(due)
                .setBody("later".getBytes(UTF_8))
                .build());
            MessageView message = Grpc.receive(consumer, 1, Duration.ofSeconds(30), true).get(0);
            long received = System.currentTimeMillis();
            assertEquals("later", body(message));
            assertEquals(due, message.getDeliveryTimestamp().orElseThrow());
            // The timer wheel's precision is a second.
            assertTrue(received >= due - 1_000, "received " + (due - received) + " ms before its time");
        }
    }

    @Test
    void transactionsCommitRollBackAndAnOrphanIsSettledByTheChecker() throws Exception {
        String topic = Grpc.createTopic("GrpcTransaction", "TRANSACTION");
        String group = Grpc.unique("GrpcTransaction");
        Set<String> checked = ConcurrentHashMap.newKeySet();
        Producer producer = Grpc.PROVIDER.newProducerBuilder()
            .setClientConfiguration(Grpc.tls())
            .setTopics(topic)
            .setTransactionChecker(message -> {
                checked.add(body(message));
                return TransactionResolution.COMMIT;
            })
            .build();
        try (producer; SimpleConsumer consumer = Grpc.simpleConsumer(group, topic, "*")) {
            Map<String, SendReceipt> receipts = new HashMap<>();
            for (String outcome : List.of("commit", "rollback", "orphan")) {
                Transaction transaction = producer.beginTransaction();
                receipts.put(outcome, producer.send(Grpc.PROVIDER.newMessageBuilder()
                    .setTopic(topic)
                    .setBody(outcome.getBytes(UTF_8))
                    .build(), transaction));
                if (outcome.equals("commit")) {
                    transaction.commit();
                } else if (outcome.equals("rollback")) {
                    transaction.rollback();
                }
            }
            // The orphan is committed once the broker asks the producer about it.
            List<String> bodies = Grpc.receive(consumer, 2, Duration.ofSeconds(30), true).stream()
                .map(Grpc::body).sorted().toList();
            assertEquals(List.of("commit", "orphan"), bodies);
            assertTrue(checked.contains("orphan"), "the checker was asked about the orphan: " + checked);
            assertFalse(checked.contains("commit"), "a committed half is not checked: " + checked);
            assertTrue(consumer.receive(16, Duration.ofSeconds(10)).isEmpty(), "the rolled-back half never shows");
        }
    }
}
