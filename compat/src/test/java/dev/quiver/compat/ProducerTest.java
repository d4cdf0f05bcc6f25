package dev.quiver.compat;

import static dev.quiver.compat.Compat.body;
import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** DefaultMQProducer: sync, async, oneway and batch sends, and sends to a chosen queue. */
@Timeout(120)
class ProducerTest {
    private DefaultMQProducer producer;

    @BeforeEach
    void start() throws Exception {
        producer = Compat.producer();
    }

    @AfterEach
    void stop() {
        producer.shutdown();
    }

    private static Message message(String topic, int i) {
        Message message = new Message(topic, i % 2 == 0 ? "TagA" : "TagB", "key-" + i, ("body-" + i).getBytes(UTF_8));
        message.putUserProperty("seq", Integer.toString(i));
        message.putUserProperty("color", "blue");
        return message;
    }

    private static void assertSameContent(int i, MessageExt got) {
        assertEquals("body-" + i, body(got));
        assertEquals("key-" + i, got.getKeys());
        assertEquals(i % 2 == 0 ? "TagA" : "TagB", got.getTags());
        assertEquals(Integer.toString(i), got.getUserProperty("seq"));
        assertEquals("blue", got.getUserProperty("color"));
    }

    private static Map<String, MessageExt> byBody(List<MessageExt> messages) {
        Map<String, MessageExt> map = new HashMap<>();
        for (MessageExt message : messages) {
            map.put(body(message), message);
        }
        return map;
    }

    @Test
    void syncSendsArriveWithKeysTagsPropertiesAndTheirOffsets() throws Exception {
        String topic = Compat.createTopic(producer, "sync", 4);
        List<SendResult> results = new ArrayList<>();
        for (int i = 0; i < 12; i++) {
            SendResult result = producer.send(message(topic, i));
            assertEquals(SendStatus.SEND_OK, result.getSendStatus());
            assertEquals(topic, result.getMessageQueue().getTopic());
            assertNotNull(result.getOffsetMsgId());
            results.add(result);
        }
        Map<String, MessageExt> got = byBody(Compat.readTopic(topic, 12));
        assertEquals(12, got.size());
        for (int i = 0; i < 12; i++) {
            MessageExt message = got.get("body-" + i);
            assertNotNull(message, "body-" + i);
            assertSameContent(i, message);
            SendResult result = results.get(i);
            assertEquals(result.getMsgId(), message.getMsgId());
            assertEquals(result.getMessageQueue().getQueueId(), message.getQueueId());
            assertEquals(result.getQueueOffset(), message.getQueueOffset());
            assertEquals(topic, message.getTopic());
        }
    }

    @Test
    void asyncSendsAllSucceedAndArrive() throws Exception {
        String topic = Compat.createTopic(producer, "async", 4);
        int count = 30;
        CountDownLatch done = new CountDownLatch(count);
        Map<Integer, SendResult> results = new ConcurrentHashMap<>();
        List<Throwable> failures = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            int index = i;
            producer.send(message(topic, i), new SendCallback() {
                @Override
                public void onSuccess(SendResult result) {
                    results.put(index, result);
                    done.countDown();
                }

                @Override
                public void onException(Throwable error) {
                    synchronized (failures) {
                        failures.add(error);
                    }
                    done.countDown();
                }
            });
        }
        assertTrue(done.await(60, TimeUnit.SECONDS), "async callbacks within 60 s");
        assertTrue(failures.isEmpty(), "async failures: " + failures);
        Map<String, MessageExt> got = byBody(Compat.readTopic(topic, count));
        assertEquals(count, got.size());
        for (int i = 0; i < count; i++) {
            assertEquals(SendStatus.SEND_OK, results.get(i).getSendStatus());
            assertSameContent(i, got.get("body-" + i));
            assertEquals(results.get(i).getMsgId(), got.get("body-" + i).getMsgId());
        }
    }

    @Test
    void onewaySendsArrive() throws Exception {
        String topic = Compat.createTopic(producer, "oneway", 2);
        for (int i = 0; i < 10; i++) {
            producer.sendOneway(message(topic, i));
        }
        Map<String, MessageExt> got = byBody(Compat.readTopic(topic, 10));
        assertEquals(10, got.size());
        for (int i = 0; i < 10; i++) {
            assertSameContent(i, got.get("body-" + i));
        }
    }

    @Test
    void batchIsStoredInOrderWithConsecutiveOffsets() throws Exception {
        String topic = Compat.createTopic(producer, "batch", 4);
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            batch.add(message(topic, i));
        }
        SendResult result = producer.send(batch);
        assertEquals(SendStatus.SEND_OK, result.getSendStatus());
        assertEquals(5, result.getMsgId().split(",").length, result.getMsgId());
        assertEquals(5, result.getOffsetMsgId().split(",").length, result.getOffsetMsgId());
        int queueId = result.getMessageQueue().getQueueId();
        List<MessageExt> got = Compat.readQueue(topic, queueId, 5);
        assertEquals(5, got.size());
        String[] ids = result.getMsgId().split(",");
        for (int i = 0; i < 5; i++) {
            assertSameContent(i, got.get(i));
            assertEquals(result.getQueueOffset() + i, got.get(i).getQueueOffset());
            assertEquals(ids[i], got.get(i).getMsgId());
        }
    }

    @Test
    void sendsToAChosenQueueLandThereInOrder() throws Exception {
        String topic = Compat.createTopic(producer, "chosen", 4);
        for (int i = 0; i < 6; i++) {
            SendResult result = producer.send(message(topic, i), (queues, msg, arg) -> queues.get((Integer) arg), 2);
            assertEquals(2, result.getMessageQueue().getQueueId());
            assertEquals(i, result.getQueueOffset());
        }
        MessageQueue three = null;
        for (MessageQueue queue : producer.fetchPublishMessageQueues(topic)) {
            if (queue.getQueueId() == 3) {
                three = queue;
            }
        }
        assertNotNull(three);
        SendResult direct = producer.send(message(topic, 6), three);
        assertEquals(3, direct.getMessageQueue().getQueueId());
        List<MessageExt> onTwo = Compat.readQueue(topic, 2, 6);
        for (int i = 0; i < 6; i++) {
            assertSameContent(i, onTwo.get(i));
            assertEquals(i, onTwo.get(i).getQueueOffset());
            assertEquals(2, onTwo.get(i).getQueueId());
        }
        List<MessageExt> onThree = Compat.readQueue(topic, 3, 1);
        assertEquals(1, onThree.size());
        assertSameContent(6, onThree.get(0));
        Set<Integer> others = new TreeSet<>();
        for (MessageExt message : Compat.readTopic(topic, 7)) {
            others.add(message.getQueueId());
        }
        assertEquals(Set.of(2, 3), others);
    }
}
