// Package conformance is the conformance kit of Splitlet's stages: a Go test
// suite that any implementation of a stage (in any language) can be run
// against over the bus. Each exported function takes a *testing.T and a
// Target, publishes the inputs docs/bus.md documents for the stage on the
// node's subjects, and asserts that the documented outputs follow (bus
// messages, API objects) within deadlines.
//
//	func TestMyProber(t *testing.T) {
//		nats := testenv.NATSForTest(t)
//		startMyProber(t, nats.URL, "conf-node")
//		conformance.Prober(t, conformance.Target{NATSURL: nats.URL, Node: "conf-node"})
//	}
//
// The kit plays every other stage itself: it is podconfig (PodUpdate,
// SourcesReady), the pod workers (PodRuntimeStatus, answers on
// runtime.probeexec), the prober (ProbeResult) or nodehb, as the stage under test
// needs. The stage under test must be running against the same NATS server
// (and API server, for the stages that use one) before the function is
// called, and use the same node name and partition count. Every case uses
// pods with fresh UIDs, so the cases can run one after another against one
// running stage.
//
// docs/experiments.md explains how to replace a stage and run the kit.
package conformance
