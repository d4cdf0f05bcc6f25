package dev.quiver.compat;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * RocketMQ 5 timer messages (`Message.setDeliverTimeMs`, TIMER_DELIVER_MS): a push consumer gets
 * each one at its time, not before and at most about a second after, with the properties
 * RocketMQ adds (TIMER_OUT_MS); one due further ahead than the broker's timerMaxDelaySec (3 days)
 * is refused with MESSAGE_ILLEGAL. The 4.9.7 client has no setter: it sets the same property by
 * name, which its broker-side meaning does not depend on.
 */
@Timeout(120)
class TimerMessageTest {
    private static final int MESSAGE_ILLEGAL = 13;
    private DefaultMQProducer producer;
    private DefaultMQPushConsumer consumer;

    @BeforeEach
    void start() throws Exception {
        producer = Compat.producer();
    }

    @AfterEach
    void stop() {
        if (consumer != null) {
            consumer.shutdown();
        }
        producer.shutdown();
    }

    /** Message.setDeliverTimeMs on 5.x; the property by name on 4.9.x. */
    private static Message timed(String topic, String key, long deliverAtMs) {
        Message message = new Message(topic, "TagT", key, ("due " + deliverAtMs).getBytes(UTF_8));
        try {
            Message.class.getMethod("setDeliverTimeMs", long.class).invoke(message, deliverAtMs);
        } catch (NoSuchMethodException e) {
            message.putUserProperty("TIMER_DELIVER_MS", Long.toString(deliverAtMs));
        } catch (ReflectiveOperationException e) {
            throw new AssertionError(e);
        }
        return message;
    }

    @Test
    void timerMessagesArriveAtTheirTime() throws Exception {
        String topic = Compat.createTopic(producer, "timer", 2);
        Map<String, Long> receivedAt = new ConcurrentHashMap<>();
        Map<String, MessageExt> received = new ConcurrentHashMap<>();
        consumer = Compat.pushConsumer(Compat.unique("timer_group"));
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            long now = System.currentTimeMillis();
            for (MessageExt message : messages) {
                receivedAt.putIfAbsent(message.getKeys(), now);
                received.putIfAbsent(message.getKeys(), message);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        long due = System.currentTimeMillis() + 4_000;
        for (int i = 0; i < 10; i++) {
            SendResult sent = producer.send(timed(topic, "t" + i, due + i * 100));
            assertEquals(SendStatus.SEND_OK, sent.getSendStatus(), sent.toString());
        }
        Compat.waitUntil("the 10 timer messages", Compat.WAIT, () -> received.size() >= 10);
        long worst = 0;
        for (int i = 0; i < 10; i++) {
            String key = "t" + i;
            long at = receivedAt.get(key);
            long dueAt = due + i * 100;
            assertTrue(at >= dueAt, key + " arrived " + (dueAt - at) + " ms early");
            worst = Math.max(worst, at - dueAt);
            MessageExt message = received.get(key);
            assertEquals(topic, message.getTopic());
            assertEquals("TagT", message.getTags());
            assertNotNull(message.getProperty("TIMER_OUT_MS"), message.toString());
            assertEquals(Long.toString(dueAt), message.getProperty("TIMER_DELIVER_MS"), message.toString());
        }
        System.out.printf("timer messages (client %s): worst %d ms after their time%n",
            System.getProperty("compat.clientVersion"), worst);
        assertTrue(worst < 3_000, "a timer message came " + worst + " ms late");
    }

    @Test
    void aTimerFurtherAheadThanTheMaximumIsRefused() throws Exception {
        String topic = Compat.createTopic(producer, "timer_far", 1);
        long fourDays = 4L * 24 * 3600 * 1000;
        MQBrokerException refused = assertThrows(MQBrokerException.class,
            () -> producer.send(timed(topic, "far", System.currentTimeMillis() + fourDays)));
        assertEquals(MESSAGE_ILLEGAL, refused.getResponseCode(), refused.toString());
    }
}
