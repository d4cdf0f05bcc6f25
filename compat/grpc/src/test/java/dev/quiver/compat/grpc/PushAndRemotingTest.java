package dev.quiver.compat.grpc;

import static dev.quiver.compat.grpc.Grpc.body;
import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.Test;

/** The PushConsumer over gRPC, and messages crossing between the gRPC and remoting clients. */
class PushAndRemotingTest {
    @Test
    void aPushConsumerConsumesEveryMessageAndAFailedOneIsRedelivered() throws Exception {
        String topic = Grpc.createTopic("GrpcPush", "NORMAL");
        String group = Grpc.unique("GrpcPush");
        ConcurrentMap<String, Integer> attempts = new ConcurrentHashMap<>();
        AtomicInteger failures = new AtomicInteger();
        PushConsumer consumer = Grpc.PROVIDER.newPushConsumerBuilder()
            .setClientConfiguration(Grpc.tls())
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Map.of(topic, new FilterExpression("*", FilterExpressionType.TAG)))
            .setMessageListener(message -> {
                String text = body(message);
                attempts.merge(text, message.getDeliveryAttempt(), Math::max);
                if (text.equals("fail once") && message.getDeliveryAttempt() == 1) {
                    failures.incrementAndGet();
                    return ConsumeResult.FAILURE;
                }
                return ConsumeResult.SUCCESS;
            })
            .build();
        try (consumer; Producer producer = Grpc.producer(Grpc.tls(), topic)) {
            for (int i = 0; i < 10; i++) {
                producer.send(Grpc.PROVIDER.newMessageBuilder().setTopic(topic)
                    .setBody(("message " + i).getBytes(UTF_8)).build());
            }
            producer.send(Grpc.PROVIDER.newMessageBuilder().setTopic(topic)
                .setBody("fail once".getBytes(UTF_8)).build());
            Grpc.waitFor("every message consumed, the failed one again", Grpc.WAIT,
                () -> attempts.size() == 11 && attempts.get("fail once") == 2 ? Optional.of(true) : Optional.empty());
            assertEquals(1, failures.get());
        }
    }

    @Test
    void aRemotingProducersMessageIsReceivedOverGrpcAndAGrpcProducersIsPulledOverRemoting() throws Exception {
        String topic = Grpc.createTopic("GrpcCross", "NORMAL");
        DefaultMQProducer remoting = new DefaultMQProducer(Grpc.unique("remoting"));
        remoting.setNamesrvAddr(Grpc.NAMESRV);
        remoting.setInstanceName(Grpc.unique("p"));
        remoting.start();
        try {
            org.apache.rocketmq.common.message.Message message =
                new org.apache.rocketmq.common.message.Message(topic, "from-remoting", "rk", "remoting body".getBytes(UTF_8));
            message.putUserProperty("origin", "remoting");
            assertEquals(SendStatus.SEND_OK, remoting.send(message).getSendStatus());
        } finally {
            remoting.shutdown();
        }
        try (SimpleConsumer consumer = Grpc.simpleConsumer(Grpc.unique("GrpcCross"), topic, "*")) {
            MessageView received = Grpc.receive(consumer, 1, Duration.ofSeconds(30), true).get(0);
            assertEquals("remoting body", body(received));
            assertEquals("from-remoting", received.getTag().orElseThrow());
            assertEquals(List.of("rk"), List.copyOf(received.getKeys()));
            assertEquals("remoting", received.getProperties().get("origin"));
        }

        try (Producer producer = Grpc.producer(Grpc.tls(), topic)) {
            producer.send(Grpc.PROVIDER.newMessageBuilder().setTopic(topic).setTag("from-grpc")
                .setKeys("gk").addProperty("origin", "grpc").setBody("grpc body".getBytes(UTF_8)).build());
        }
        DefaultLitePullConsumer pull = new DefaultLitePullConsumer(Grpc.unique("RemotingPull"));
        pull.setNamesrvAddr(Grpc.NAMESRV);
        pull.setInstanceName(Grpc.unique("c"));
        pull.setAutoCommit(false);
        pull.start();
        try {
            Collection<MessageQueue> queues = pull.fetchMessageQueues(topic);
            pull.assign(new ArrayList<>(queues));
            for (MessageQueue queue : queues) {
                pull.seekToBegin(queue);
            }
            MessageExt fromGrpc = Grpc.waitFor("the gRPC message pulled over remoting", Grpc.WAIT, () -> {
                for (MessageExt pulled : pull.poll(500)) {
                    if ("from-grpc".equals(pulled.getTags())) {
                        return Optional.of(pulled);
                    }
                }
                return Optional.empty();
            });
            assertEquals("grpc body", new String(fromGrpc.getBody(), UTF_8));
            assertEquals("gk", fromGrpc.getKeys());
            assertEquals("grpc", fromGrpc.getUserProperty("origin"));
        } finally {
            pull.shutdown();
        }
    }
}
