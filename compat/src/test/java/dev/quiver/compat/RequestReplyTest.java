package dev.quiver.compat;

import static dev.quiver.compat.Compat.WAIT;
import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.RequestTimeoutException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.RequestCallback;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Request-reply: {@code producer.request} sends a request; a consumer answers it with
 * {@code MessageUtil.createReplyMessage} and a plain {@code send}, which the client turns into
 * SEND_REPLY_MESSAGE_V2; the broker pushes the reply to the requesting client.
 */
@Timeout(180)
class RequestReplyTest {
    private static final long REQUEST_TIMEOUT_MS = 30_000;
    private DefaultMQProducer requester;
    private DefaultMQProducer replier;
    private final List<DefaultMQPushConsumer> consumers = new ArrayList<>();

    @BeforeEach
    void start() throws Exception {
        requester = Compat.producer();
        replier = Compat.producer();
    }

    @AfterEach
    void stop() {
        for (DefaultMQPushConsumer consumer : consumers) {
            consumer.shutdown();
        }
        replier.shutdown();
        requester.shutdown();
    }

    /** A consumer of `topic` that answers every request with "re:" and the request's body. */
    private void startResponder(String topic) throws Exception {
        DefaultMQPushConsumer consumer = Compat.pushConsumer(Compat.unique("responders"));
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt request : messages) {
                if (request.getProperty("REPLY_TO_CLIENT") == null) {
                    continue; // the warm-up message below
                }
                try {
                    Message reply = MessageUtil.createReplyMessage(request, ("re:" + Compat.body(request)).getBytes(UTF_8));
                    replier.send(reply, 10_000);
                } catch (Exception e) {
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        consumers.add(consumer);
    }

    /**
     * The broker pushes a reply to the client that heartbeated with the request's
     * REPLY_TO_CLIENT. A 4.9.7 client sends its first heartbeat on a timer, once it knows a
     * broker: send once (which connects) and heartbeat now, so the first reply does not race it
     * (on either server).
     */
    private void registerRequester(String topic) throws Exception {
        requester.send(new Message(topic, "warm-up".getBytes(UTF_8)));
        requester.getDefaultMQProducerImpl().getMqClientFactory().sendHeartbeatToAllBrokerWithLock();
    }

    private static Message request(String topic, String body) {
        return new Message(topic, body.getBytes(UTF_8));
    }

    @Test
    void aSyncRequestReturnsTheConsumersReply() throws Exception {
        String topic = Compat.createTopic(requester, "request", 2);
        registerRequester(topic);
        startResponder(topic);
        for (int i = 0; i < 3; i++) {
            Message reply = requester.request(request(topic, "ping-" + i), REQUEST_TIMEOUT_MS);
            assertEquals("re:ping-" + i, new String(reply.getBody(), UTF_8));
            assertEquals("DefaultCluster_REPLY_TOPIC", reply.getTopic());
        }
    }

    @Test
    void anAsyncRequestCallsItsCallbackWithTheReply() throws Exception {
        String topic = Compat.createTopic(requester, "request_async", 2);
        registerRequester(topic);
        startResponder(topic);
        List<CompletableFuture<Message>> replies = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            CompletableFuture<Message> reply = new CompletableFuture<>();
            requester.request(request(topic, "async-" + i), new RequestCallback() {
                @Override
                public void onSuccess(Message message) {
                    // Both clients call onSuccess once with null when the request is sent, and
                    // again with the reply.
                    if (message != null) {
                        reply.complete(message);
                    }
                }

                @Override
                public void onException(Throwable e) {
                    reply.completeExceptionally(e);
                }
            }, REQUEST_TIMEOUT_MS);
            replies.add(reply);
        }
        for (int i = 0; i < 3; i++) {
            Message reply = replies.get(i).get(WAIT.toMillis(), TimeUnit.MILLISECONDS);
            assertEquals("re:async-" + i, new String(reply.getBody(), UTF_8));
        }
    }

    @Test
    void aRequestNobodyAnswersTimesOut() throws Exception {
        String topic = Compat.createTopic(requester, "request_unanswered", 1);
        RequestTimeoutException timeout = assertThrows(RequestTimeoutException.class,
            () -> requester.request(request(topic, "anyone?"), 2_000));
        assertTrue(timeout.getMessage().contains("wait reply message timeout"), timeout.getMessage());
    }
}
