package service

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/bus"
)

// checkStream asks the owner of the pod's partition for an interactive
// exec of its container "app": the URL of containerd's stream server on
// CRI; the other runtimes have none and say so.
func (e *env) checkStream(ctx context.Context, t *testing.T, p *corev1.Pod) {
	t.Helper()
	ref := bus.ContainerRef{PodUID: p.UID, Namespace: p.Namespace, Pod: p.Name, Container: "app"}
	subject := bus.For(e.node).Stream(bus.Partition(string(p.UID), partitions))
	env, err := e.pub.Request(ctx, subject, bus.KindStreamRequest, &bus.StreamRequest{ContainerRef: ref, Command: []string{"sh"}, Stdin: true, Stdout: true, TTY: true})
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	res, err := bus.DecodeStreamResult(env)
	st, _ := e.get(p.UID)
	if err != nil || st == nil || len(st.ContainerStatuses) == 0 {
		t.Fatalf("stream result %+v, %v (status %+v)", res, err, st)
	}
	if id := st.ContainerStatuses[0].ContainerID; strings.HasPrefix(id, "containerd://") {
		if !strings.HasPrefix(res.URL, "http://127.0.0.1:") || res.Error != "" {
			t.Fatalf("stream on CRI: %+v, want a URL of containerd's stream server on 127.0.0.1", res)
		}
	} else if !res.Unsupported || res.URL != "" || !strings.HasPrefix(res.Error, "tty: not supported by the ") {
		t.Fatalf("stream for %s: %+v, want unsupported", id, res)
	}
}
