package service

import (
	"bufio"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
)

// TestFollowedLogsStream: `kubectl logs -f` through the API server gets
// each line as the runtime sends it, not at the end.
func TestFollowedLogsStream(t *testing.T) {
	s := startStack(t, "follow-node")
	pod := createPod(t, s.cs, s.node, "follow-pod", nil)
	release := make(chan struct{})
	pub := bus.NewPublisher(s.nc, nil, s.node, "podworkers-test")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	sub, err := s.nc.Subscribe(bus.For(s.node).Prefix()+".runtime.logs.*", func(m *nats.Msg) {
		e, err := bus.Decode(m.Data)
		if err != nil {
			t.Errorf("decode: %v", err)
			return
		}
		req, err := bus.DecodeLogsRequest(e)
		if err != nil || !req.Follow {
			t.Errorf("request %+v, %v: want follow", req, err)
			return
		}
		pr, pw := io.Pipe()
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, _ = io.WriteString(pw, "first\n")
			select {
			case <-release:
				_, _ = io.WriteString(pw, "second\n")
			case <-ctx.Done():
			}
			_ = pw.Close()
		}()
		go func() {
			defer wg.Done()
			_ = pub.StreamChunks(ctx, m.Reply, pr)
			_ = pr.Close()
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sub.Unsubscribe()
		cancel()
		wg.Wait()
	})
	eventually(t, 15*time.Second, "node registered", func() error {
		_, err := s.cs.CoreV1().Nodes().Get(t.Context(), s.node, metav1.GetOptions{})
		return err
	})
	var stream io.ReadCloser
	eventually(t, 20*time.Second, "followed logs open", func() error {
		var err error
		rctx, rcancel := context.WithTimeout(t.Context(), 30*time.Second)
		t.Cleanup(rcancel)
		stream, err = s.cs.CoreV1().Pods("default").GetLogs(pod.Name, &corev1.PodLogOptions{Container: "hello", Follow: true}).Stream(rctx)
		return err
	})
	defer stream.Close()
	r := bufio.NewReader(stream)
	line, err := r.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(release)
	line, err = r.ReadString('\n')
	if err != nil || line != "second\n" {
		t.Fatalf("second line %q, %v", line, err)
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Fatalf("after the end: %q, %v", rest, err)
	}
}
