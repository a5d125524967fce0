package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/testenv"
)

// TestLocalUpOnce runs what `make run` runs, stopping once up: the control
// plane starts, splitlet becomes ready, the demo pod is applied and the
// kubectl hints are printed; then everything stops.
func TestLocalUpOnce(t *testing.T) {
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	// localup runs bin/splitlet: build it from this checkout so the test
	// checks the current code.
	root := filepath.Dir(bin)
	if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "splitlet"), filepath.Join(root, "cmd", "splitlet")).CombinedOutput(); err != nil {
		t.Fatalf("build splitlet: %v\n%s", err, out)
	}
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = run(ctx, options{stateDir: t.TempDir(), node: "splitlet-node", runtime: "sim", once: true, out: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"Splitlet is up", "export KUBECONFIG=", "kubectl logs demo", "stopping splitlet", "stopping the control plane"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
