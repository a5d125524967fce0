package bus_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

func TestLogsStreaming(t *testing.T) {
	t.Parallel() // waits out refusals and timeouts: alongside the others
	n := testenv.NATSForTest(t)
	nc, js := n.Connect(t)
	worker := bus.NewPublisher(nc, js, "n", "podworkers-1")
	subject := bus.For("n").Logs(3)
	want := strings.Repeat("line of log\n", 10000) // several chunks
	served := make(chan error, 1)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		e, err := bus.Decode(m.Data)
		if err != nil {
			served <- err
			return
		}
		req, err := bus.DecodeLogsRequest(e)
		if err != nil {
			served <- err
			return
		}
		if req.Container != "c" {
			served <- worker.SendChunkError(t.Context(), m.Reply, io.ErrUnexpectedEOF)
			return
		}
		go func() { served <- worker.StreamChunks(t.Context(), m.Reply, strings.NewReader(want)) }()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	client := bus.NewPublisher(nc, js, "n", "nodehb")
	var got strings.Builder
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := client.RequestLogs(ctx, subject, &bus.LogsRequest{ContainerRef: bus.ContainerRef{PodUID: "u", Namespace: "default", Pod: "a", Container: "c"}}, &got); err != nil {
		t.Fatal(err)
	}
	if got.String() != want {
		t.Fatalf("got %d bytes, want %d", got.Len(), len(want))
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the responder did not return after its stream")
	}
	// An error answer comes back as an error.
	err = client.RequestLogs(ctx, subject, &bus.LogsRequest{ContainerRef: bus.ContainerRef{PodUID: "u", Namespace: "default", Pod: "a", Container: "other"}}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
		t.Fatalf("want the responder's error, got %v", err)
	}
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("the responder did not return after its error")
	}

	// A requester that goes away ends a followed stream: the responder's
	// reader never ends, and StreamChunks returns once chunks go unacked.
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() {
		for i := 0; ; i++ {
			if _, err := pw.Write([]byte("tick\n")); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	sub2, err := nc.Subscribe(subject+"f", func(m *nats.Msg) {
		go func() { served <- worker.StreamChunks(t.Context(), m.Reply, pr) }()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Unsubscribe()
	fctx, fcancel := context.WithCancel(t.Context())
	w := &cancelAfter{n: 20, cancel: fcancel}
	_ = client.RequestLogs(fctx, subject+"f", &bus.LogsRequest{ContainerRef: bus.ContainerRef{PodUID: "u", Namespace: "default", Pod: "a", Container: "c"}, Follow: true}, w)
	select {
	case err := <-served:
		if err == nil {
			t.Fatal("responder ended without error although nobody read")
		}
	case <-time.After(2 * bus.ChunkAckTimeout):
		t.Fatal("responder kept streaming to a requester that left")
	}
}

// cancelAfter cancels after n writes.
type cancelAfter struct {
	n      int
	cancel func()
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	c.n--
	if c.n == 0 {
		c.cancel()
	}
	return len(p), nil
}
