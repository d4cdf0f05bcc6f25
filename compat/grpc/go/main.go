// End-to-end test of the RocketMQ 5 Go client (github.com/apache/rocketmq-clients/golang/v5)
// against a gRPC endpoint.
//
//	usage: grpc-client-test ENDPOINT NORMAL_TOPIC FIFO_TOPIC DELAY_TOPIC TRANSACTION_TOPIC ORDERED_GROUP GROUP_PREFIX
//
// The topics must exist with the matching message.type; ORDERED_GROUP must be an orderly group.
// Every message carries the property "run" (unique to this run): messages of an earlier run that
// are still in a topic are acknowledged and counted as stale, never checked. TLS is left at the
// client's default (on, without verifying the server's certificate). Exits 1 with a message
// naming the failed step.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

const (
	modulePath = "github.com/apache/rocketmq-clients/golang/v5"
	tag        = "compat-tag"
	await      = 3 * time.Second  // how long a receive long-polls
	deadline   = 60 * time.Second // how long any wait may take
)

var (
	run      = newRunID()
	endpoint string
	sent     int
	received int
	stale    int
	mu       sync.Mutex // guards received and stale, which the push listener updates too
)

// failure is what check panics with; main reports it with the step it happened in.
type failure string

func check(ok bool, format string, args ...any) {
	if !ok {
		panic(failure(fmt.Sprintf(format, args...)))
	}
}

func must(err error, what string) {
	check(err == nil, "%s: %v", what, err)
}

func newRunID() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func clientName() string {
	version := "(unknown version)"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == modulePath {
				version = dep.Version
			}
		}
	}
	return "go client " + strings.TrimPrefix(version, "v")
}

func config(group string) *rmq.Config {
	return &rmq.Config{Endpoint: endpoint, ConsumerGroup: group, Credentials: &credentials.SessionCredentials{}}
}

func ours(mv *rmq.MessageView) bool { return mv.GetProperties()["run"] == run }

func count(n *int) {
	mu.Lock()
	*n++
	mu.Unlock()
}

func newMessage(topic, body string, properties ...string) *rmq.Message {
	msg := &rmq.Message{Topic: topic, Body: []byte(body)}
	msg.AddProperty("run", run)
	for i := 0; i+1 < len(properties); i += 2 {
		msg.AddProperty(properties[i], properties[i+1])
	}
	return msg
}

func send(p rmq.Producer, msg *rmq.Message, tx rmq.Transaction) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var receipts []*rmq.SendReceipt
	var err error
	if tx != nil {
		receipts, err = p.SendWithTransaction(ctx, msg, tx)
	} else {
		receipts, err = p.Send(ctx, msg)
	}
	must(err, "send to "+msg.Topic)
	check(len(receipts) == 1 && receipts[0].MessageID != "", "send to %s: receipts without a message id: %v", msg.Topic, receipts)
	sent++
	return receipts[0].MessageID
}

func simpleConsumer(group, topic string) rmq.SimpleConsumer {
	c, err := rmq.NewSimpleConsumer(config(group),
		rmq.WithSimpleAwaitDuration(await),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	must(err, "new simple consumer "+group)
	must(c.Start(), "start simple consumer "+group)
	return c
}

// receive returns what one receive brings; MESSAGE_NOT_FOUND (nothing before the long poll ends)
// is no messages.
func receive(c rmq.SimpleConsumer, invisible time.Duration) []*rmq.MessageView {
	ctx, cancel := context.WithTimeout(context.Background(), await+10*time.Second)
	defer cancel()
	mvs, err := c.Receive(ctx, 16, invisible)
	if status, ok := rmq.AsErrRpcStatus(err); ok && status.GetCode() == int32(v2.Code_MESSAGE_NOT_FOUND) {
		return nil
	}
	must(err, "receive")
	return mvs
}

func ack(c rmq.SimpleConsumer, mv *rmq.MessageView) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(c.Ack(ctx, mv), "ack "+mv.GetMessageId())
}

