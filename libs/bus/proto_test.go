package bus_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/splitlet/splitlet/libs/bus"
)

// decodedPayload decodes an envelope's payload of any kind.
func decodedPayload(t testing.TB, e *bus.Envelope) any {
	t.Helper()
	v, err := decodeKind(e)
	if err != nil {
		t.Fatalf("%s payload: %v", e.Kind, err)
	}
	return v
}

// reencode writes a decoded message again in enc, with its seq and time.
func reencode(t testing.TB, enc bus.Encoding, e *bus.Envelope, payload any) []byte {
	t.Helper()
	out, err := bus.NewEnvelopeAs(enc, e.Kind, e.Node, e.Source, e.Op, payload)
	if err != nil {
		t.Fatal(err)
	}
	out.Seq, out.SentAt = e.Seq, e.SentAt
	data, err := bus.Encode(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// throughBytes seals payload in an envelope of enc, writes it and reads it
// back, as a receiver gets it.
func throughBytes(t testing.TB, enc bus.Encoding, kind bus.Kind, op bus.Op, seq uint64, payload any) *bus.Envelope {
	t.Helper()
	e, err := bus.NewEnvelopeAs(enc, kind, "n", "w", op, payload)
	if err != nil {
		t.Fatal(err)
	}
	e.Seq, e.SentAt = seq, time.Now()
	data, err := bus.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	back, err := bus.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

// protoForm are the kinds with a protobuf form; the others are JSON in
// either encoding.
var protoForm = map[bus.Kind]bool{bus.KindPodUpdate: true, bus.KindPodRuntimeStatus: true, bus.KindProbeResult: true}

// TestProtobufCarriesWhatJSONCarries: every example of docs/bus.md whose
// kind has a protobuf form, written as protobuf and read back, is the same
// message as its JSON (compared in JSON, the form both sides agree on), and
// smaller.
func TestProtobufCarriesWhatJSONCarries(t *testing.T) {
	protoKinds := map[bus.Kind]bool{}
	for i, data := range docExamples(t) {
		e, err := bus.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		v := decodedPayload(t, e)
		if v == nil {
			continue
		}
		pb := reencode(t, bus.EncodingProtobuf, e, v)
		back, err := bus.Decode(pb)
		if err != nil {
			t.Fatalf("example %d (%s) as protobuf: %v", i, e.Kind, err)
		}
		if back.Encoding != bus.EncodingProtobuf {
			if protoForm[e.Kind] {
				t.Fatalf("example %d: %s was not written as protobuf", i, e.Kind)
			}
			continue
		}
		protoKinds[e.Kind] = true
		if back.Kind != e.Kind || back.Op != e.Op || back.Seq != e.Seq || back.Source != e.Source || back.Node != e.Node ||
			!back.SentAt.Equal(e.SentAt) || back.SchemaVersion != bus.SchemaVersionProtobuf {
			t.Fatalf("example %d: envelope %+v came back as %+v", i, e, back)
		}
		want, _ := json.Marshal(v)
		got, _ := json.Marshal(decodedPayload(t, back))
		if !bytes.Equal(want, got) {
			t.Fatalf("example %d (%s): payload changed through protobuf:\n json  %s\n proto %s", i, e.Kind, want, got)
		}
		if len(pb) >= len(reencode(t, bus.EncodingJSON, e, v)) {
			t.Errorf("example %d (%s): protobuf %d bytes, not smaller than JSON", i, e.Kind, len(pb))
		}
	}
	for k := range protoForm {
		if !protoKinds[k] {
			t.Errorf("docs/bus.md has no example of %s to check its protobuf form with", k)
		}
	}
}

// TestProtobufKindsByValue: a payload of a kind with a protobuf form is
// written as protobuf whether the publisher is handed a pointer or a value.
func TestProtobufKindsByValue(t *testing.T) {
	for _, c := range []struct {
		kind    bus.Kind
		op      bus.Op
		payload any
	}{
		{bus.KindPodUpdate, bus.OpAdd, bus.PodUpdate{Pods: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{UID: "u1", Name: "p", Namespace: "ns"}}}}},
		{bus.KindPodRuntimeStatus, "", bus.PodRuntimeStatus{UID: "u1", Name: "p", Namespace: "ns"}},
		{bus.KindProbeResult, "", bus.ProbeResult{PodUID: "u1", Name: "p", Namespace: "ns", Container: "c", ContainerID: "cri://1",
			Probe: bus.ProbeReadiness, Result: bus.ProbeSuccess}},
	} {
		if back := throughBytes(t, bus.EncodingProtobuf, c.kind, c.op, 1, c.payload); back.Encoding != bus.EncodingProtobuf {
			t.Errorf("%s handed as a value was written as %s", c.kind, back.Encoding)
		}
	}
}

// TestProtobufPodRuntimeStatusFields fills every field of a runtime status,
// so that a field the protobuf form forgets shows.
func TestProtobufPodRuntimeStatusFields(t *testing.T) {
	start := metav1.NewTime(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
	cs := func(name string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Ready: true, RestartCount: 2, Image: "busybox", ImageID: "sha256:1",
			ContainerID: "cri://" + name, Started: new(true),
			State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", FinishedAt: start}},
			AllocatedResources:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}
	}
	in := &bus.PodRuntimeStatus{UID: "u1", Namespace: "ns", Name: "p", PodIP: "10.0.0.2", HostIP: "10.0.0.1", StartTime: &start,
		Phase: corev1.PodFailed, Reason: "Evicted", Message: "low on memory",
		InitContainerStatuses: []corev1.ContainerStatus{cs("init")}, ContainerStatuses: []corev1.ContainerStatus{cs("a"), cs("b")},
		EphemeralContainerStatuses: []corev1.ContainerStatus{cs("debug")},
		ContainerHashes:            map[string]string{"cri://a": "0123456789abcdef", "cri://b": "fedcba9876543210"},
		Terminating:                true, Terminated: true,
		Conditions: []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, ObservedGeneration: 2,
			LastTransitionTime: start, Reason: corev1.PodReasonTerminationByKubelet, Message: "low on memory"}}}
	out, err := bus.DecodePodRuntimeStatus(throughBytes(t, bus.EncodingProtobuf, bus.KindPodRuntimeStatus, "", 7, in))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(in)
	got, _ := json.Marshal(out)
	if !bytes.Equal(want, got) {
		t.Fatalf("runtime status changed through protobuf:\n in  %s\n out %s", want, got)
	}
	pu := &bus.PodUpdate{Snapshot: &bus.SnapshotPart{ID: "s1", Part: 2, Parts: 3}, Pods: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{UID: "u", Name: "p", Namespace: "ns"}}}}
	u, err := bus.DecodePodUpdate(throughBytes(t, bus.EncodingProtobuf, bus.KindPodUpdate, bus.OpSetPart, 8, pu))
	if err != nil || u.Snapshot == nil || *u.Snapshot != *pu.Snapshot || len(u.Pods) != 1 || u.Pods[0].UID != "u" {
		t.Fatalf("SETPART through protobuf: %+v, %v", u, err)
	}
}

