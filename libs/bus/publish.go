package bus

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/splitlet/splitlet/libs/tracing"
)

// Publisher stamps and sends messages of one source.
//
// Its sequence starts at the wall clock in microseconds and counts up by one
// a message, so it keeps increasing across restarts of the source without any
// stored state, and receivers can drop what they have already seen.
type Publisher struct {
	// mu keeps sealing and sending one step, so that messages leave in
	// sequence order even when goroutines share the publisher; receivers
	// drop a message whose seq is not above the last (docs/bus.md).
	mu     sync.Mutex
	nc     *nats.Conn
	js     jetstream.JetStream
	node   string
	source string
	seq    atomic.Uint64
	now    func() time.Time
	enc    Encoding
}

// PublisherOption configures a Publisher.
type PublisherOption func(*Publisher)

// WithEncoding has the publisher write its messages in enc (default:
// protobuf, for the kinds that have a protobuf form). JSON is for a node
// with a stage that reads only JSON (one in a language without
// Kubernetes' protobuf types).
func WithEncoding(enc Encoding) PublisherOption {
	return func(p *Publisher) { p.enc = enc }
}

// NewPublisher returns a publisher for the given node and source name.
func NewPublisher(nc *nats.Conn, js jetstream.JetStream, node, source string, opts ...PublisherOption) *Publisher {
	p := &Publisher{nc: nc, js: js, node: node, source: source, now: time.Now, enc: EncodingProtobuf}
	for _, o := range opts {
		o(p)
	}
	p.seq.Store(uint64(time.Now().UnixMicro()))
	return p
}

// Source is the publisher's source name.
func (p *Publisher) Source() string { return p.source }

// Node is the publisher's node name.
func (p *Publisher) Node() string { return p.node }

// Seal wraps a payload into an envelope with the next sequence number and
// returns its wire form.
func (p *Publisher) Seal(kind Kind, op Op, payload any) ([]byte, *Envelope, error) {
	e, err := NewEnvelopeAs(p.enc, kind, p.node, p.source, op, payload)
	if err != nil {
		return nil, nil, err
	}
	e.Seq = p.seq.Add(1)
	e.SentAt = p.now().UTC()
	data, err := Encode(e)
	if err != nil {
		return nil, nil, err
	}
	return data, e, nil
}

func (p *Publisher) msgID(e *Envelope) string {
	return p.source + "-" + strconv.FormatUint(e.Seq, 10)
}

// Publish sends a message to a stream subject and waits for the stream's
// acknowledgement. The message ID makes a retried publish a no-op.
func (p *Publisher) Publish(ctx context.Context, subject string, kind Kind, op Op, payload any) error {
	f, err := p.PublishAsync(ctx, subject, kind, op, payload)
	if err != nil {
		return err
	}
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return fmt.Errorf("bus: publish %s to %s: %w", kind, subject, err)
	case <-ctx.Done():
		return fmt.Errorf("bus: publish %s to %s: %w", kind, subject, ctx.Err())
	}
}

// PublishAsync sends a message to a stream subject without waiting; call
// Flush to wait for every outstanding acknowledgement. The message carries
// ctx's trace context (libs/tracing), if any.
func (p *Publisher) PublishAsync(ctx context.Context, subject string, kind Kind, op Op, payload any) (jetstream.PubAckFuture, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	data, e, err := p.Seal(kind, op, payload)
	if err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: header(ctx, e)}
	f, err := p.js.PublishMsgAsync(msg, jetstream.WithMsgID(p.msgID(e)))
	if err != nil {
		return nil, fmt.Errorf("bus: publish %s to %s: %w", kind, subject, err)
	}
	return f, nil
}

// Flush waits until every asynchronous publish has been acknowledged.
func (p *Publisher) Flush(ctx context.Context) error {
	select {
	case <-p.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Send publishes on plain NATS, for request/reply answers and other messages
// that are not kept in a stream.
func (p *Publisher) Send(subject string, kind Kind, payload any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	data, e, err := p.Seal(kind, "", payload)
	if err != nil {
		return err
	}
	return p.nc.PublishMsg(&nats.Msg{Subject: subject, Data: data, Header: header(context.Background(), e)})
}

// header is a message's headers: its Content-Type and ctx's trace context.
func header(ctx context.Context, e *Envelope) nats.Header {
	h := tracing.Inject(ctx)
	if h == nil {
		h = nats.Header{}
	}
	h[HeaderContentType] = []string{e.Encoding.ContentType()}
	return h
}

// Request sends a request and decodes the single answer.
func (p *Publisher) Request(ctx context.Context, subject string, kind Kind, payload any) (*Envelope, error) {
	data, e, err := p.Seal(kind, "", payload)
	if err != nil {
		return nil, err
	}
	msg, err := p.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: data, Header: header(ctx, e)})
	if err != nil {
		return nil, fmt.Errorf("bus: request %s on %s: %w", kind, subject, err)
	}
	return DecodeMsg(msg.Header, msg.Data)
}