// receiveUntil hands this run's messages to handle until done holds; it fails after the deadline.
// Stale messages of other runs are acknowledged.
func receiveUntil(c rmq.SimpleConsumer, what func() string, done func() bool, handle func(*rmq.MessageView), invisible time.Duration) {
	end := time.Now().Add(deadline)
	for !done() {
		check(time.Now().Before(end), "%s: timed out after %v", what(), deadline)
		for _, mv := range receive(c, invisible) {
			if ours(mv) {
				count(&received)
				handle(mv)
			} else {
				count(&stale)
				ack(c, mv)
			}
		}
	}
}

func expectNothingMore(c rmq.SimpleConsumer, what string) {
	for _, mv := range receive(c, 30*time.Second) {
		check(!ours(mv), "%s: expected no more messages, got %s %q", what, mv.GetMessageId(), mv.GetBody())
		ack(c, mv)
	}
}

func label(text string) func() string { return func() string { return text } }

func normalAndInvisible(p rmq.Producer, normal, prefix string) {
	receipts := map[string]int{}
	for i := 0; i < 10; i++ {
		msg := newMessage(normal, fmt.Sprintf("normal %d", i), "index", strconv.Itoa(i))
		msg.SetTag(tag)
		msg.SetKeys(fmt.Sprintf("key-%d", i))
		receipts[send(p, msg, nil)] = i
	}
	c := simpleConsumer(prefix+"-simple", normal)
	defer c.GracefulStop()
	seen := map[string]bool{}
	receiveUntil(c, func() string { return fmt.Sprintf("simple consumer (%d of 10 received)", len(seen)) },
		func() bool { return len(seen) == 10 },
		func(mv *rmq.MessageView) {
			id := mv.GetMessageId()
			what := "simple consumer, message " + id
			i, known := receipts[id]
			check(known, "%s: id matches no send receipt", what)
			check(!seen[id], "%s: received twice", what)
			check(string(mv.GetBody()) == fmt.Sprintf("normal %d", i), "%s: body %q, sent 'normal %d'", what, mv.GetBody(), i)
			check(mv.GetTag() != nil && *mv.GetTag() == tag, "%s: tag %v, sent %q", what, mv.GetTag(), tag)
			check(reflect.DeepEqual(mv.GetKeys(), []string{fmt.Sprintf("key-%d", i)}), "%s: keys %q, sent [key-%d]", what, mv.GetKeys(), i)
			check(mv.GetProperties()["index"] == strconv.Itoa(i), "%s: properties %v, sent index=%d", what, mv.GetProperties(), i)
			check(mv.GetTopic() == normal, "%s: topic %q", what, mv.GetTopic())
			seen[id] = true
			ack(c, mv)
		}, 30*time.Second)
	expectNothingMore(c, "simple consumer after acking all 10")

	// Change invisible duration: the message comes back after the new 2 s, as its second attempt.
	target := send(p, newMessage(normal, "invisible", "case", "invisible"), nil)
	var first, again *rmq.MessageView
	only := func(into **rmq.MessageView) func(*rmq.MessageView) {
		return func(mv *rmq.MessageView) {
			check(mv.GetMessageId() == target, "invisible: unexpected message %s %q", mv.GetMessageId(), mv.GetBody())
			*into = mv
		}
	}
	receiveUntil(c, label("invisible: first delivery"), func() bool { return first != nil }, only(&first), 60*time.Second)
	check(first.GetDeliveryAttempt() == 1, "invisible: first delivery attempt %d, expected 1", first.GetDeliveryAttempt())
	changed := time.Now()
	must(c.ChangeInvisibleDuration(first, 2*time.Second), "invisible: change invisible duration")
	receiveUntil(c, label("invisible: redelivery after ChangeInvisibleDuration(2 s)"), func() bool { return again != nil }, only(&again), 30*time.Second)
	backAfter := time.Since(changed)
	check(again.GetDeliveryAttempt() == 2, "invisible: redelivery attempt %d, expected 2", again.GetDeliveryAttempt())
	check(backAfter >= time.Second, "invisible: came back %v after changing to 2 s", backAfter)
	ack(c, again)
}

