#!/usr/bin/env python3
"""End-to-end test of the RocketMQ 5 Python client (rocketmq-python-client) against a gRPC endpoint.

usage: grpc_client_test.py ENDPOINT NORMAL_TOPIC FIFO_TOPIC DELAY_TOPIC TRANSACTION_TOPIC ORDERED_GROUP GROUP_PREFIX

The topics must exist with the matching message.type; ORDERED_GROUP must be an orderly group.
Every message carries the property "run" (unique to this run): messages of an earlier run that
are still in a topic are acknowledged and counted as stale, never checked. TLS is left at the
client's default (off). Exits 1 with a message naming the failed step.
"""
import os
import sys
import threading
import time
import uuid
from importlib.metadata import version

from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression, Message,
                      MessageListener, Producer, PushConsumer, SimpleConsumer, TransactionChecker,
                      TransactionResolution)

CLIENT = f"python client {version('rocketmq-python-client')}"
RUN = uuid.uuid4().hex[:12]
TAG = "compat-tag"
AWAIT = 3  # seconds a receive long-polls
DEADLINE = 60  # seconds any wait may take


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


stats = {"sent": 0, "received": 0, "stale": 0}


def ours(message):
    return message.properties.get("run") == RUN


def new_message(topic, body, **properties):
    message = Message()
    message.topic = topic
    message.body = body.encode()
    message.add_property("run", RUN)
    for key, value in properties.items():
        message.add_property(key, value)
    return message


def send(producer, message, transaction=None):
    receipt = producer.send(message, transaction) if transaction else producer.send(message)
    check(receipt is not None and receipt.message_id, f"send to {message.topic}: receipt without a message id: {receipt}")
    stats["sent"] += 1
    return receipt


def simple_consumer(config, group, topic):
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=AWAIT)
    consumer.startup()
    return consumer


def receive_until(consumer, what, done, handle, invisible=30):
    """Receives (each receive long-polls AWAIT s) and hands this run's messages to handle() until
    done() holds; fails after DEADLINE s. Stale messages of other runs are acknowledged."""
    deadline = time.monotonic() + DEADLINE
    while not done():
        if time.monotonic() > deadline:
            raise Failure(f"{what() if callable(what) else what}: timed out after {DEADLINE} s")
        for message in consumer.receive(16, invisible):
            if ours(message):
                stats["received"] += 1
                check_intact(message)
                handle(message)
            else:
                stats["stale"] += 1
                consumer.ack(message)


def check_intact(message):
    check(not message.corrupted,
          f"message {message.message_id} ({message.body!r}): the client marks it corrupted: its body does not match "
          "the body digest the server sent (the client's log, ~/logs/rocketmq_python, has the details)")


def expect_nothing_more(consumer, what):
    for message in consumer.receive(16, 30):
        check(not ours(message), f"{what}: expected no more messages, got {message.message_id} {message.body!r}")
        consumer.ack(message)


