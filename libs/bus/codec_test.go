package bus_test

import (
	"encoding/json"
	"errors"

	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
)

func pod(name, uid string) corev1.Pod {
	return corev1.Pod{
		// No TypeMeta: pods from an informer have none, and Kubernetes'
		// protobuf carries it outside the object.
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: k8stypes.UID("uid-" + uid)},
		Spec: corev1.PodSpec{
			NodeName:   "node-a",
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "3600"}}},
		},
	}
}

func seal(t *testing.T, kind bus.Kind, op bus.Op, payload any, opts ...bus.PublisherOption) *bus.Envelope {
	t.Helper()
	p := bus.NewPublisher(nil, nil, "node-a", "test", opts...)
	data, _, err := p.Seal(kind, op, payload)
	if err != nil {
		t.Fatal(err)
	}
	e, err := bus.Decode(data)
	if err != nil {
		t.Fatalf("decode of sealed %s: %v\n%s", kind, err, data)
	}
	return e
}

func TestRoundTrips(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	tail := int64(10)
	cases := []struct {
		kind    bus.Kind
		op      bus.Op
		payload any
		decode  func(*bus.Envelope) (any, error)
	}{
		{bus.KindPodUpdate, bus.OpAdd, &bus.PodUpdate{Pods: []corev1.Pod{pod("a", "1"), pod("b", "2")}},
			func(e *bus.Envelope) (any, error) { return bus.DecodePodUpdate(e) }},
		{bus.KindPodUpdate, bus.OpSet, &bus.PodUpdate{Pods: []corev1.Pod{}},
			func(e *bus.Envelope) (any, error) { return bus.DecodePodUpdate(e) }},
		{bus.KindPodRuntimeStatus, "", &bus.PodRuntimeStatus{UID: "u", Namespace: "default", Name: "a", PodIP: "127.0.0.1", StartTime: &now,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c", RestartCount: 2, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}},
			func(e *bus.Envelope) (any, error) { return bus.DecodePodRuntimeStatus(e) }},
		{bus.KindProbeResult, "", &bus.ProbeResult{PodUID: "u", Namespace: "default", Name: "a", Container: "c", ContainerID: "sim://1", Probe: bus.ProbeReadiness, Result: bus.ProbeSuccess},
			func(e *bus.Envelope) (any, error) { return bus.DecodeProbeResult(e) }},
		{bus.KindSourcesReady, "", &bus.SourcesReady{Sources: []string{"api", "file"}, Ready: []string{"api"}},
			func(e *bus.Envelope) (any, error) { return bus.DecodeSourcesReady(e) }},
		{bus.KindAgentReadiness, "", &bus.AgentReadiness{Ready: true, Partitions: 16, Replicas: []string{"r1"}},
			func(e *bus.Envelope) (any, error) { return bus.DecodeAgentReadiness(e) }},
		{bus.KindLogsRequest, "", &bus.LogsRequest{ContainerRef: bus.ContainerRef{PodUID: "u", Namespace: "default", Pod: "a", Container: "c"}, Follow: true, TailLines: &tail},
			func(e *bus.Envelope) (any, error) { return bus.DecodeLogsRequest(e) }},
		{bus.KindLogsChunk, "", &bus.LogsChunk{Data: []byte("hello\n"), EOF: true},
			func(e *bus.Envelope) (any, error) { return bus.DecodeLogsChunk(e) }},
		{bus.KindExecRequest, "", &bus.ExecRequest{ContainerRef: bus.ContainerRef{PodUID: "u", Namespace: "default", Pod: "a", Container: "c"}, Command: []string{"cat", "/etc/hostname"}, TimeoutSeconds: 1},
			func(e *bus.Envelope) (any, error) { return bus.DecodeExecRequest(e) }},
		{bus.KindExecResult, "", &bus.ExecResult{Stdout: []byte("x"), ExitCode: 3},
			func(e *bus.Envelope) (any, error) { return bus.DecodeExecResult(e) }},
		{bus.KindStreamRequest, "", &bus.StreamRequest{ContainerRef: bus.ContainerRef{PodUID: "u", Namespace: "default", Pod: "a", Container: "c"}, Command: []string{"sh"}, Stdin: true, Stdout: true, TTY: true},
			func(e *bus.Envelope) (any, error) { return bus.DecodeStreamRequest(e) }},
		{bus.KindStreamRequest, "", &bus.StreamRequest{ContainerRef: bus.ContainerRef{PodUID: "u", Namespace: "default", Pod: "a"}, PortForward: true, Ports: []int32{80}},
			func(e *bus.Envelope) (any, error) { return bus.DecodeStreamRequest(e) }},
		{bus.KindStreamResult, "", &bus.StreamResult{URL: "http://127.0.0.1:35001/exec/Xy7Qz"},
			func(e *bus.Envelope) (any, error) { return bus.DecodeStreamResult(e) }},
		{bus.KindStaticPods, "", &bus.StaticPods{Pods: []bus.StaticPod{{UID: "h", Namespace: "kube-system", Name: "etcd-node-a"}}, Path: "/etc/kubernetes/manifests"},
			func(e *bus.Envelope) (any, error) { return bus.DecodeStaticPods(e) }},
		{bus.KindNodePressure, "", &bus.NodePressure{Conditions: []corev1.NodeConditionType{corev1.NodeMemoryPressure}},
			func(e *bus.Envelope) (any, error) { return bus.DecodeNodePressure(e) }},
		{bus.KindEvictRequest, "", &bus.EvictRequest{PodUID: "u", Namespace: "default", Pod: "a", Reason: "Evicted", Message: "The node was low on resource: memory. ", GracePeriodSeconds: 0},
			func(e *bus.Envelope) (any, error) { return bus.DecodeEvictRequest(e) }},
		{bus.KindEvictResult, "", &bus.EvictResult{Evicted: true},
			func(e *bus.Envelope) (any, error) { return bus.DecodeEvictResult(e) }},
		{bus.KindReclaimRequest, "", &bus.ReclaimRequest{Signal: "nodefs.available"},
			func(e *bus.Envelope) (any, error) { return bus.DecodeReclaimRequest(e) }},
		{bus.KindReclaimResult, "", &bus.ReclaimResult{ImageBytesFreed: 4 << 20},
			func(e *bus.Envelope) (any, error) { return bus.DecodeReclaimResult(e) }},
		{bus.KindDeviceAllocateRequest, "", &bus.DeviceAllocateRequest{PodUID: "u", Namespace: "default", Pod: "a", Start: "c",
			Containers: []bus.DeviceContainer{{Name: "c", Resources: map[string]int64{"example.com/dev": 1}}}},
			func(e *bus.Envelope) (any, error) { return bus.DecodeDeviceAllocateRequest(e) }},
		{bus.KindDeviceAllocateResult, "", &bus.DeviceAllocateResult{Containers: []bus.DeviceContainerOptions{{Name: "c",
			Envs: map[string]string{"DEV": "0"}, Devices: []bus.DeviceNode{{ContainerPath: "/dev/x", HostPath: "/dev/x", Permissions: "rw"}}}}},
			func(e *bus.Envelope) (any, error) { return bus.DecodeDeviceAllocateResult(e) }},
		{bus.KindStatsResult, "", &bus.StatsResult{Pods: []bus.PodStats{{UID: "u", Name: "a", Namespace: "default", StartTime: now, Containers: []bus.ContainerStats{{Name: "c", StartTime: now, MemoryWorkingSetBytes: 42}}}}},
			func(e *bus.Envelope) (any, error) { return bus.DecodeStatsResult(e) }},
	}
	for _, c := range cases {
		for _, enc := range []bus.Encoding{bus.EncodingProtobuf, bus.EncodingJSON} {
			t.Run(string(c.kind)+string(c.op)+"/"+enc.String(), func(t *testing.T) {
				e := seal(t, c.kind, c.op, c.payload, bus.WithEncoding(enc))
				if e.Kind != c.kind || e.Op != c.op || e.Node != "node-a" || e.Source != "test" || e.Seq == 0 || e.SentAt.IsZero() {
					t.Fatalf("envelope fields lost: %+v", e)
				}
				got, err := c.decode(e)
				if err != nil {
					t.Fatal(err)
				}
				if !apiequality.Semantic.DeepEqual(got, c.payload) {
					a, _ := json.Marshal(got)
					b, _ := json.Marshal(c.payload)
					t.Fatalf("round trip changed the payload:\n got %s\nwant %s", a, b)
				}
			})
		}
	}
}

func TestSequenceIncreases(t *testing.T) {
	p := bus.NewPublisher(nil, nil, "n", "s")
	_, a, _ := p.Seal(bus.KindLogsChunk, "", &bus.LogsChunk{})
	_, b, _ := p.Seal(bus.KindLogsChunk, "", &bus.LogsChunk{})
	if b.Seq != a.Seq+1 {
		t.Fatalf("seq %d then %d", a.Seq, b.Seq)
	}
	// A publisher started later (a restarted source) starts above.
	q := bus.NewPublisher(nil, nil, "n", "s")
	_, c, _ := q.Seal(bus.KindLogsChunk, "", &bus.LogsChunk{})
	if c.Seq <= a.Seq {
		t.Fatalf("restarted publisher seq %d not above %d", c.Seq, a.Seq)
	}
}

func TestDecodeErrorsNameTheField(t *testing.T) {
	valid := func(mut func(m map[string]any)) []byte {
		m := map[string]any{
			"schemaVersion": 1, "kind": "PodUpdate", "node": "n", "source": "api", "op": "ADD",
			"seq": 5, "sentAt": "2026-01-01T00:00:00Z",
			"payload": map[string]any{"pods": []any{map[string]any{"metadata": map[string]any{"name": "a", "namespace": "default", "uid": "u"}}}},
		}
		mut(m)
		b, _ := json.Marshal(m)
		return b
	}
	cases := []struct {
		name  string
		data  []byte
		field string
	}{
		{"empty", []byte("  "), "(message)"},
		{"not json", []byte("{nope"), "(message)"},
		{"schema", valid(func(m map[string]any) { m["schemaVersion"] = 2 }), "schemaVersion"},
		{"schema type", valid(func(m map[string]any) { m["schemaVersion"] = "one" }), "schemaVersion"},
		{"kind", valid(func(m map[string]any) { m["kind"] = "Nope" }), "kind"},
		{"node", valid(func(m map[string]any) { delete(m, "node") }), "node"},
		{"source", valid(func(m map[string]any) { m["source"] = "" }), "source"},
		{"op", valid(func(m map[string]any) { m["op"] = "MERGE" }), "op"},
		{"op on other kind", valid(func(m map[string]any) { m["kind"] = "ProbeResult" }), "op"},
		{"seq", valid(func(m map[string]any) { m["seq"] = 0 }), "seq"},
		{"seq negative", valid(func(m map[string]any) { m["seq"] = -1 }), "seq"},
		{"sentAt", valid(func(m map[string]any) { delete(m, "sentAt") }), "sentAt"},
		{"payload", valid(func(m map[string]any) { m["payload"] = []any{} }), "payload"},
		{"pod uid", valid(func(m map[string]any) {
			m["payload"] = map[string]any{"pods": []any{map[string]any{"metadata": map[string]any{"name": "a", "namespace": "x"}}}}
		}), "payload.pods[0].metadata.uid"},
		{"pods type", valid(func(m map[string]any) { m["payload"] = map[string]any{"pods": "x"} }), "payload.pods"},
		{"empty add", valid(func(m map[string]any) { m["payload"] = map[string]any{"pods": []any{}} }), "payload.pods"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := bus.Decode(c.data)
			if err == nil && e.Kind == bus.KindPodUpdate {
				_, err = bus.DecodePodUpdate(e)
			}
			var fe *bus.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("want a FieldError naming %s, got %v", c.field, err)
			}
			if fe.Field != c.field {
				t.Fatalf("error names %q, want %q (%v)", fe.Field, c.field, err)
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Fatalf("message %q does not name %s", err, c.field)
			}
		})
	}
}

