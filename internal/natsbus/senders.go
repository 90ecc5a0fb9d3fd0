package natsbus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// senderAckWait is how long a sender has to deliver a message it pulled
// from SenderConsumer and ack it before another sender gets it: Feishu's
// API answers in well under a second, and a sender that retries a rate
// limit of its own for a while must not see the message twice.
const senderAckWait = 30 * time.Second

// EnsureSenderConsumer creates, or updates, the durable pull consumer
// SenderConsumer on GATE_OUT that senders of the embedded server read
// through (they may not create consumers of their own: one could push
// GATE_OUT's messages onto any subject of the gate's). It starts at the
// stream's first message, and lives as long as the stream.
func (b *Bus) EnsureSenderConsumer(ctx context.Context) error {
	if err := b.ensureStream(ctx, b.outStream()); err != nil {
		return err
	}
	_, err := b.js.CreateOrUpdateConsumer(ctx, StreamOut, jetstream.ConsumerConfig{
		Durable:     SenderConsumer,
		Description: "the senders of the gate's embedded NATS server; shared by every sender",
		AckPolicy:   jetstream.AckExplicitPolicy,
		AckWait:     senderAckWait,
	})
	if err != nil {
		return fmt.Errorf("create consumer %s on %s: %w", SenderConsumer, StreamOut, err)
	}
	return nil
}
