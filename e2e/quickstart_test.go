package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/testenv"
)

// quickStartLines returns the kubectl lines of README.md's compose quick
// start, continuation lines joined, in order.
func quickStartLines(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(composeDir(t), "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "## Quick start")
	if !ok {
		t.Fatal("README.md has no Quick start section")
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		t.Fatal("README.md's Quick start has no sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	var lines []string
	var cur string
	for _, l := range strings.Split(block, "\n") {
		cur += l
		if strings.HasSuffix(cur, "\\") {
			cur = strings.TrimSuffix(cur, "\\") + " "
			continue
		}
		if strings.HasPrefix(cur, "kubectl ") {
			lines = append(lines, cur)
		}
		cur = ""
	}
	if len(lines) < 4 {
		t.Fatalf("README.md's Quick start has %d kubectl lines, want the get/run/logs/delete walk: %q", len(lines), lines)
	}
	return lines
}

// walkQuickStart runs README.md's quick-start kubectl lines as written,
// through the real kubectl, against the stack: a line that fails is run
// again until it passes or its deadline ends (a newcomer's `kubectl logs`
// may come before the container started), except `kubectl run`, which
// creates and must pass at once. Each line's output must show it did what
// the README says.
func walkQuickStart(t *testing.T, s *stack) {
	t.Helper()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatalf("kubectl is not on PATH: the quick start runs it (%v)", err)
	}
	for _, line := range quickStartLines(t) {
		var want *regexp.Regexp
		once := false
		switch {
		case strings.HasPrefix(line, "kubectl get nodes"):
			// The README says the node is Ready here.
			want = regexp.MustCompile(nodeName + `\s+Ready`)
		case strings.HasPrefix(line, "kubectl run demo"):
			want, once = regexp.MustCompile(`pod/demo created`), true
		case strings.HasPrefix(line, "kubectl logs demo"):
			want = regexp.MustCompile(`(?m)^hello$`)
		case strings.HasPrefix(line, "kubectl delete pod demo"):
			want = regexp.MustCompile(`pod "demo" deleted`)
		default:
			t.Fatalf("README quick-start line %q is not walked by this test: add it", line)
		}
		var out string
		testenv.Eventually(t, 90*time.Second, line, func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-c", line)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig)
			data, err := cmd.CombinedOutput()
			out = string(data)
			if once && err != nil {
				t.Fatalf("%s: %v\n%s", line, err, data)
			}
			return err == nil && want.MatchString(out), out
		})
		t.Logf("$ %s\n%s", line, out)
	}
}