// PodOrder takes a pod's statuses in their source's order, another
// source's at any time, and an unordered one (seq 0) without moving.
func TestPodOrder(t *testing.T) {
	var o bus.PodOrder
	for _, c := range []struct {
		source string
		seq    uint64
		take   bool
	}{
		{"a", 5, true}, {"a", 5, false}, {"a", 3, false}, {"b", 1, true}, {"a", 2, true},
		{"", 0, true}, {"a", 2, false}, {"a", 6, true},
	} {
		if got := o.Take(c.source, c.seq); got != c.take {
			t.Fatalf("Take(%q, %d) after %+v = %v, want %v", c.source, c.seq, o, got, c.take)
		}
	}
}

// A runtime request names the pod it means by namespace and name besides its
// UID (the owner checks the three agree), and a StaticPods entry names all
// three: a message without one is refused with the field.
// A port-forward request names a pod and nothing of a container's: no
// container, command or streams, ports that are ports; ports go with
// portForward only.
func TestPortForwardRequest(t *testing.T) {
	p := bus.NewPublisher(nil, nil, "n", "nodehb")
	pod := bus.ContainerRef{PodUID: "u", Namespace: "default", Pod: "a"}
	for _, c := range []struct {
		req   bus.StreamRequest
		field string
	}{
		{bus.StreamRequest{ContainerRef: bus.ContainerRef{PodUID: "u", Namespace: "default", Pod: "a", Container: "c"}, PortForward: true}, "payload.container"},
		{bus.StreamRequest{ContainerRef: pod, PortForward: true, Command: []string{"sh"}}, "payload.command"},
		{bus.StreamRequest{ContainerRef: pod, PortForward: true, Stdout: true}, "payload.stdin"},
		{bus.StreamRequest{ContainerRef: pod, PortForward: true, Ports: []int32{0}}, "payload.ports"},
		{bus.StreamRequest{ContainerRef: pod, PortForward: true, Ports: []int32{65536}}, "payload.ports"},
		{bus.StreamRequest{ContainerRef: bus.ContainerRef{PodUID: "u", Namespace: "default", Pod: "a", Container: "c"}, Command: []string{"sh"}, Stdout: true, Ports: []int32{80}}, "payload.ports"},
	} {
		data, _, err := p.Seal(bus.KindStreamRequest, "", &c.req)
		if err != nil {
			t.Fatal(err)
		}
		e, err := bus.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		var fe *bus.FieldError
		if _, err := bus.DecodeStreamRequest(e); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want an error naming %s", c.req, err, c.field)
		}
	}
}

