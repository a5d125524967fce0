package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/testenv"
)

// TestShortFaultSuite is make faults' short version (make test): SIGKILL of
// the pod workers on the sim, process and CRI runtimes, one of three
// replicas lost, nats-server down. It fails on any pod lost, any hidden
// restart (or any restart at all on sim and CRI), any terminal status
// rewritten, any leaked process, any stage crash.
func TestShortFaultSuite(t *testing.T) {
	testenv.SkipShort(t, "the stage binaries, nats-server, etcd, kube-apiserver and containerd")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var out bytes.Buffer
	results, failed, err := runSuite(ctx, &out, shortCases(), t.TempDir())
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(shortCases()) {
		t.Fatalf("%d results for %d cases", len(results), len(shortCases()))
	}
	for _, r := range results {
		for _, n := range r.Notes {
			if strings.HasPrefix(n, "MISSED") {
				t.Errorf("%s: %s", r.Case, n)
			}
		}
	}
	if failed && !t.Failed() {
		t.Error("the suite says a case missed its targets")
	}
}
