package app

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// TestStagesOwnConsumers: each stage's module hands it a JetStream handle
// that puts the consumers it runs on the stage's own list, so two stages
// of one process, their durables named alike, each report only their own.
func TestStagesOwnConsumers(t *testing.T) {
	const node = "own-node"
	_, js := testenv.NATSForTest(t).Connect(t)
	if err := bus.EnsureStreams(t.Context(), js, node); err != nil {
		t.Fatal(err)
	}
	lists := map[string]*bus.Consumers{}
	stage := func(name string) fx.Option {
		return fx.Module(name, ownConsumers, fx.Invoke(func(js jetstream.JetStream, cs *bus.Consumers) error {
			lists[name] = cs
			stop, err := bus.Consume(t.Context(), js, bus.ConsumerOptions{Stream: bus.StreamName(node, bus.StreamProbes), Durable: "podworkers-" + name},
				func(context.Context, string, *bus.Envelope) error { return nil })
			if err != nil {
				return err
			}
			t.Cleanup(stop)
			return nil
		}))
	}
	app := fx.New(fx.NopLogger, fx.Provide(func() jetstream.JetStream { return js }), stage("a"), stage("b"))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	if len(lists) != 2 || lists["a"] == lists["b"] {
		t.Fatalf("the stages share a list or lack one: %v", lists)
	}
	for name, cs := range lists {
		if lags := cs.Lags(t.Context()); len(lags) != 1 || lags[0].Durable != "podworkers-"+name {
			t.Errorf("stage %s reports %+v: want its own consumer alone", name, lags)
		}
	}
}
