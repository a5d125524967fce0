package bus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/splitlet/splitlet/libs/tracing"
)

// The log streaming protocol (docs/bus.md, "LogsRequest and LogsChunk"):
// the requester publishes a LogsRequest with a reply subject; the answering
// replica sends each LogsChunk to that subject as a NATS request, and the
// requester acknowledges every chunk with an empty reply. A chunk left
// unacknowledged (the requester went away) ends the stream. While a followed
// log is quiet, empty chunks go out as a keep-alive, so a vanished requester
// is noticed even then.

// ChunkAckTimeout is how long a responder waits for a chunk's acknowledgement.
const ChunkAckTimeout = 10 * time.Second

// KeepAlive is the interval of empty chunks on a quiet stream.
const KeepAlive = 5 * time.Second

// FirstChunkTimeout is how long a requester waits for the first chunk before
// deciding that no replica answers for the partition.
const FirstChunkTimeout = 10 * time.Second

const chunkSize = 32 << 10

// StreamChunks answers a request: it copies r to the reply subject as
// LogsChunks, each acknowledged by the requester, and ends with an EOF chunk
// (or an error chunk when r fails). It returns when r is done, ctx ends or
// the requester stops acknowledging. The caller closes r; r should return
// once ctx ends.
func (p *Publisher) StreamChunks(ctx context.Context, reply string, r io.Reader) error {
	type piece struct {
		data []byte
		err  error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pieces := make(chan piece)
	go func() {
		defer close(pieces)
		for {
			buf := make([]byte, chunkSize)
			n, err := r.Read(buf)
			select {
			case pieces <- piece{buf[:n], err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	keepAlive := time.NewTicker(KeepAlive)
	defer keepAlive.Stop()
	for {
		var chunk LogsChunk
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-keepAlive.C:
		case pc, ok := <-pieces:
			if !ok {
				return ctx.Err()
			}
			chunk.Data = pc.data
			switch {
			case errors.Is(pc.err, io.EOF):
				chunk.EOF = true
			case pc.err != nil:
				chunk.Error = pc.err.Error()
			}
			if len(chunk.Data) == 0 && !chunk.EOF && chunk.Error == "" {
				continue
			}
		}
		if err := p.sendChunk(ctx, reply, &chunk); err != nil {
			return err
		}
		if chunk.EOF || chunk.Error != "" {
			return nil
		}
		keepAlive.Reset(KeepAlive)
	}
}

// SendChunkError answers a request with a single error chunk.
func (p *Publisher) SendChunkError(ctx context.Context, reply string, err error) error {
	return p.sendChunk(ctx, reply, &LogsChunk{Error: err.Error()})
}

func (p *Publisher) sendChunk(ctx context.Context, reply string, c *LogsChunk) error {
	data, _, err := p.Seal(KindLogsChunk, "", c)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, ChunkAckTimeout)
	defer cancel()
	if _, err := p.nc.RequestWithContext(actx, reply, data); err != nil {
		return fmt.Errorf("bus: log chunk not acknowledged: %w", err)
	}
	return nil
}

// RequestLogs sends a LogsRequest to subject and writes the log to w until
// the answer ends. It returns the answer's error, if any, and an error when
// no replica answers within FirstChunkTimeout.
func (p *Publisher) RequestLogs(ctx context.Context, subject string, req *LogsRequest, w io.Writer) error {
	data, _, err := p.Seal(KindLogsRequest, "", req)
	if err != nil {
		return err
	}
	inbox := p.nc.NewRespInbox()
	sub, err := p.nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := p.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: inbox, Data: data, Header: tracing.Inject(ctx)}); err != nil {
		return fmt.Errorf("bus: logs request on %s: %w", subject, err)
	}
	first := true
	for {
		wait := ctx
		cancel := context.CancelFunc(func() {})
		if first {
			wait, cancel = context.WithTimeout(ctx, FirstChunkTimeout)
		}
		msg, err := sub.NextMsgWithContext(wait)
		cancel()
		if err != nil {
			if first && ctx.Err() == nil {
				return fmt.Errorf("bus: no pod worker answered on %s", subject)
			}
			return err
		}
		first = false
		e, err := Decode(msg.Data)
		if err != nil {
			return err
		}
		chunk, err := DecodeLogsChunk(e)
		if err != nil {
			return err
		}
		if len(chunk.Data) > 0 {
			if _, err := w.Write(chunk.Data); err != nil {
				return err
			}
		}
		_ = msg.Respond(nil)
		if chunk.Error != "" {
			return errors.New(chunk.Error)
		}
		if chunk.EOF {
			return nil
		}
	}
}
