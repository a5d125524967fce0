// Package podworkers is the podworkers stage of Splitlet: it runs the kubelet's pod worker state machine, one serialized worker per pod UID, over a container runtime.
//
// Service is the only thing binaries import: cmd/podworkers runs it alone, and
// cmd/splitlet runs it beside the other stages.
package podworkers

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/services/podworkers/internal/ownership"
	"github.com/splitlet/splitlet/services/podworkers/internal/service"
)

// Name is the service's name in --services.
const Name = "podworkers"

// Service returns the podworkers stage, ready for app.Run.
func Service() app.Service {
	s := app.NewService(Name, &service.Config{}, service.New)
	// memory-limit auto's budget for a pod, with the collector's headroom
	// (measured: docs/bench.md, "Memory"): the pod worker, the runtime's record and the admission view of each pod.
	s.MemoryPerPod = 28 << 10
	// --shadow: beside the live pod workers, deciding on the live pod
	// updates, changing nothing on the node (docs/bus.md, "Shadow stages").
	s.Shadow = true
	return s
}

// EnsureLeaseBucket makes the node's partition lease bucket (`splitlet bus
// init`, with an identity that may manage streams) with the given
// replicas; an existing bucket is left as it is.
func EnsureLeaseBucket(ctx context.Context, js jetstream.JetStream, node string, replicas int) error {
	_, err := ownership.CreateBucket(ctx, js, bus.NodeToken(node), replicas)
	return err
}