// TestDecodeMsgFollowsTheHeader: the Content-Type header names the form; a
// message without one is told by its first byte (JSON).
func TestDecodeMsgFollowsTheHeader(t *testing.T) {
	ex := docExamples(t)[0]
	e, err := bus.Decode(ex)
	if err != nil {
		t.Fatal(err)
	}
	pb := reencode(t, bus.EncodingProtobuf, e, decodedPayload(t, e))
	jsonHeader := map[string][]string{bus.HeaderContentType: {bus.ContentTypeJSON}}
	if _, err := bus.DecodeMsg(jsonHeader, pb); err == nil {
		t.Error("protobuf under a JSON Content-Type decoded")
	}
	if _, err := bus.DecodeMsg(map[string][]string{bus.HeaderContentType: {bus.ContentTypeProtobuf}}, ex); err == nil {
		t.Error("JSON under a protobuf Content-Type decoded")
	}
	_, err = bus.DecodeMsg(map[string][]string{bus.HeaderContentType: {"text/xml"}}, ex)
	if err == nil || !strings.Contains(err.Error(), "text/xml") {
		t.Errorf("unknown Content-Type: %v", err)
	}
	for name, data := range map[string][]byte{"json": ex, "protobuf": pb} {
		if _, err := bus.DecodeMsg(nil, data); err != nil {
			t.Errorf("%s without a header: %v", name, err)
		}
	}
	// A v1 JSON message keeps schemaVersion 1; protobuf must say 2.
	if _, err := bus.Decode(bytes.Replace(ex, []byte(`"schemaVersion": 1`), []byte(`"schemaVersion": 2`), 1)); err == nil {
		t.Error("a JSON message with schemaVersion 2 decoded")
	}
}

