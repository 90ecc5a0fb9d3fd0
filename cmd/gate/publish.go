package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publish sends test messages to the gate's inbound subject through
// JetStream and waits for each to be stored.
func publish(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gate publish", flag.ContinueOnError)
	fs.SetOutput(stderr)
	defURL := getenv("GATE_NATS_URL")
	if defURL == "" {
		addr := getenv("GATE_EMBEDDED_NATS_ADDR")
		if addr == "" {
			addr = "127.0.0.1:4222"
		}
		defURL = "nats://" + addr
	}
	defSubject := getenv("GATE_IN_SUBJECT")
	if defSubject == "" {
		defSubject = "gate.in"
	}
	natsURL := fs.String("nats-url", defURL, "NATS server (default from GATE_NATS_URL, else the embedded server)")
	subject := fs.String("subject", defSubject, "subject to publish to")
	scene := fs.String("scene", "alert.disk_full", "scene of the message")
	to := fs.String("to", "open_id:ou_demo", "recipient as receive_id_type:receive_id")
	text := fs.String("text", "disk /data is 95% full", "text content")
	id := fs.String("id", "", "message id (default: a fresh one per message)")
	priority := fs.String("priority", "", "low, normal, high or urgent")
	count := fs.Int("count", 1, "how many messages to publish")
	raw := fs.Bool("stdin", false, "publish the JSON envelope read from standard input as is")
	headers := fs.Bool("headers", false, "also send Gate-Scene, Gate-Recipient and Gate-Priority (the gate then decides from the headers without decoding the body); not with --stdin")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return &usageError{err.Error()}
	}
	idType, idValue, ok := strings.Cut(*to, ":")
	if !ok || idType == "" || idValue == "" {
		return &usageError{fmt.Sprintf("--to wants receive_id_type:receive_id, got %q", *to)}
	}
	if *headers && *raw {
		return &usageError{"--headers describes the generated envelope; with --stdin the envelope is sent as is, without them"}
	}
	nc, err := nats.Connect(*natsURL, nats.Name("gate publish"), nats.Timeout(5*time.Second))
	if err != nil {
		return newScrubber(&config{NATSURL: *natsURL}).Error(fmt.Errorf("publish: connect to %s: %w", *natsURL, err))
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	if *raw {
		data, err := io.ReadAll(io.LimitReader(stdin, 64<<20))
		if err != nil {
			return fmt.Errorf("publish: read stdin: %w", err)
		}
		ack, err := js.Publish(ctx, *subject, data)
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		fmt.Fprintf(stdout, "published to %s (stream %s seq %d)\n", *subject, ack.Stream, ack.Sequence)
		return nil
	}
	content, _ := json.Marshal(map[string]string{"text": *text})
	for i := range *count {
		msgID := *id
		if msgID == "" {
			msgID = nats.NewInbox()[len("_INBOX."):]
		} else if *count > 1 {
			msgID = fmt.Sprintf("%s-%d", *id, i+1)
		}
		env := map[string]any{
			"id": msgID, "scene": *scene, "receive_id_type": idType, "receive_id": idValue,
			"msg_type": "text", "content": string(content),
		}
		if *priority != "" {
			env["priority"] = *priority
		}
		data, _ := json.Marshal(env)
		msg := &nats.Msg{Subject: *subject, Data: data}
		if *headers {
			msg.Header = nats.Header{}
			msg.Header.Set(gate.SceneHeader, *scene)
			msg.Header.Set(gate.RecipientHeader, *to)
			if *priority != "" {
				msg.Header.Set(gate.PriorityHeader, *priority)
			}
		}
		ack, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(msgID))
		if err != nil {
			return fmt.Errorf("publish %s: %w", msgID, err)
		}
		fmt.Fprintf(stdout, "published %s to %s (stream %s seq %d)\n", msgID, *subject, ack.Stream, ack.Sequence)
	}
	return nil
}