def normal_and_invisible(config, producer, topics, prefix):
    normal = topics["normal"]
    receipts = {}
    for i in range(10):
        message = new_message(normal, f"normal {i}", index=str(i))
        message.tag = TAG
        message.keys = f"key-{i}"
        receipts[send(producer, message).message_id] = i

    consumer = simple_consumer(config, prefix + "-simple", normal)
    try:
        seen = {}

        def take(message):
            what = f"simple consumer, message {message.message_id}"
            check(message.message_id in receipts, f"{what}: id matches no send receipt {sorted(receipts)}")
            check(message.message_id not in seen, f"{what}: received twice")
            i = receipts[message.message_id]
            check(message.body == f"normal {i}".encode(), f"{what}: body {message.body!r}, sent 'normal {i}'")
            check(message.tag == TAG, f"{what}: tag {message.tag!r}, sent {TAG!r}")
            check(set(message.keys) == {f"key-{i}"}, f"{what}: keys {message.keys}, sent ['key-{i}']")
            check(message.properties.get("index") == str(i), f"{what}: properties {message.properties}, sent index={i}")
            check(message.topic == normal, f"{what}: topic {message.topic!r}")
            seen[message.message_id] = i
            consumer.ack(message)

        receive_until(consumer, lambda: f"simple consumer ({len(seen)} of 10 received)", lambda: len(seen) == 10, take)
        expect_nothing_more(consumer, "simple consumer after acking all 10")

        # Change invisible duration: the message comes back after the new 2 s, as its second attempt.
        target = send(producer, new_message(normal, "invisible", case="invisible")).message_id
        got = []

        def first(message):
            check(message.message_id == target, f"invisible: unexpected message {message.message_id} {message.body!r}")
            got.append(message)

        receive_until(consumer, "invisible: first delivery", lambda: got, first, invisible=60)
        check(got[0].delivery_attempt == 1, f"invisible: first delivery attempt {got[0].delivery_attempt}, expected 1")
        changed = time.monotonic()
        consumer.change_invisible_duration(got[0], 2)
        again = []

        def second(message):
            check(message.message_id == target, f"invisible: unexpected message {message.message_id} {message.body!r}")
            again.append(message)

        receive_until(consumer, "invisible: redelivery after change_invisible_duration(2 s)", lambda: again, second)
        back_after = time.monotonic() - changed
        check(again[0].delivery_attempt == 2, f"invisible: redelivery attempt {again[0].delivery_attempt}, expected 2")
        check(back_after >= 1.0, f"invisible: came back {back_after:.1f} s after changing to 2 s")
        consumer.ack(again[0])
    finally:
        consumer.shutdown()


def fifo(config, producer, topics, ordered_group):
    for i in range(5):
        for group in ("a", "b"):
            message = new_message(topics["fifo"], f"{group} {i}")
            message.message_group = group
            send(producer, message)
    consumer = simple_consumer(config, ordered_group, topics["fifo"])
    try:
        order = {"a": [], "b": []}

        def take(message):
            group, index = message.body.decode().split()
            check(message.message_group == group, f"fifo: message group {message.message_group!r} for body {message.body!r}")
            expected = len(order[group])
            check(int(index) == expected, f"fifo: group {group} got {index} after {order[group]}, expected {expected}")
            order[group].append(int(index))
            consumer.ack(message)

        receive_until(consumer, lambda: f"fifo (received {order})",
                      lambda: len(order["a"]) == 5 and len(order["b"]) == 5, take)
    finally:
        consumer.shutdown()


def delay(config, producer, topics, prefix):
    consumer = simple_consumer(config, prefix + "-delay", topics["delay"])
    try:
        message = new_message(topics["delay"], "delayed")
        due_seconds = int(time.time()) + 4  # this client takes whole seconds (its example: time.time() + 10)
        message.delivery_timestamp = due_seconds
        due = due_seconds * 1000
        send(producer, message)
        got = []

        def take(message):
            got.append(int(time.time() * 1000))
            consumer.ack(message)

        receive_until(consumer, "delay", lambda: got, take)
        check(got[0] >= due - 1000, f"delay: received {due - got[0]} ms before its delivery time")
    finally:
        consumer.shutdown()
    return got[0] - due


class Checker(TransactionChecker):
    def __init__(self):
        self.checked = []

    def check(self, message):
        body = message.body.decode()
        if message.properties.get("run") == RUN:
            self.checked.append(body)
        return TransactionResolution.COMMIT if body == "orphan" else TransactionResolution.ROLLBACK


def transactions(config, producer, checker, topics, prefix):
    topic = topics["transaction"]
    consumer = simple_consumer(config, prefix + "-tx", topic)
    try:
        for outcome in ("commit", "rollback", "orphan"):
            transaction = producer.begin_transaction()
            send(producer, new_message(topic, outcome), transaction)
            if outcome == "commit":
                transaction.commit()
            elif outcome == "rollback":
                transaction.rollback()
        bodies = []

        def take(message):
            body = message.body.decode()
            check(body != "rollback", "transaction: the rolled-back message was delivered")
            check(body not in bodies, f"transaction: {body!r} delivered twice")
            bodies.append(body)
            consumer.ack(message)

        receive_until(consumer, lambda: f"transaction (received {bodies}, checker asked {checker.checked})", lambda: len(bodies) == 2, take)
        expect_nothing_more(consumer, "transaction")
        check("orphan" in checker.checked, f"transaction: the checker was not asked about the orphan: {checker.checked}")
        check("commit" not in checker.checked and "rollback" not in checker.checked,
              f"transaction: the checker was asked about a decided half: {checker.checked}")
    finally:
        consumer.shutdown()


