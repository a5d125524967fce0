// Package bus is Splitlet's bus contract (docs/bus.md), whose version is
// the root of its subjects (Root): the NATS subjects the stages meet on,
// the envelope every message travels in (JSON or protobuf), the payloads
// of each kind, the partition function, and the JetStream streams that
// make delivery durable. docs/bus.md is the same contract in prose; a stage
// in any language that follows it can take the place of a Splitlet stage.
//
// Everything that names a subject or a stream lives in this package, once.
package bus
