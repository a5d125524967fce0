package bus

import (
	"fmt"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/splitlet/splitlet/libs/testenv"
)

// Streams made by EnsureStreams are seen as conforming afterwards (the
// server's normalised settings included), so that a stage that may not
// manage streams never tries to.
func TestMadeStreamsConform(t *testing.T) {
	n := testenv.NATSForTest(t)
	_, js := n.Connect(t)
	ctx := t.Context()
	if err := EnsureStreamsReplicas(ctx, js, "conform", 1); err != nil {
		t.Fatal(err)
	}
	for _, want := range StreamConfigs("conform", 1) {
		s, err := js.Stream(ctx, want.Name)
		if err != nil {
			t.Fatal(err)
		}
		have := s.CachedInfo().Config
		if !conforms(have, want) {
			t.Errorf("%s does not conform:\nhave %s\nwant %s", want.Name, fmt.Sprintf("%+v", have), fmt.Sprintf("%+v", want))
		}
	}
}

// A pod-updates stream of podupdates.* alone (which leaves the reconciles
// out) does not conform; EnsureStreams widens
// it to podupdates.>, keeping what it holds, and a reconcile is stored.
func TestV1PodUpdatesStreamIsWidened(t *testing.T) {
	n := testenv.NATSForTest(t)
	_, js := n.Connect(t)
	ctx := t.Context()
	const node = "widen"
	s := For(node)
	var want jetstream.StreamConfig
	for _, cfg := range StreamConfigs(node, 1) {
		if cfg.Name == StreamName(node, StreamPodUpdates) {
			want = cfg
		}
	}
	if !slices.Equal(want.Subjects, []string{s.PodUpdatesStream()}) {
		t.Fatalf("pod-updates stream subjects %v, want [%s]", want.Subjects, s.PodUpdatesStream())
	}
	v1 := want
	v1.Subjects = []string{s.PodUpdatesAll()}
	if _, err := js.CreateStream(ctx, v1); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, s.PodUpdates(0), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, s.PodReconciles(0), []byte(`{}`)); err == nil {
		t.Fatal("a podupdates.* stream stored a reconcile")
	}
	st, err := js.Stream(ctx, want.Name)
	if err != nil {
		t.Fatal(err)
	}
	if conforms(st.CachedInfo().Config, want) {
		t.Fatal("a podupdates.* stream conforms")
	}
	if err := EnsureStreamsReplicas(ctx, js, node, 1); err != nil {
		t.Fatal(err)
	}
	if st, err = js.Stream(ctx, want.Name); err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	if !conforms(info.Config, want) || info.State.Msgs != 1 {
		t.Fatalf("after EnsureStreams: subjects %v, %d messages; want %v, 1", info.Config.Subjects, info.State.Msgs, want.Subjects)
	}
	if _, err := js.Publish(ctx, s.PodReconciles(0), []byte(`{}`)); err != nil {
		t.Fatalf("a reconcile after the stream was widened: %v", err)
	}
}
