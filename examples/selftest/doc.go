// Package selftest runs the conformance kit (libs/conformance) against
// Splitlet's own stages, each in the test's process as its binary runs it,
// with an embedded NATS server and a real API server. It holds tests only.
package selftest
