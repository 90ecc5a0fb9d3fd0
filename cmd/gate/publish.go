package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publish sends test messages to the gate's inbound subject through
// JetStream and waits for each to be stored.
func publish(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gate publish", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scene := fs.String("scene", "alert.disk_full", "scene of the message")
	to := fs.String("to", "open_id:ou_demo", "recipient as receive_id_type:receive_id")
	text := fs.String("text", "disk /data is 95% full", "text content")
	id := fs.String("id", "", "message id (default: a fresh one per message)")
	priority := fs.String("priority", "", "low, normal, high or urgent")
	count := fs.Int("count", 1, "how many messages to publish")
	raw := fs.Bool("stdin", false, "publish the JSON envelope read from standard input as is")
	headers := fs.Bool("headers", false, "also send Gate-Scene, Gate-Recipient and Gate-Priority (the gate then decides from the headers without decoding the body); not with --stdin")
	// The server and subject a gate on the same variables reads from.
	c := &config{}
	ss := []setting{
		{"nats-url", "GATE_NATS_URL", "", "NATS server (empty: the embedded server's, nats://GATE_EMBEDDED_NATS_ADDR)", false, str(&c.NATSURL)},
		{"", "GATE_EMBEDDED_NATS_ADDR", natsbus.DefaultEmbeddedAddr, "", false, str(&c.EmbeddedNATSAddr)},
		{"subject", "GATE_IN_SUBJECT", natsbus.DefaultInSubject, "subject to publish to", false, str(&c.InSubject)},
	}
	if _, err := parseSettings(fs, ss, args, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if c.NATSURL == "" {
		c.NATSURL = "nats://" + c.EmbeddedNATSAddr
	}
	idType, idValue, ok := strings.Cut(*to, ":")
	if !ok || idType == "" || idValue == "" {
		return &usageError{fmt.Sprintf("--to wants receive_id_type:receive_id, got %q", *to)}
	}
	if *headers && *raw {
		return &usageError{"--headers describes the generated envelope; with --stdin the envelope is sent as is, without them"}
	}
	nc, err := nats.Connect(c.NATSURL, nats.Name("gate publish"), nats.Timeout(5*time.Second))
	if err != nil {
		return newScrubber(c).Error(fmt.Errorf("publish: connect to %s: %w", c.NATSURL, err))
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
		ack, err := js.Publish(ctx, c.InSubject, data)
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		fmt.Fprintf(stdout, "published to %s (stream %s seq %d)\n", c.InSubject, ack.Stream, ack.Sequence)
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
		msg := &nats.Msg{Subject: c.InSubject, Data: data}
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
		fmt.Fprintf(stdout, "published %s to %s (stream %s seq %d)\n", msgID, c.InSubject, ack.Stream, ack.Sequence)
	}
	return nil
}