func fifo(p rmq.Producer, topic, orderedGroup string) {
	for i := 0; i < 5; i++ {
		for _, group := range []string{"a", "b"} {
			msg := newMessage(topic, fmt.Sprintf("%s %d", group, i))
			msg.SetMessageGroup(group)
			send(p, msg, nil)
		}
	}
	c := simpleConsumer(orderedGroup, topic)
	defer c.GracefulStop()
	order := map[string][]int{"a": {}, "b": {}}
	receiveUntil(c, func() string { return fmt.Sprintf("fifo (received %v)", order) },
		func() bool { return len(order["a"]) == 5 && len(order["b"]) == 5 },
		func(mv *rmq.MessageView) {
			var group string
			var index int
			_, err := fmt.Sscanf(string(mv.GetBody()), "%s %d", &group, &index)
			check(err == nil, "fifo: unexpected body %q", mv.GetBody())
			check(mv.GetMessageGroup() != nil && *mv.GetMessageGroup() == group, "fifo: message group %v for body %q", mv.GetMessageGroup(), mv.GetBody())
			check(index == len(order[group]), "fifo: group %s got %d after %v, expected %d", group, index, order[group], len(order[group]))
			order[group] = append(order[group], index)
			ack(c, mv)
		}, 30*time.Second)
}

func delay(p rmq.Producer, topic, prefix string) time.Duration {
	c := simpleConsumer(prefix+"-delay", topic)
	defer c.GracefulStop()
	msg := newMessage(topic, "delayed")
	due := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	msg.SetDelayTimestamp(due)
	send(p, msg, nil)
	var at time.Time
	receiveUntil(c, label("delay"), func() bool { return !at.IsZero() }, func(mv *rmq.MessageView) {
		at = time.Now()
		ack(c, mv)
	}, 30*time.Second)
	check(!at.Before(due.Add(-time.Second)), "delay: received %v before its delivery time", due.Sub(at))
	return at.Sub(due)
}

type checker struct {
	sync.Mutex
	checked []string
}

func (ch *checker) check(mv *rmq.MessageView) rmq.TransactionResolution {
	body := string(mv.GetBody())
	if ours(mv) {
		ch.Lock()
		ch.checked = append(ch.checked, body)
		ch.Unlock()
	}
	if body == "orphan" {
		return rmq.COMMIT
	}
	return rmq.ROLLBACK
}

func (ch *checker) asked() []string {
	ch.Lock()
	defer ch.Unlock()
	return append([]string(nil), ch.checked...)
}

func transactions(p rmq.Producer, ch *checker, topic, prefix string) {
	c := simpleConsumer(prefix+"-tx", topic)
	defer c.GracefulStop()
	for _, outcome := range []string{"commit", "rollback", "orphan"} {
		tx := p.BeginTransaction()
		send(p, newMessage(topic, outcome), tx)
		switch outcome {
		case "commit":
			must(tx.Commit(), "transaction: commit")
		case "rollback":
			must(tx.RollBack(), "transaction: roll back")
		}
	}
	var bodies []string
	receiveUntil(c, func() string { return fmt.Sprintf("transaction (received %v, checker asked %v)", bodies, ch.asked()) },
		func() bool { return len(bodies) == 2 },
		func(mv *rmq.MessageView) {
			body := string(mv.GetBody())
			check(body != "rollback", "transaction: the rolled-back message was delivered")
			for _, b := range bodies {
				check(b != body, "transaction: %q delivered twice", body)
			}
			bodies = append(bodies, body)
			ack(c, mv)
		}, 30*time.Second)
	expectNothingMore(c, "transaction")
	asked := strings.Join(ch.asked(), " ")
	check(strings.Contains(asked, "orphan"), "transaction: the checker was not asked about the orphan: [%s]", asked)
	check(!strings.Contains(asked, "commit") && !strings.Contains(asked, "rollback"), "transaction: the checker was asked about a decided half: [%s]", asked)
}

