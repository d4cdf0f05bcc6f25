package dev.quiver.compat;

import static dev.quiver.compat.Compat.WAIT;
import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Message trace: a producer and a consumer with trace on send their trace records to
 * RMQ_SYS_TRACE_TOPIC (compat/run.sh starts the broker with traceTopicEnable=true), and
 * `mqadmin queryMsgTraceById` finds them by the traced message's id through the key index.
 */
@Tag("tools")
@Timeout(300)
class TraceTest {
    private DefaultMQProducer producer;
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

    /** A row of queryMsgTraceById's output: its type column first, then the group. */
    private static boolean hasRow(String output, String type, String group) {
        return output.lines().anyMatch(line -> {
            String[] columns = line.trim().split("\\s+");
            return columns.length > 2 && columns[0].equals(type) && columns[1].equals(group);
        });
    }

    @Test
    void queryMsgTraceByIdShowsThePublishAndTheConsumption() throws Exception {
        String producerGroup = Compat.unique("traced_producer");
        String consumerGroup = Compat.unique("traced_consumer");
        // Neither client has a constructor taking only the group and the trace switch in both
        // 4.9.7 and 5.5.0; a null trace topic means RMQ_SYS_TRACE_TOPIC.
        producer = new DefaultMQProducer(producerGroup, true, null);
        producer.setNamesrvAddr(Compat.NAMESRV);
        producer.setInstanceName(Compat.unique("p"));
        producer.setSendMsgTimeout(10_000);
        producer.start();
        String topic = Compat.createTopic(producer, "traced", 1);

        List<String> consumed = new CopyOnWriteArrayList<>();
        consumer = new DefaultMQPushConsumer(consumerGroup, true, null);
        consumer.setNamesrvAddr(Compat.NAMESRV);
        consumer.setInstanceName(Compat.unique("c"));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setPollNameServerInterval(1000);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                consumed.add(message.getMsgId());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        SendResult sent = producer.send(new Message(topic, "TagT", "order-1", "traced".getBytes(UTF_8)));
        assertEquals(SendStatus.SEND_OK, sent.getSendStatus());
        String msgId = sent.getMsgId();
        Compat.waitUntil("the traced message consumed", WAIT, () -> consumed.contains(msgId));

        // Trace records go out in batches from a background dispatcher: ask until both are in.
        String trace = Compat.waitFor("trace rows of " + msgId, Duration.ofSeconds(90), () -> {
            try {
                String output = Tools.mqadmin("queryMsgTraceById", "-i", msgId);
                return hasRow(output, "Pub", producerGroup) && hasRow(output, "Sub", consumerGroup)
                    ? Optional.of(output) : Optional.empty();
            } catch (Exception e) {
                throw new AssertionError(e);
            }
        });
        String subRow = trace.lines().filter(line -> line.trim().startsWith("Sub")).findFirst().orElseThrow();
        assertTrue(subRow.contains("success"), subRow);
        String pubRow = trace.lines().filter(line -> line.trim().startsWith("Pub")).findFirst().orElseThrow();
        assertTrue(pubRow.contains("success"), pubRow);
    }
}
