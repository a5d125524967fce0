package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// checkIdentities: every stage container mounts its own identity directory
// and no other, and the API server sees nodehb, podconfig and statussync as
// the node and podworkers and prober as their roles.
func (s *stack) checkIdentities(t *testing.T) {
	t.Helper()
	ids := filepath.Join(s.env["SPLITLET_STATE_DIR"], "identities")
	for _, stage := range bus.Stages {
		for _, id := range s.containers(t, stage) {
			out, err := exec.Command("docker", "inspect", "--format", "{{range .Mounts}}{{.Source}}\n{{end}}", id).Output()
			if err != nil {
				t.Fatalf("docker inspect %s: %v", stage, err)
			}
			for _, src := range strings.Fields(string(out)) {
				if strings.HasPrefix(src, ids) && src != filepath.Join(ids, stage) {
					t.Errorf("%s mounts %s, not only its own identity", stage, src)
				}
			}
			if !strings.Contains(string(out), filepath.Join(ids, stage)) {
				t.Errorf("%s does not mount its identity: %s", stage, out)
			}
		}
		want := "splitlet:" + stage
		if stage == bus.StageNodehb || stage == bus.StagePodconfig || stage == bus.StageStatussync || stage == bus.StagePodworkers {
			want = "system:node:" + nodeName
		}
		if got := whoAmI(t, filepath.Join(ids, stage, "kubeconfig")); got != want {
			t.Errorf("%s runs as %q, want %q", stage, got, want)
		}
	}
}

// whoAmI is the user the API server sees behind a kubeconfig.
func whoAmI(t *testing.T, kubeconfig string) string {
	t.Helper()
	user, _, err := testenv.WhoAmI(context.Background(), kubeconfig)
	if err != nil {
		t.Fatalf("%s: %v", kubeconfig, err)
	}
	return user
}

// restartAPIServer restarts the kube-apiserver container: the clients made
// before (the test's admin kubeconfig, the stages') are served again.
func (s *stack) restartAPIServer(t *testing.T) {
	t.Helper()
	ids := s.containers(t, "apiserver")
	if len(ids) != 1 {
		t.Fatalf("apiserver containers: %v", ids)
	}
	if out, err := exec.Command("docker", "restart", ids[0]).CombinedOutput(); err != nil {
		t.Fatalf("docker restart apiserver: %v: %s", err, out)
	}
	eventually(t, 2*time.Minute, "kube-apiserver back, with the credentials of before", func() (bool, string) {
		err := s.cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(context.Background()).Error()
		return err == nil, fmt.Sprint(err)
	})
	s.waitNodeReady(t)
}