func TestRequestsAndStaticPodsNameThePod(t *testing.T) {
	p := bus.NewPublisher(nil, nil, "n", "nodehb")
	cases := []struct {
		kind    bus.Kind
		payload any
		decode  func(*bus.Envelope) error
		field   string
	}{
		{bus.KindExecRequest, &bus.ExecRequest{ContainerRef: bus.ContainerRef{PodUID: "u", Pod: "a", Container: "c"}, Command: []string{"true"}},
			func(e *bus.Envelope) error { _, err := bus.DecodeExecRequest(e); return err }, "payload.namespace"},
		{bus.KindLogsRequest, &bus.LogsRequest{ContainerRef: bus.ContainerRef{PodUID: "u", Namespace: "default", Container: "c"}},
			func(e *bus.Envelope) error { _, err := bus.DecodeLogsRequest(e); return err }, "payload.pod"},
		{bus.KindStreamRequest, &bus.StreamRequest{ContainerRef: bus.ContainerRef{PodUID: "u", Pod: "a", Container: "c"}, Command: []string{"sh"}, Stdout: true},
			func(e *bus.Envelope) error { _, err := bus.DecodeStreamRequest(e); return err }, "payload.namespace"},
		{bus.KindStreamRequest, &bus.StreamRequest{ContainerRef: bus.ContainerRef{PodUID: "u", Namespace: "default"}, PortForward: true},
			func(e *bus.Envelope) error { _, err := bus.DecodeStreamRequest(e); return err }, "payload.pod"},
		{bus.KindStaticPods, &bus.StaticPods{Pods: []bus.StaticPod{{UID: "h", Namespace: "default", Name: "a"}, {UID: "h2", Namespace: "default"}}},
			func(e *bus.Envelope) error { _, err := bus.DecodeStaticPods(e); return err }, "payload.pods[1].name"},
	}
	for _, c := range cases {
		data, _, err := p.Seal(c.kind, "", c.payload)
		if err != nil {
			t.Fatal(err)
		}
		e, err := bus.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		var fe *bus.FieldError
		if err := c.decode(e); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v, want an error naming %s", c.kind, err, c.field)
		}
	}
}
