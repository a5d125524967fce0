package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fixtureRuns loads report directories of testdata/conformance-table.
func fixtureRuns(t *testing.T, dirs ...string) []tableRun {
	t.Helper()
	var runs []tableRun
	for _, d := range dirs {
		r, err := loadTableRun(filepath.Join("testdata", "conformance-table", d))
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	return runs
}

// An older summary.json (no suite, agent, commit or duration) is told by
// its summary.txt and e2e.log; a new one says it all itself.
func TestLoadTableRun(t *testing.T) {
	runs := fixtureRuns(t, "node-out", "out", "out-kubelet-focus")
	old := runs[0]
	if old.s.Suite != suiteNodeE2E || old.s.Agent != agentSplitlet || old.s.Commit != "" || old.duration != 1320500*time.Millisecond || old.selection != "whole suite" {
		t.Errorf("old summary: %+v, duration %s, selection %q", old.s.runInfo, old.duration, old.selection)
	}
	if r := runs[1]; r.s.Suite != suiteE2E || r.s.Agent != agentSplitlet || r.s.Commit != "abc1234-dirty" || r.duration != 46*time.Minute || r.selection != "whole suite" {
		t.Errorf("new summary: %+v, duration %s, selection %q", r.s.runInfo, r.duration, r.selection)
	}
	if r := runs[2]; r.selection != "focus should be consumable via the environment" {
		t.Errorf("focused run's selection %q", r.selection)
	}
	if _, err := loadTableRun(t.TempDir()); err == nil {
		t.Error("a directory without summary.json loaded")
	}
}

// A node-suite summary that lists a skip-listed e2e [Conformance] spec as
// skipped (its label filter never selected it) loads with that spec as
// not selected; a skip-listed [NodeConformance] spec stays skipped.
func TestLoadTableRunUnselectsSkipListed(t *testing.T) {
	dir := t.TempDir()
	summary := `{"suite": "node", "agent": "kubelet", "commit": "abc1234", "labelFilter": "NodeConformance && !Serial && !Disruptive",
  "passed": ["[It] [sig-node] Pods should run [NodeConformance]"], "failed": {}, "notSelected": 10,
  "skipped": {"[It] [sig-node] ImageVolume should succeed with pod and pull policy of Always [LinuxOnly] [Conformance]": "skip list: no image volumes",
    "[It] [sig-node] Pods should pull from the list [NodeConformance]": "skip list: no registry",
    "[It] [sig-node] Mount recursive read-only [NodeConformance] should accept": "runtime does not support recursive read-only mounts"}}`
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), []byte(summary), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := loadTableRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.s.Skipped) != 2 || r.s.Skipped["[It] [sig-node] Pods should pull from the list [NodeConformance]"] == "" {
		t.Errorf("skipped = %v", r.s.Skipped)
	}
	if r.s.NotSelected != 11 {
		t.Errorf("not selected = %d, want 11", r.s.NotSelected)
	}
	if c := r.s.counts(); c.Node.Skipped != 2 {
		t.Errorf("counts %+v", c)
	}
}

