package tcpprober_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/splitlet/splitlet/examples/tcpprober"
	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/bus/bustest"
	"github.com/splitlet/splitlet/libs/recording"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/prober"
)

// TestShadowDiffFindsPlantedChange: tcpprober with tcpprober.http-get=tcp
// (an httpGet probe checked as a TCP connect) runs as a shadow of the Go
// prober on the same live pods; the live diff reports exactly the pods
// whose probe is an httpGet against a server that answers 500 (Failure
// live, Success in the shadow), and none of the tcpSocket pods, on which
// both agree.
func TestShadowDiffFindsPlantedChange(t *testing.T) {
	cp := testenv.ControlPlaneForTest(t) // the Go prober's API client (Events)
	const node = "shadow-diff"
	n := bustest.Start(t, node)
	common := []string{"--nats-url=" + n.URL, "--node-name=" + node, "--partitions=4", "--kubeconfig=" + cp.Kubeconfig}
	apptest.Start(t, "prober", append(common, "--nats-nkey="+n.Seed(bus.StageProber)), prober.Service())
	apptest.Start(t, "tcpprober", append(common, "--nats-nkey="+n.Seed(bus.ShadowIdentity(bus.StageProber)),
		"--shadow", "--tcpprober.http-get=tcp"), tcpprober.Service())

	nc := n.Connect(t, bus.AdminIdentity)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close() })
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
	t.Cleanup(failing.Close)
	tcpPort := l.Addr().(*net.TCPAddr).Port
	httpPort, _ := strconv.Atoi(failing.URL[len("http://127.0.0.1:"):])

	pub := bus.NewPublisher(nc, js, node, "api")
	var want []string
	for i := range 4 {
		handler := corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(tcpPort))}}
		name := fmt.Sprintf("tcp-%d", i)
		if i%2 == 1 {
			handler = corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(int32(httpPort))}}
			name = fmt.Sprintf("http-%d", i)
		}
		uid := types.UID(fmt.Sprintf("%s-%d", name, time.Now().UnixNano()))
		if i%2 == 1 {
			want = append(want, fmt.Sprintf("default/%s (%s)", name, uid))
		}
		publishPod(t, pub, node, name, uid, &corev1.Probe{ProbeHandler: handler, PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1})
	}
	slices.Sort(want)

	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var last recording.LiveSummary
	var diffs []recording.LiveDifference
	done := make(chan error, 1)
	go func() {
		_, err := recording.Live(ctx, js, recording.LiveOptions{Node: node, Stage: bus.StageProber, Settle: 2 * time.Second, Every: 200 * time.Millisecond},
			func(ev recording.LiveEvent) {
				mu.Lock()
				defer mu.Unlock()
				if ev.Summary != nil {
					last = *ev.Summary
				}
				if ev.Difference != nil {
					diffs = append(diffs, *ev.Difference)
				}
			})
		done <- err
	}()
	// until both sides reported on the four pods and the httpGet ones were
	// found; then as long again as the settle time, for anything else.
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("a live diff of the pods %v", want), func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Equal(last.Pods, want) && last.Keys == 4, fmt.Sprintf("summary %+v, differences %+v", last, diffs)
	})
	<-time.After(3 * time.Second) // a window: no other pod may come to differ
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the live diff did not stop when cancelled")
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(last.Pods, want) || last.Differ != 2 {
		t.Errorf("pods that differ: %v (%d keys), want exactly %v", last.Pods, last.Differ, want)
	}
	// the planted change itself: Failure live (a GET answered 500), Success
	// in the shadow (a TCP connect), not merely other words in a message.
	for _, d := range diffs {
		if d.Live == nil || d.Shadow == nil || !strings.Contains(d.Live.Payload, `"result":"Failure"`) || !strings.Contains(d.Shadow.Payload, `"result":"Success"`) {
			t.Errorf("difference %+v: want Failure live and Success in the shadow", d)
		}
	}
	if last.Live == 0 || last.Shadow == 0 {
		t.Errorf("summary %+v: want messages from both sides", last)
	}
}

// publishPod publishes a running pod with one container and the given
// readiness probe, as podconfig and the pod workers would.
func publishPod(t *testing.T, pub *bus.Publisher, node, name string, uid types.UID, probe *corev1.Probe) {
	t.Helper()
	pod := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: uid, ResourceVersion: "1"},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "busybox", ReadinessProbe: probe}}},
	}
	now := metav1.Now()
	st := &bus.PodRuntimeStatus{UID: uid, Namespace: "default", Name: name, PodIP: "127.0.0.1", HostIP: "127.0.0.1", StartTime: &now,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", ContainerID: "sim://" + string(uid), Image: "busybox",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}
	part := bus.Partition(string(uid), 4)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := pub.Publish(ctx, bus.For(node).PodUpdates(part), bus.KindPodUpdate, bus.OpAdd, &bus.PodUpdate{Pods: []corev1.Pod{pod}}); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, bus.For(node).PodStatus(part), bus.KindPodRuntimeStatus, "", st); err != nil {
		t.Fatal(err)
	}
}