// SameAs tells statuses apart by everything a receiver reads, and finds
// equal ones equal however their maps were built.
func TestRuntimeStatusSameAs(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	base := func() *bus.PodRuntimeStatus {
		return &bus.PodRuntimeStatus{
			UID: "u1", Namespace: "ns", Name: "p", PodIP: "10.0.0.1", HostIP: "127.0.0.1", StartTime: &started,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "busybox", ContainerID: "sim://1", RestartCount: 2,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}},
			ContainerHashes: map[string]string{"sim://1": "a", "sim://0": "b", "sim://2": "c"},
		}
	}
	var bufs [2][]byte
	same := func(a, b *bus.PodRuntimeStatus) bool {
		t.Helper()
		eq, err := a.SameAs(b, &bufs)
		if err != nil {
			t.Fatal(err)
		}
		return eq
	}
	if !same(base(), base()) {
		t.Fatal("equal statuses differ")
	}
	changes := map[string]func(*bus.PodRuntimeStatus){
		"phase":        func(s *bus.PodRuntimeStatus) { s.Phase = corev1.PodFailed },
		"terminated":   func(s *bus.PodRuntimeStatus) { s.Terminated = true },
		"terminating":  func(s *bus.PodRuntimeStatus) { s.Terminating = true },
		"restarts":     func(s *bus.PodRuntimeStatus) { s.ContainerStatuses[0].RestartCount = 3 },
		"ready":        func(s *bus.PodRuntimeStatus) { s.ContainerStatuses[0].Ready = true },
		"state":        func(s *bus.PodRuntimeStatus) { s.ContainerStatuses[0].State = corev1.ContainerState{} },
		"hash":         func(s *bus.PodRuntimeStatus) { s.ContainerHashes["sim://1"] = "z" },
		"init":         func(s *bus.PodRuntimeStatus) { s.InitContainerStatuses = []corev1.ContainerStatus{{Name: "i"}} },
		"ephemeral":    func(s *bus.PodRuntimeStatus) { s.EphemeralContainerStatuses = []corev1.ContainerStatus{{Name: "e"}} },
		"start time":   func(s *bus.PodRuntimeStatus) { s.StartTime = nil },
		"message":      func(s *bus.PodRuntimeStatus) { s.Message = "m" },
		"pod IP":       func(s *bus.PodRuntimeStatus) { s.PodIP = "" },
		"container ID": func(s *bus.PodRuntimeStatus) { s.ContainerStatuses[0].ContainerID = "sim://9" },
	}
	for name, change := range changes {
		b := base()
		change(b)
		if same(base(), b) || same(b, base()) {
			t.Errorf("%s: a changed status compares equal", name)
		}
	}
}

// BenchmarkRuntimeStatusCompare: SameAs against the API's semantic
// comparison, on two equal statuses (a resync's common case).
func BenchmarkRuntimeStatusCompare(b *testing.B) {
	started := metav1.NewTime(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	mk := func() *bus.PodRuntimeStatus {
		return &bus.PodRuntimeStatus{UID: "u1", Namespace: "ns", Name: "p", PodIP: "10.0.0.1", HostIP: "127.0.0.1", StartTime: &started,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "busybox", ImageID: "sim://busybox", ContainerID: "sim://1",
				Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}},
			ContainerHashes: map[string]string{"sim://1": "9a3f0c27d41b88e5"}}
	}
	x, y := mk(), mk()
	b.Run("SameAs", func(b *testing.B) {
		var bufs [2][]byte
		for b.Loop() {
			if eq, err := x.SameAs(y, &bufs); err != nil || !eq {
				b.Fatal(eq, err)
			}
		}
	})
	b.Run("SemanticDeepEqual", func(b *testing.B) {
		for b.Loop() {
			if !apiequality.Semantic.DeepEqual(x, y) {
				b.Fatal("differ")
			}
		}
	})
}

