package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/testenv"
)

// quickStartLines returns the kubectl lines of README.md's compose quick
// start, continuation lines joined, in order.
func quickStartLines(t *testing.T) []string {
	t.Helper()
	lines := readmeKubectlLines(t, "## Quick start")
	if len(lines) < 4 {
		t.Fatalf("README.md's Quick start has %d kubectl lines, want the get/run/logs/delete walk: %q", len(lines), lines)
	}
	return lines
}

// readmeKubectlLines returns the kubectl lines of the first sh block after
// the heading (a line starting with it) in README.md, continuation lines joined, in order.
func readmeKubectlLines(t *testing.T, heading string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(composeDir(t), "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n"+heading)
	if !ok {
		t.Fatalf("README.md has no %q section", heading)
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		t.Fatalf("README.md's %q has no sh block", heading)
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
	return lines
}

// runReadmeLine runs one README line through bash with the stack's
// kubeconfig until its output matches want (within the time given); once: it must
// pass at the first run (a line that creates).
func runReadmeLine(t *testing.T, s *stack, line string, want *regexp.Regexp, once bool, within time.Duration) string {
	t.Helper()
	var out string
	testenv.Eventually(t, within, line, func() (bool, string) {
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
	return out
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
		case strings.HasPrefix(line, "kubectl top node"):
			// NAME CPU(cores) CPU(%) MEMORY(bytes) MEMORY(%)
			want = regexp.MustCompile(`(?m)^` + nodeName + `\s+\d+m\s+\d+%\s+\d+Mi\s+\d+%`)
		case strings.HasPrefix(line, "kubectl top pod demo"):
			// NAME CPU(cores) MEMORY(bytes)
			want = regexp.MustCompile(`(?m)^demo\s+\d+m\s+\d+Mi`)
		case strings.HasPrefix(line, "kubectl delete pod demo"):
			want = regexp.MustCompile(`pod "demo" deleted`)
		default:
			t.Fatalf("README quick-start line %q is not walked by this test: add it", line)
		}
		runReadmeLine(t, s, line, want, once, 90*time.Second)
		if strings.HasPrefix(line, "kubectl top pod demo") {
			s.checkResourceMetrics(t, "demo")
		}
	}
}

// checkResourceMetrics: metrics.k8s.io/v1beta1, which kubectl top reads,
// answers through kube-apiserver's aggregation layer with the node's CPU
// and memory and with the pod's container's, as metrics-server scraped
// them from nodehb.
func (s *stack) checkResourceMetrics(t *testing.T, pod string) {
	t.Helper()
	ctx := t.Context()
	get := func(path string, out any) error {
		data, err := s.cs.Discovery().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1" + path).DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w: %s", path, err, data)
		}
		return json.Unmarshal(data, out)
	}
	var node struct {
		Usage corev1.ResourceList `json:"usage"`
	}
	if err := get("/nodes/"+nodeName, &node); err != nil {
		t.Fatalf("NodeMetrics: %v", err)
	}
	if node.Usage.Cpu().IsZero() || node.Usage.Memory().IsZero() {
		t.Errorf("NodeMetrics of %s: usage %v, want CPU and memory above 0", nodeName, node.Usage)
	}
	var pm struct {
		Containers []struct {
			Name  string              `json:"name"`
			Usage corev1.ResourceList `json:"usage"`
		} `json:"containers"`
	}
	if err := get("/namespaces/"+namespace+"/pods/"+pod, &pm); err != nil {
		t.Fatalf("PodMetrics: %v", err)
	}
	if len(pm.Containers) != 1 || pm.Containers[0].Usage.Memory().IsZero() {
		t.Errorf("PodMetrics of %s: %+v, want its one container with memory above 0", pod, pm.Containers)
	}
	t.Logf("metrics.k8s.io: node %s %v; pod %s %+v", nodeName, node.Usage, pod, pm.Containers)
}
