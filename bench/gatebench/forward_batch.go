package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Headers of an atomic batch publish (ADR-50, nats-server 2.12 and later).
const (
	batchIDHeader     = "Nats-Batch-Id"
	batchSeqHeader    = "Nats-Batch-Sequence"
	batchCommitHeader = "Nats-Batch-Commit"
)

// wholeBatch makes a variant's publish of a batch sender: the chunk goes
// as one batch, which the stream must store whole.
func wholeBatch(send func(*forwardBench, context.Context, []*nats.Msg) (batchAck, error)) func(context.Context, *forwardBench, []*nats.Msg) error {
	return func(ctx context.Context, fb *forwardBench, chunk []*nats.Msg) error {
		ack, err := send(fb, ctx, chunk)
		if err != nil {
			return err
		}
		if ack.Error != nil {
			return fmt.Errorf("batch refused: %s (err_code %d)", ack.Error.Description, ack.Error.ErrCode)
		}
		if ack.Count != len(chunk) {
			return fmt.Errorf("batch committed %d messages, want %d", ack.Count, len(chunk))
		}
		return nil
	}
}

// batchAck is a batch's answer: a PubAck with the batch's id and size, or
// an error; a fast batch also sends flow acks.
type batchAck struct {
	Type      string `json:"type"` // a fast batch's flow ack, gap or error report; empty in a PubAck
	Duplicate bool   `json:"duplicate"`
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	Batch     string `json:"batch"`
	Count     int    `json:"count"`
	Error     *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

// atomicBatch sends chunk as one atomic batch and returns the commit's
// answer: the messages go with Nats-Batch-Id and Nats-Batch-Sequence and no
// reply subject, the last also with Nats-Batch-Commit as a request, whose
// answer is the batch's one PubAck. The stream stores all of the batch or
// none of it. The messages' own headers are kept; the batch headers are added
// to copies.
func (fb *forwardBench) atomicBatch(ctx context.Context, chunk []*nats.Msg) (batchAck, error) {
	id := nuid.Next()
	last := len(chunk) - 1
	for i, m := range chunk {
		b := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header{}}
		for k, vs := range m.Header {
			b.Header[k] = vs
		}
		b.Header.Set(batchIDHeader, id)
		b.Header.Set(batchSeqHeader, strconv.Itoa(i+1))
		if i < last {
			if err := fb.nc.PublishMsg(b); err != nil {
				return batchAck{}, fmt.Errorf("publish: %w", err)
			}
			continue
		}
		b.Header.Set(batchCommitHeader, "1")
		reply, err := fb.nc.RequestMsgWithContext(ctx, b)
		if err != nil {
			return batchAck{}, fmt.Errorf("commit: %w", err)
		}
		var ack batchAck
		if err := json.Unmarshal(reply.Data, &ack); err != nil {
			return batchAck{}, fmt.Errorf("commit answer %q: %w", reply.Data, err)
		}
		return ack, nil
	}
	return batchAck{}, errors.New("empty batch")
}

// batchDedup checks what a repeated Nats-Msg-Id does to a batch sent by
// send, on a stream made by cfg: a batch whose ids were all stored before,
// one that mixes stored and new ids, and one that repeats an id inside
// itself. It says what the stream answered and what it holds after each.
func (fb *forwardBench) batchDedup(ctx context.Context, cfg jetstream.StreamConfig, send func(context.Context, []*nats.Msg) (batchAck, error)) (string, error) {
	cfg.Name, cfg.Subjects, cfg.Storage, cfg.Duplicates = forwardStream, []string{forwardSubject}, jetstream.FileStorage, 2*time.Hour
	s, err := fb.js.CreateStream(ctx, cfg)
	if err != nil {
		return "", fmt.Errorf("create stream: %w", err)
	}
	defer func() { _ = fb.js.DeleteStream(context.Background(), forwardStream) }()
	batch := func(ids ...string) []*nats.Msg {
		out := make([]*nats.Msg, len(ids))
		for i, id := range ids {
			out[i] = nats.NewMsg(forwardSubject)
			out[i].Data = []byte("forward " + id)
			out[i].Header.Set(jetstream.MsgIDHeader, id)
		}
		return out
	}
	var said []string
	for _, tc := range []struct {
		name string
		ids  []string
	}{
		{"a,b,c", []string{"a", "b", "c"}},
		{"a,b,c again", []string{"a", "b", "c"}},
		{"b,d (b stored)", []string{"b", "d"}},
		{"e,e", []string{"e", "e"}},
	} {
		ack, err := send(ctx, batch(tc.ids...))
		if err != nil {
			return "", err
		}
		got := fmt.Sprintf("ack count %d", ack.Count)
		if ack.Duplicate {
			got += " duplicate"
		}
		if ack.Error != nil {
			got = fmt.Sprintf("refused, err_code %d %q", ack.Error.ErrCode, ack.Error.Description)
		}
		info, err := s.Info(ctx)
		if err != nil {
			return "", fmt.Errorf("stream info: %w", err)
		}
		said = append(said, fmt.Sprintf("%s: %s, stream holds %d", tc.name, got, info.State.Msgs))
	}
	return strings.Join(said, "; "), nil
}

// fastFlow is the flow a fast batch asks for: an ack every fastFlow
// messages, at most; the server starts there when the batch is the
// stream's only one.
const fastFlow = 500

// fastBatch sends chunk as one fast batch (ADR-50's non-atomic batch,
// nats-server 2.14 and later) and returns its PubAck: every message goes
// with a reply subject that names the batch, its sequence and its
// operation; the stream stores each as it comes, de-duplicating by
// Nats-Msg-Id message by message, and answers with a flow ack every so
// many messages and one PubAck for the batch after its last message. A gap
// or error report of the server ends it with an error.
func (fb *forwardBench) fastBatch(ctx context.Context, chunk []*nats.Msg) (batchAck, error) {
	if fb.fastSub == nil {
		fb.fastInbox = nats.NewInbox()
		fb.fastReplies = make(chan *nats.Msg, 1024)
		sub, err := fb.nc.ChanSubscribe(fb.fastInbox+".>", fb.fastReplies)
		if err != nil {
			return batchAck{}, fmt.Errorf("subscribe to batch replies: %w", err)
		}
		fb.fastSub = sub
	}
	id := nuid.Next()
	prefix := fb.fastInbox + "." + id + "." + strconv.Itoa(fastFlow) + "." + "fail."
	last := len(chunk) - 1
	for i, m := range chunk {
		op := 1 // append
		switch {
		case i == last:
			op = 2 // commit
		case i == 0:
			op = 0 // start
		}
		b := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: m.Header,
			Reply: prefix + strconv.Itoa(i+1) + "." + strconv.Itoa(op) + ".$FI"}
		if err := fb.nc.PublishMsg(b); err != nil {
			return batchAck{}, fmt.Errorf("publish: %w", err)
		}
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case r := <-fb.fastReplies:
			if got, _, _ := strings.Cut(strings.TrimPrefix(r.Subject, fb.fastInbox+"."), "."); got != id {
				continue // a late flow ack of an earlier batch
			}
			var ack batchAck
			if err := json.Unmarshal(r.Data, &ack); err != nil {
				return batchAck{}, fmt.Errorf("batch answer %q: %w", r.Data, err)
			}
			switch ack.Type {
			case "ack":
				continue
			case "":
				return ack, nil
			default:
				return batchAck{}, fmt.Errorf("batch answer %s", r.Data)
			}
		case <-timeout:
			return batchAck{}, errors.New("no PubAck for the batch within 30s")
		case <-ctx.Done():
			return batchAck{}, ctx.Err()
		}
	}
}