// TestDecodePodUpdateWith: a protobuf pod update's pods are decoded by the
// reader's decoder (PodMetadata: the metadata alone), the payload's rules
// still checked on them; a JSON payload is decoded whole.
func TestDecodePodUpdateWith(t *testing.T) {
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u", Name: "p", Namespace: "ns", Labels: map[string]string{"a": "b"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	envelope := func(enc bus.Encoding, pods ...corev1.Pod) *bus.Envelope {
		return throughBytes(t, enc, bus.KindPodUpdate, bus.OpAdd, 1, &bus.PodUpdate{Pods: pods})
	}
	u, err := bus.DecodePodUpdateWith(envelope(bus.EncodingProtobuf, pod), bus.PodMetadata)
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Pods[0]; got.UID != "u" || got.Labels["a"] != "b" || len(got.Spec.Containers) != 0 {
		t.Errorf("metadata alone: got uid %q, labels %v, %d containers", got.UID, got.Labels, len(got.Spec.Containers))
	}
	nameless := pod
	nameless.Name = ""
	if _, err := bus.DecodePodUpdateWith(envelope(bus.EncodingProtobuf, nameless), bus.PodMetadata); err == nil ||
		!strings.Contains(err.Error(), "payload.pods[0].metadata.name") {
		t.Errorf("a pod without a name, decoded by its metadata: %v, want the field's error", err)
	}
	u, err = bus.DecodePodUpdateWith(envelope(bus.EncodingJSON, pod), bus.PodMetadata)
	if err != nil || len(u.Pods[0].Spec.Containers) != 1 {
		t.Errorf("JSON pod update: %+v, %v; want the whole pod", u, err)
	}
}

// PodSpecAndStatus decodes the metadata and the spec as a whole decode
// does, and of the status exactly the fields it names.
func TestPodSpecAndStatus(t *testing.T) {
	start := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	pod := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: "u", Name: "p", Namespace: "ns", Labels: map[string]string{"a": "b"}, Generation: 3},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "low on memory", StartTime: &start,
			QOSClass: corev1.PodQOSGuaranteed, PodIP: "10.0.0.1", HostIP: "10.0.0.2",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c", RestartCount: 2}}},
	}
	raw, err := pod.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var got corev1.Pod
	dec := bus.PodSpecAndStatus(bus.PodStatusPhase, bus.PodStatusReason, bus.PodStatusMessage, bus.PodStatusStartTime, bus.PodStatusQOSClass)
	if err := dec(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := pod
	want.Status = corev1.PodStatus{Phase: pod.Status.Phase, Reason: pod.Status.Reason, Message: pod.Status.Message,
		StartTime: pod.Status.StartTime, QOSClass: pod.Status.QOSClass}
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Errorf("decoded\n %+v\nwant\n %+v", got, want)
	}
	got = corev1.Pod{}
	if err := bus.PodSpecAndStatus()(raw, &got); err != nil || !apiequality.Semantic.DeepEqual(got.Status, corev1.PodStatus{}) || got.Spec.Containers[0].Name != "c" {
		t.Errorf("no status field: status %+v, spec %+v, %v", got.Status, got.Spec, err)
	}
	if err := dec(raw[:len(raw)-3], &corev1.Pod{}); err == nil {
		t.Error("a cut pod decoded without an error")
	}
}

// BenchmarkPodSpecAndStatus decodes a running pod's protobuf form whole,
// then with the status fields the pod workers keep.
func BenchmarkPodSpecAndStatus(b *testing.B) {
	start := metav1.Now()
	pod := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: "u", Name: "p", Namespace: "ns", Labels: map[string]string{"app": "bench"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "3600"}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &start, QOSClass: corev1.PodQOSBestEffort, PodIP: "10.0.0.1",
			PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}, HostIP: "10.0.0.2", HostIPs: []corev1.HostIP{{IP: "10.0.0.2"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: start},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: start},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: start},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: start}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: true, Image: "busybox", ImageID: "sha256:0123",
				ContainerID: "sim://0123", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}}}}},
	}
	raw, err := pod.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	for name, dec := range map[string]bus.PodDecoder{
		"whole":  func(raw []byte, p *corev1.Pod) error { return p.Unmarshal(raw) },
		"fields": bus.PodSpecAndStatus(bus.PodStatusPhase, bus.PodStatusReason, bus.PodStatusMessage, bus.PodStatusStartTime, bus.PodStatusQOSClass),
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var p corev1.Pod
				if err := dec(raw, &p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
