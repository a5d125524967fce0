package bus_test

import (
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/splitlet/splitlet/libs/bus"
)

// TestRemoveRetiredConsumers: the pod workers' per-partition probe durables
// go; a stage's durable, a shadow's and a follower stay.
func TestRemoveRetiredConsumers(t *testing.T) {
	ctx := t.Context()
	js, _ := nodeN(t, "init")
	stream := bus.StreamName("n", bus.StreamProbes)
	durable := func(name string) {
		if _, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"podworkers-probes-p0", "podworkers-probes-p15", bus.DurableStatussyncProbes, bus.ShadowDurable(bus.DurableStatussyncProbes)} {
		durable(name)
	}
	follower, err := bus.Follow(ctx, js, bus.FollowOptions{Stream: stream, Name: "podworkers-probes-p1", Filters: []string{bus.For("n").ProbeResults(1)}},
		new(collected).handler)
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Stop()
	n, err := bus.RemoveRetiredConsumers(ctx, js, "n")
	if err != nil || n != 2 {
		t.Fatalf("removed %d, %v; want the 2 probe durables", n, err)
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	names := s.ConsumerNames(ctx)
	for name := range names.Name() {
		left = append(left, name)
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(left)
	if len(left) != 3 || left[0] == "podworkers-probes-p0" || !slices.Contains(left, bus.DurableStatussyncProbes) ||
		!slices.Contains(left, bus.ShadowDurable(bus.DurableStatussyncProbes)) {
		t.Errorf("consumers left: %v; want statussync's, its shadow's and the follower", left)
	}
	if n, err := bus.RemoveRetiredConsumers(ctx, js, "n"); err != nil || n != 0 {
		t.Errorf("second run removed %d, %v; want none", n, err)
	}
}