func push(p rmq.Producer, topic, prefix string) int {
	var lock sync.Mutex
	attempts := map[int][]int32{} // index -> delivery attempts of this run's push messages
	earlier := map[string]bool{}  // this run's earlier messages
	listener := &rmq.FuncMessageListener{Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
		if !ours(mv) {
			count(&stale)
			return rmq.SUCCESS
		}
		count(&received)
		lock.Lock()
		defer lock.Unlock()
		if mv.GetProperties()["case"] != "push" {
			earlier[mv.GetMessageId()] = true
			return rmq.SUCCESS
		}
		index, _ := strconv.Atoi(mv.GetProperties()["index"])
		attempts[index] = append(attempts[index], mv.GetDeliveryAttempt())
		if index == 0 && len(attempts[0]) == 1 {
			return rmq.FAILURE // the first delivery of message 0 fails
		}
		return rmq.SUCCESS
	}}
	c, err := rmq.NewPushConsumer(config(prefix+"-push"),
		rmq.WithPushAwaitDuration(5*time.Second),
		rmq.WithPushSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}),
		rmq.WithPushMessageListener(listener))
	must(err, "new push consumer")
	must(c.Start(), "start push consumer")
	defer c.GracefulStop()
	for i := 0; i < 5; i++ {
		send(p, newMessage(topic, fmt.Sprintf("push %d", i), "case", "push", "index", strconv.Itoa(i)), nil)
	}
	end := time.Now().Add(deadline)
	for {
		lock.Lock()
		done := len(attempts) == 5 && len(attempts[0]) >= 2
		snapshot := fmt.Sprint(attempts)
		lock.Unlock()
		if done {
			break
		}
		check(time.Now().Before(end), "push: timed out after %v; delivery attempts by index %s "+
			"(a corrupted message, one whose body does not match the digest the server sent, is not handed to the listener)", deadline, snapshot)
		time.Sleep(100 * time.Millisecond)
	}
	lock.Lock()
	defer lock.Unlock()
	check(reflect.DeepEqual(attempts[0][:2], []int32{1, 2}), "push: message 0 delivery attempts %v, expected [1 2]", attempts[0])
	for i := 1; i < 5; i++ {
		check(reflect.DeepEqual(attempts[i], []int32{1}), "push: message %d delivery attempts %v, expected [1]", i, attempts[i])
	}
	return len(earlier)
}

func main() {
	if len(os.Args) != 8 {
		fmt.Fprintln(os.Stderr, "usage: grpc-client-test ENDPOINT NORMAL_TOPIC FIFO_TOPIC DELAY_TOPIC TRANSACTION_TOPIC ORDERED_GROUP GROUP_PREFIX")
		os.Exit(2)
	}
	endpoint = os.Args[1]
	normal, fifoTopic, delayTopic, txTopic, orderedGroup, prefix := os.Args[2], os.Args[3], os.Args[4], os.Args[5], os.Args[6], os.Args[7]
	name := clientName()
	step := "producer startup"
	defer func() {
		if r := recover(); r != nil {
			fmt.Printf("%s: FAILED at step %s: %v\n", name, step, r)
			os.Exit(1)
		}
	}()

	ch := &checker{}
	p, err := rmq.NewProducer(config(""), rmq.WithTopics(normal, fifoTopic, delayTopic, txTopic),
		rmq.WithTransactionChecker(&rmq.TransactionChecker{Check: ch.check}))
	must(err, "new producer")
	must(p.Start(), "start producer")
	defer p.GracefulStop()

	step = "1-3 normal, simple consumer, invisible duration"
	normalAndInvisible(p, normal, prefix)
	step = "4 fifo"
	fifo(p, fifoTopic, orderedGroup)
	step = "5 delay"
	late := delay(p, delayTopic, prefix)
	step = "6 transactions"
	transactions(p, ch, txTopic, prefix)
	step = "7 push consumer"
	earlier := push(p, normal, prefix)

	fmt.Printf("%s: ok (sent %d, received %d, stale %d; delay %+d ms; transactions commit+checker commit, rollback unseen; "+
		"push redelivered with attempt 2, plus %d earlier messages)\n", name, sent, received, stale, late.Milliseconds(), earlier)
}
