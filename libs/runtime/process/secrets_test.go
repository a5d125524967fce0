package process

import (
	"strings"
	"testing"

	"github.com/splitlet/splitlet/libs/runtime"
)

// A container's environment and directory give it nothing of the pod
// worker's own: not its environment (where a stage's NATS URL, kubeconfig
// path and credentials live), not its files.
func TestContainerGetsNoneOfTheAgentsEnvironment(t *testing.T) {
	t.Setenv("SPLITLET_NATS_URL", "nats://stage:s3cret@127.0.0.1:4222")
	t.Setenv("SPLITLET_KUBECONFIG", "/state/kubeconfig")
	t.Setenv("KUBECONFIG", "/state/kubeconfig")
	r := newRuntime(t)
	p := shPod("u-noenv", `env; ls -a`)
	st := r.start(p, 0, 0)
	r.waitExit(st.ID)
	out := r.logs(p, "c0", runtime.LogOptions{TailLines: -1})
	for _, leak := range []string{"s3cret", "SPLITLET_", "KUBECONFIG", "/state"} {
		if strings.Contains(out, leak) {
			t.Errorf("the container sees %q:\n%s", leak, out)
		}
	}
	if !strings.Contains(out, "PATH=") {
		t.Fatalf("the container's env was not printed:\n%s", out)
	}
}
