package dev.quiver.compat.grpc;

import static dev.quiver.compat.grpc.Grpc.body;
import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.remoting.protocol.body.ConsumerConnection;
import org.apache.rocketmq.remoting.protocol.body.ProducerConnection;
import org.junit.jupiter.api.Test;

/** Producers and SimpleConsumers over gRPC: sends, receives, acks and invisible time. */
class SimpleConsumerTest {
    @Test
    void aProducerOverTlsSendsAndASimpleConsumerReceivesEachMessageOnceWithItsFields() throws Exception {
        String topic = Grpc.createTopic("GrpcNormal", "NORMAL");
        String group = Grpc.unique("GrpcSimple");
        Map<String, SendReceipt> sent = new HashMap<>();
        try (Producer producer = Grpc.producer(Grpc.tls(), topic)) {
            for (int i = 0; i < 20; i++) {
                Message message = Grpc.PROVIDER.newMessageBuilder()
                    .setTopic(topic)
                    .setTag(i % 2 == 0 ? "even" : "odd")
                    .setKeys("key-" + i)
                    .addProperty("index", Integer.toString(i))
                    .setBody(("message " + i).getBytes(UTF_8))
                    .build();
                SendReceipt receipt = producer.send(message);
                sent.put(receipt.getMessageId().toString(), receipt);
            }
        }
        try (SimpleConsumer consumer = Grpc.simpleConsumer(group, topic, "*")) {
            List<MessageView> received = Grpc.receive(consumer, 20, Duration.ofSeconds(30), true);
            assertEquals(20, received.size(), "every message is received");
            Set<String> ids = new HashSet<>();
            for (MessageView message : received) {
                assertTrue(ids.add(message.getMessageId().toString()), "received once: " + message);
                assertTrue(sent.containsKey(message.getMessageId().toString()), "an id the producer was given");
                int index = Integer.parseInt(message.getProperties().get("index"));
                assertEquals("message " + index, body(message));
                assertEquals(index % 2 == 0 ? "even" : "odd", message.getTag().orElseThrow());
                assertEquals(List.of("key-" + index), List.copyOf(message.getKeys()));
                assertEquals(topic, message.getTopic());
                assertEquals(1, message.getDeliveryAttempt());
            }
            // Everything was acknowledged: nothing comes back.
            assertTrue(consumer.receive(16, Duration.ofSeconds(10)).isEmpty(), "acknowledged messages stay gone");
        }
    }

    @Test
    void plaintextAndTlsClientsShareTheGrpcPortAndATagFilterHoldsBackOtherTags() throws Exception {
        String topic = Grpc.createTopic("GrpcPlain", "NORMAL");
        String group = Grpc.unique("GrpcPlain");
        try (Producer producer = Grpc.producer(Grpc.plaintext(), topic)) {
            for (String tag : List.of("a", "b", "a", "c")) {
                producer.send(Grpc.PROVIDER.newMessageBuilder().setTopic(topic).setTag(tag)
                    .setBody(tag.getBytes(UTF_8)).build());
            }
        }
        try (SimpleConsumer consumer = Grpc.simpleConsumer(group, topic, "a || c")) {
            List<MessageView> received = Grpc.receive(consumer, 3, Duration.ofSeconds(30), true);
            List<String> tags = received.stream().map(m -> m.getTag().orElseThrow()).sorted().toList();
            assertEquals(List.of("a", "a", "c"), tags);
            assertTrue(consumer.receive(16, Duration.ofSeconds(10)).isEmpty(), "tag b is filtered out");
        }
    }

    @Test
    void anUnacknowledgedMessageComesBackAfterTheInvisibleDurationItWasChangedTo() throws Exception {
        String topic = Grpc.createTopic("GrpcInvisible", "NORMAL");
        String group = Grpc.unique("GrpcInvisible");
        try (Producer producer = Grpc.producer(Grpc.tls(), topic)) {
            producer.send(Grpc.PROVIDER.newMessageBuilder().setTopic(topic).setBody("again".getBytes(UTF_8)).build());
        }
        try (SimpleConsumer consumer = Grpc.simpleConsumer(group, topic, "*")) {
            MessageView first = Grpc.receive(consumer, 1, Duration.ofMinutes(5), false).get(0);
            assertEquals(1, first.getDeliveryAttempt());
            long changed = System.currentTimeMillis();
            consumer.changeInvisibleDuration(first, Duration.ofSeconds(2));
            MessageView second = Grpc.receive(consumer, 1, Duration.ofSeconds(30), false).get(0);
            long after = System.currentTimeMillis() - changed;
            assertEquals(first.getMessageId(), second.getMessageId());
            assertEquals("again", body(second));
            assertEquals(2, second.getDeliveryAttempt(), "the second delivery counts as one");
            assertTrue(after >= 1_500, "back after the new invisible duration, not before: " + after + " ms");
            assertTrue(after < 30_000, "and long before the first one: " + after + " ms");
            consumer.ack(second);
            assertTrue(consumer.receive(16, Duration.ofSeconds(10)).isEmpty(), "the ack with the handle the change gave holds");
        }
    }

    /**
     * Served by the broker itself, gRPC clients are the broker's own clients. Behind RocketMQ's
     * proxy the broker sees only the proxy (-Dcompat.grpcViaProxy=true skips this).
     */
    @Test
    void mqadminListsGrpcClientsAmongTheConnections() throws Exception {
        org.junit.jupiter.api.Assumptions.assumeFalse(Boolean.getBoolean("compat.grpcViaProxy"),
            "behind RocketMQ's proxy the broker lists the proxy, not its clients");
        String topic = Grpc.createTopic("GrpcVisible", "NORMAL");
        String group = Grpc.unique("GrpcVisible");
        try (Producer producer = Grpc.producer(Grpc.tls(), topic);
             SimpleConsumer consumer = Grpc.simpleConsumer(group, topic, "*")) {
            producer.send(Grpc.PROVIDER.newMessageBuilder().setTopic(topic).setBody("x".getBytes(UTF_8)).build());
            ConsumerConnection consumers = Grpc.waitFor("the gRPC consumer among the connections", Grpc.WAIT, () -> {
                try {
                    return java.util.Optional.of(Grpc.admin().examineConsumerConnectionInfo(group))
                        .filter(c -> !c.getConnectionSet().isEmpty());
                } catch (Exception e) {
                    return java.util.Optional.empty();
                }
            });
            var connection = consumers.getConnectionSet().iterator().next();
            assertEquals("JAVA", connection.getLanguage().name());
            assertTrue(connection.getClientAddr().startsWith("127.0.0.1:"), connection.getClientAddr());
            assertTrue(consumers.getSubscriptionTable().containsKey(topic), "its subscription is listed");
            // The proxy's producer group for a gRPC producer is the topic.
            ProducerConnection producers = Grpc.admin().examineProducerConnectionInfo(topic, topic);
            assertEquals(1, producers.getConnectionSet().size());
            assertEquals("JAVA", producers.getConnectionSet().iterator().next().getLanguage().name());
        }
    }
}