// The table pairs each suite's Splitlet and kubelet runs: a row per run
// (a suite without a kubelet run says so), the node's specs apart from
// the API-only ones, then the differences (Splitlet's failures first), the
// failures of both, and the skip list's specs with the kubelet's result,
// taken from a focused kubelet run when the whole run skipped them.
func TestRenderTable(t *testing.T) {
	got := renderTable(fixtureRuns(t, "out-kubelet", "node-out", "out", "out-kubelet-focus"))
	for _, want := range []string{
		"| e2e (`make conformance`) | Splitlet | `abc1234-dirty` | whole suite | 4 | 2 | 2 | 3 | 50.0 % | 1 / 0 / 0 | 46 min |\n",
		"| e2e (`make conformance`) | kubelet v1.36.3 | `abc1234-dirty` | whole suite | 4 | 2 | 2 | 2 | 50.0 % | 1 / 0 / 0 | 1 h 02 min |\n",
		"| e2e (`make conformance`) | kubelet v1.36.3 | `def5678` | `focus should be consumable via the environment` | 1 | 0 | 1 | 0 | 0.0 % | 0 / 0 / 0 | 2 min |\n",
		"| node (`make node-conformance`) | Splitlet | `unknown` | whole suite | 2 | 1 | 1 | 1 | 50.0 % | 0 / 0 / 0 | 22 min |\n",
		"| node (`make node-conformance`) | kubelet v1.36.3 | no run given |",
		"Splitlet failed, the kubelet passed (1):\n\n- `[sig-storage] Subpath Atomic writer volumes should support subpaths with projected pod [Conformance]`: `failed: [FAILED] expected pod \"pod-subpath-test-projected-m5xk\" success`\n" +
			"\nThe kubelet failed, Splitlet passed (1):\n\n- `[sig-node] PreStop should call prestop when killing a pod [Conformance]`: `failed: [FAILED] validating pre-stop | timed out`\n" +
			"\nFailed on both (1):\n\n- `[sig-node] PrivilegedPod [NodeConformance] should enable privileged commands [LinuxOnly]`: `failed: [FAILED] RTNETLINK answers: Operation not supported`\n",
		"Skipped by the skip list (2), with each agent's result:\n\n" +
			"- `[sig-node] ImageVolume should succeed with pod and pull policy of Always [LinuxOnly] [MinimumKubeletVersion:1.35] [Conformance]`: Splitlet skipped by the list; the kubelet skipped by the list\n" +
			"- `[sig-node] Secrets should be consumable via the environment [NodeConformance] [Conformance]`: Splitlet skipped by the list; the kubelet failed: `failed: [FAILED] expected \"data-1=value-1\" in container output`\n",
		"**node (`make node-conformance`): Splitlet against the kubelet**\n\nNo run of kubelet v1.36.3 given: no comparison.\n" +
			"\nSkipped by the skip list (1), with each agent's result:\n\n- `[sig-node] Hostname of Pod [NodeConformance] a pod with subdomain should be resolved`: Splitlet skipped by the list; the kubelet not in its runs\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing\n%s\nin\n%s", want, got)
		}
	}
	// e2e's rows come before node's, Splitlet's before the kubelet's.
	e2eS, e2eK, nodeS := strings.Index(got, "| e2e (`make conformance`) | Splitlet"), strings.Index(got, "| e2e (`make conformance`) | kubelet"), strings.Index(got, "| node (`make node-conformance`) | Splitlet")
	if e2eS >= e2eK || e2eK >= nodeS {
		t.Errorf("rows out of order:\n%s", got)
	}
	if strings.Contains(got, "pods should support pod readiness gates") {
		t.Error("a spec skipped by itself listed with the skip list's")
	}
	if again := renderTable(fixtureRuns(t, "out", "node-out", "out-kubelet-focus", "out-kubelet")); again != got {
		t.Errorf("the order of the directories changes the table:\n%s\n---\n%s", got, again)
	}
}

// The block between the markers is replaced, the rest of the file kept;
// a second run with the same reports leaves the file as the first made it.
func TestConformanceTableRewritesDocIdempotently(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "conformance.md")
	before := "# Title\n\nProse before, naming `" + tableBegin + "`.\n\n" + tableBegin + "\nthe hand-written table\n| a | b |\n" + tableEnd + "\n\nProse after, " + tableEnd + " again.\n"
	if err := os.WriteFile(doc, []byte(before), 0o640); err != nil {
		t.Fatal(err)
	}
	dirs := []string{filepath.Join("testdata", "conformance-table", "out"), filepath.Join("testdata", "conformance-table", "out-kubelet")}
	var out bytes.Buffer
	if code := tableMain(doc, dirs, &out); code != 0 {
		t.Fatalf("exit %d", code)
	}
	first, _ := os.ReadFile(doc)
	if code := tableMain(doc, dirs, &out); code != 0 {
		t.Fatalf("exit %d", code)
	}
	second, _ := os.ReadFile(doc)
	if !bytes.Equal(first, second) {
		t.Errorf("second rewrite differs:\n%s\n---\n%s", first, second)
	}
	s := string(first)
	if !strings.HasPrefix(s, "# Title\n\nProse before, naming `"+tableBegin+"`.\n\n"+tableBegin+"\n<!-- Generated by") ||
		!strings.HasSuffix(s, "\n"+tableEnd+"\n\nProse after, "+tableEnd+" again.\n") {
		t.Errorf("the text around the block changed:\n%s", s)
	}
	if strings.Contains(s, "hand-written") || !strings.Contains(s, "| e2e (`make conformance`) | Splitlet | `abc1234-dirty`") {
		t.Errorf("the block was not replaced:\n%s", s)
	}
	if got, err := replaceBlock(tableBegin+"\nold\n"+tableEnd, "new\n"); err != nil || got != tableBegin+"\nnew\n"+tableEnd {
		t.Errorf("an end marker without a newline: %q, %v", got, err)
	}
	if fi, _ := os.Stat(doc); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
	for _, bad := range []string{"no markers\n", tableBegin + "\nno end\n", tableEnd + "\n" + tableBegin + "\n", "inline " + tableBegin + "\n" + tableEnd + "\n", tableBegin} {
		if _, err := replaceBlock(bad, "x\n"); err == nil {
			t.Errorf("replaceBlock(%q) took a file without the block", bad)
		}
	}
}