class PushListener(MessageListener):
    def __init__(self):
        self.lock = threading.Lock()
        self.attempts = {}  # index -> delivery attempts of this run's push messages
        self.earlier = set()  # ids of this run's earlier messages
        self.errors = []

    def consume(self, message):
        if not ours(message):
            with self.lock:
                stats["stale"] += 1
            return ConsumeResult.SUCCESS
        with self.lock:
            stats["received"] += 1
            if message.corrupted:
                self.errors.append(f"message {message.message_id} ({message.body!r}) is marked corrupted")
            if message.properties.get("case") != "push":
                self.earlier.add(message.message_id)
                return ConsumeResult.SUCCESS
            index = int(message.properties["index"])
            self.attempts.setdefault(index, []).append(message.delivery_attempt)
            if index == 0 and len(self.attempts[0]) == 1:
                return ConsumeResult.FAILURE  # the first delivery of message 0 fails
            return ConsumeResult.SUCCESS

    def done(self):
        with self.lock:
            return len(self.attempts) == 5 and len(self.attempts[0]) >= 2


def push(config, producer, topics, prefix):
    listener = PushListener()
    consumer = PushConsumer(config, prefix + "-push", listener, {topics["normal"]: FilterExpression()})
    consumer.startup()
    try:
        for i in range(5):
            send(producer, new_message(topics["normal"], f"push {i}", case="push", index=str(i)))
        deadline = time.monotonic() + DEADLINE
        while not listener.done():
            if time.monotonic() > deadline:
                missing = [i for i in range(5) if i not in listener.attempts]
                raise Failure(f"push: timed out after {DEADLINE} s; delivery attempts by index {listener.attempts}, "
                              f"never delivered: {missing} (a corrupted message, one whose body does not match the "
                              "digest the server sent, is not handed to the listener: see ~/logs/rocketmq_python)")
            time.sleep(0.1)
        check(not listener.errors, f"push: {listener.errors}")
        attempts = listener.attempts
        check(attempts[0][:2] == [1, 2], f"push: message 0 delivery attempts {attempts[0]}, expected [1, 2]")
        for i in range(1, 5):
            check(attempts[i] == [1], f"push: message {i} delivery attempts {attempts[i]}, expected [1]")
        return len(listener.earlier)
    finally:
        consumer.shutdown()


def main(argv):
    if len(argv) != 8:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    endpoint, normal, fifo_topic, delay_topic, tx_topic, ordered_group, prefix = argv[1:]
    topics = {"normal": normal, "fifo": fifo_topic, "delay": delay_topic, "transaction": tx_topic}
    config = ClientConfiguration(endpoint, Credentials())
    checker = Checker()
    producer = Producer(config, tuple(topics.values()), checker=checker)
    step = "producer startup"
    try:
        producer.startup()
        step = "1-3 normal, simple consumer, invisible duration"
        normal_and_invisible(config, producer, topics, prefix)
        step = "4 fifo"
        fifo(config, producer, topics, ordered_group)
        step = "5 delay"
        late = delay(config, producer, topics, prefix)
        step = "6 transactions"
        transactions(config, producer, checker, topics, prefix)
        step = "7 push consumer"
        earlier = push(config, producer, topics, prefix)
    except Exception as e:  # a client error is a failure too
        kind = "" if isinstance(e, Failure) else f"{type(e).__name__}: "
        print(f"{CLIENT}: FAILED at step {step}: {kind}{e}", flush=True)
        return 1
    finally:
        try:
            producer.shutdown()
        except Exception:
            pass
    print(f"{CLIENT}: ok (sent {stats['sent']}, received {stats['received']}, stale {stats['stale']}; "
          f"delay {late:+d} ms; transactions commit+checker commit, rollback unseen; "
          f"push redelivered with attempt 2, plus {earlier} earlier messages)", flush=True)
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    os._exit(code)  # the client's threads must not keep a failed run alive
