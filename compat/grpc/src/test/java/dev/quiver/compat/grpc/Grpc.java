package dev.quiver.compat.grpc;

import static java.nio.charset.StandardCharsets.UTF_8;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/** Shared set-up: the gRPC endpoint, an admin client for topics and groups, and waiting. */
final class Grpc {
    /** Set by compat/run.sh to the server it started. */
    static final String NAMESRV = System.getProperty("compat.namesrv", "127.0.0.1:9876");
    static final String ENDPOINT = System.getProperty("compat.grpc", "127.0.0.1:8081");
    static final Duration WAIT = Duration.ofSeconds(60);
    static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();
    private static final AtomicLong SEQUENCE = new AtomicLong();
    private static DefaultMQAdminExt admin;

    private Grpc() {}

    static String unique(String prefix) {
        return prefix + "_" + Long.toString(System.currentTimeMillis(), 36) + "_" + SEQUENCE.incrementAndGet();
    }

    /** The client's defaults but for the endpoint: TLS on, as the Java client has it. */
    static ClientConfiguration tls() {
        return ClientConfiguration.newBuilder().setEndpoints(ENDPOINT).setRequestTimeout(Duration.ofSeconds(10)).build();
    }

    static ClientConfiguration plaintext() {
        return ClientConfiguration.newBuilder()
            .setEndpoints(ENDPOINT)
            .enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10))
            .build();
    }

    static synchronized DefaultMQAdminExt admin() throws Exception {
        if (admin == null) {
            admin = new DefaultMQAdminExt(10_000);
            admin.setNamesrvAddr(NAMESRV);
            admin.setInstanceName(unique("grpc-admin"));
            admin.start();
        }
        return admin;
    }

    static List<String> masters() throws Exception {
        List<String> addresses = new ArrayList<>();
        for (BrokerData broker : admin().examineBrokerClusterInfo().getBrokerAddrTable().values()) {
            addresses.add(broker.getBrokerAddrs().get(0L));
        }
        return addresses;
    }

    /** Creates a topic of `messageType` (NORMAL, FIFO, DELAY, TRANSACTION) on every master. */
    static String createTopic(String prefix, String messageType) throws Exception {
        String topic = unique(prefix);
        TopicConfig config = new TopicConfig(topic, 4, 4);
        config.setAttributes(Map.of("+message.type", messageType));
        for (String master : masters()) {
            admin().createAndUpdateTopicConfig(master, config);
        }
        return topic;
    }

    /** Creates a consumer group; an orderly one has its messages handed out in order. */
    static String createGroup(String prefix, boolean orderly) throws Exception {
        String group = unique(prefix);
        SubscriptionGroupConfig config = new SubscriptionGroupConfig();
        config.setGroupName(group);
        config.setConsumeMessageOrderly(orderly);
        for (String master : masters()) {
            admin().createAndUpdateSubscriptionGroupConfig(master, config);
        }
        return group;
    }

    static Producer producer(ClientConfiguration configuration, String topic) throws Exception {
        return PROVIDER.newProducerBuilder().setClientConfiguration(configuration).setTopics(topic).build();
    }

    static SimpleConsumer simpleConsumer(String group, String topic, String tags) throws Exception {
        return PROVIDER.newSimpleConsumerBuilder()
            .setClientConfiguration(tls())
            .setConsumerGroup(group)
            .setAwaitDuration(Duration.ofSeconds(2))
            .setSubscriptionExpressions(Map.of(topic, new FilterExpression(tags, FilterExpressionType.TAG)))
            .build();
    }

    static String body(MessageView message) {
        ByteBuffer buffer = message.getBody().duplicate();
        byte[] bytes = new byte[buffer.remaining()];
        buffer.get(bytes);
        return new String(bytes, UTF_8);
    }

    /** Receives until `count` messages came or the deadline passed, acknowledging each if `ack`. */
    static List<MessageView> receive(SimpleConsumer consumer, int count, Duration invisible, boolean ack)
        throws Exception {
        List<MessageView> received = new ArrayList<>();
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (received.size() < count && System.nanoTime() < deadline) {
            for (MessageView message : consumer.receive(16, invisible)) {
                received.add(message);
                if (ack) {
                    consumer.ack(message);
                }
            }
        }
        return received;
    }

    static <T> T waitFor(String what, Duration timeout, Supplier<Optional<T>> condition) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (true) {
            Optional<T> value = condition.get();
            if (value.isPresent()) {
                return value.get();
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out after " + timeout + " waiting for " + what);
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