func TestCodeSpanAndDuration(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                  "`plain`",
		"with `immutable` field": "``with `immutable` field``",
		"`edge":                  "`` `edge ``",
	} {
		if got := codeSpan(in); got != want {
			t.Errorf("codeSpan(%q) = %s, want %s", in, got, want)
		}
	}
	for d, want := range map[time.Duration]string{0: "unknown", 42 * time.Second: "42 s", 46*time.Minute + 20*time.Second: "46 min", 62 * time.Minute: "1 h 02 min"} {
		if got := durationText(d); got != want {
			t.Errorf("durationText(%s) = %s, want %s", d, got, want)
		}
	}
}

// The run's filters come from the test binary's command line, the last
// label filter and focus file winning, every focus and skip kept.
func TestGinkgoFilters(t *testing.T) {
	lf, ff, focus, skip := ginkgoFilters([]string{"--ginkgo.focus-file=a/", "--ginkgo.label-filter=X", "--ginkgo.skip=S", "--ginkgo.focus=One", "-ginkgo.label-filter", "Y", "--ginkgo.focus", "Two", "--ginkgo.v", "--ginkgo.skip", "T"})
	if lf != "Y" || ff != "a/" || strings.Join(focus, ",") != "One,Two" || strings.Join(skip, ",") != "S,T" {
		t.Errorf("label filter %q, focus file %q, focus %q, skip %q", lf, ff, focus, skip)
	}
}

// A run records the user's skips, not its agent's skip list, and the
// table's selection names them.
func TestRunInfoRecordsUserSkips(t *testing.T) {
	r := suiteRun{suite: "e2e", agent: agentKubelet, skips: skipsFor(conformanceSkips, agentKubelet)}
	args := e2eArgs("kc", "rd", "unix:///c.sock", agentKubelet, time.Hour, []string{"--ginkgo.skip=registry specs"})
	info := runInfoOf(t.Context(), r, args)
	if strings.Join(info.Skip, ",") != "registry specs" {
		t.Fatalf("skips recorded: %q, want the user's alone", info.Skip)
	}
	if got := selectionOf(info); got != "skip registry specs" {
		t.Errorf("selection %q", got)
	}
	if got := selectionOf(runInfo{LabelFilter: conformanceLabels, FocusFile: conformanceFiles}); got != "whole suite" {
		t.Errorf("selection without the user's filters %q", got)
	}
}

// The commit is the tree's short hash, -dirty with a tracked file
// changed (an untracked one does not count), empty outside a git tree.
func TestGitCommit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		if testing.Short() {
			t.Skip("no git")
		}
		t.Fatal("no git")
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := gitCommit(t.Context(), dir); got != "" {
		t.Errorf("outside a tree: %q", got)
	}
	git("init", "-q")
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "f")
	git("commit", "-q", "-m", "c")
	hash := git("rev-parse", "--short", "HEAD")
	if err := os.WriteFile(filepath.Join(dir, "untracked"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := gitCommit(t.Context(), dir); got != hash {
		t.Errorf("clean tree: %q, want %q", got, hash)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := gitCommit(t.Context(), dir); got != hash+"-dirty" {
		t.Errorf("dirty tree: %q, want %q", got, hash+"-dirty")
	}
}

// A spec the skip list left out of a whole run and a later focused run
// ran is off the list; one still skipped for an agent stays, with each
// agent's result.
func TestSkipListAfterFocusedRun(t *testing.T) {
	const udp, iv = "[It] [sig-network] node-pod communication: udp", "[It] [sig-node] ImageVolume should succeed"
	whole := &summary{Passed: []string{iv}, Skipped: map[string]string{udp: "skip list: nc"}}
	wholeK := &summary{Skipped: map[string]string{udp: "skip list: nc", iv: "skip list: containerd"}}
	focus := &summary{Passed: []string{udp}}
	focusK := &summary{Passed: []string{udp}}
	var b strings.Builder
	writeSkipList(&b, []tableRun{{s: whole}, {s: focus}}, []tableRun{{s: wholeK}, {s: focusK}})
	want := "\nSkipped by the skip list (1), with each agent's result:\n\n- `[sig-node] ImageVolume should succeed`: Splitlet passed; the kubelet skipped by the list\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
