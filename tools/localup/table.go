package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The block of docs/conformance.md that localup --conformance-table
// rewrites from the runs' reports.
const (
	tableBegin = "<!-- conformance-table:begin -->"
	tableEnd   = "<!-- conformance-table:end -->"
)

// tableRun is one report directory's summary, with what an older summary
// (written before it recorded the suite, the agent, the commit and the
// duration) lets be told from the directory's other files.
type tableRun struct {
	dir       string
	s         *summary
	selection string        // "whole suite", or the focus or filter of the run
	duration  time.Duration // 0: unknown
}

// tableMain is localup --conformance-table: it reads the report
// directories and rewrites the block of out between the markers (out "-":
// prints the block). It returns the exit status.
func tableMain(out string, dirs []string, stdout io.Writer) int {
	if len(dirs) == 0 {
		fmt.Fprintln(os.Stderr, "localup --conformance-table: give the report directories (conformance/out conformance/out-kubelet ...)")
		return 2
	}
	runs := make([]tableRun, 0, len(dirs))
	for _, d := range dirs {
		r, err := loadTableRun(d)
		if err != nil {
			fmt.Fprintf(os.Stderr, "localup --conformance-table: %v\n", err)
			return 1
		}
		runs = append(runs, r)
	}
	block := renderTable(runs)
	if out == "-" {
		fmt.Fprint(stdout, block)
		return 0
	}
	if err := rewriteDoc(out, block); err != nil {
		fmt.Fprintf(os.Stderr, "localup --conformance-table: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: the conformance table of %d runs\n", out, len(runs))
	return 0
}

// loadTableRun reads dir/summary.json and fills in what it lacks.
func loadTableRun(dir string) (tableRun, error) {
	data, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		return tableRun{}, err
	}
	var s summary
	if err := json.Unmarshal(data, &s); err != nil {
		return tableRun{}, fmt.Errorf("%s: %w", filepath.Join(dir, "summary.json"), err)
	}
	txt, _ := os.ReadFile(filepath.Join(dir, "summary.txt"))
	if s.Suite == "" {
		s.Suite = guessSuite(dir, txt)
	}
	if s.Agent == "" {
		s.Agent = guessAgent(dir, txt)
	}
	if len(s.Focus) == 0 && s.Started.IsZero() {
		s.Focus = focusOfCommand(txt)
	}
	unselectSkipListed(&s)
	r := tableRun{dir: dir, s: &s, duration: time.Duration(s.DurationSeconds * float64(time.Second))}
	if r.duration == 0 {
		r.duration = ginkgoRunTime(filepath.Join(dir, "e2e.log"))
	}
	r.selection = selectionOf(s.runInfo)
	return r, nil
}

// unselectSkipListed counts a spec a summary lists as skipped by the skip
// list, but which the run's label filter does not select, as not selected:
// a summary written before the reading took the filter into account lists
// an e2e [Conformance] spec of the skip list in a run of the node suite.
func unselectSkipListed(s *summary) {
	selected, err := selectorFor(s.LabelFilter)
	if err != nil {
		return
	}
	for name, why := range s.Skipped {
		if strings.HasPrefix(why, skipListed) && !selected(name) {
			delete(s.Skipped, name)
			s.NotSelected++
		}
	}
	s.classify()
}

// guessSuite tells an older run's suite by the title summary.txt starts
// with, or by the directory's name (conformance/node-out...).
func guessSuite(dir string, txt []byte) string {
	switch {
	case bytes.HasPrefix(txt, []byte(suiteOf(suiteNodeE2E).title+",")):
		return suiteNodeE2E
	case bytes.HasPrefix(txt, []byte(suiteOf(suiteE2E).title+",")):
		return suiteE2E
	case strings.Contains(filepath.Base(filepath.Clean(dir)), "node"):
		return suiteNodeE2E
	}
	return suiteE2E
}

// guessAgent tells an older run's node agent by its command line (the CRI
// endpoint lies in the kubelet's state directory, <suite>-kubelet/) or by
// the directory's name.
func guessAgent(dir string, txt []byte) string {
	if bytes.Contains(txt, []byte("conformance-kubelet/")) || strings.Contains(filepath.Base(filepath.Clean(dir)), "kubelet") {
		return agentKubelet
	}
	return agentSplitlet
}

// commandFocus finds --ginkgo.focus in a command line as shellJoin wrote it.
var commandFocus = regexp.MustCompile(`'--ginkgo\.focus=((?:[^']|'\\'')*)'|--ginkgo\.focus=(\S+)`)

// focusOfCommand is the focus of summary.txt's command line.
func focusOfCommand(txt []byte) []string {
	var out []string
	for _, m := range commandFocus.FindAllSubmatch(txt, -1) {
		f := string(m[1]) + string(m[2])
		out = append(out, strings.ReplaceAll(f, `'\''`, "'"))
	}
	return out
}

// ginkgoRan is Ginkgo's last line of a run: how long the specs took.
var ginkgoRan = regexp.MustCompile(`^Ran \d+ of \d+ Specs in ([0-9.]+) seconds`)

// ginkgoRunTime is the run's time as Ginkgo printed it in e2e.log; 0 when
// it is not there.
func ginkgoRunTime(path string) time.Duration {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var d time.Duration
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		if m := ginkgoRan.FindSubmatch(sc.Bytes()); m != nil {
			if secs, err := strconv.ParseFloat(string(m[1]), 64); err == nil {
				d = time.Duration(secs * float64(time.Second))
			}
		}
	}
	return d
}

// selectionOf says which specs a run selected: the whole suite, or the
// focus, focus file, label filter or skips of the user's.
func selectionOf(info runInfo) string {
	var parts []string
	if len(info.Focus) > 0 {
		parts = append(parts, "focus "+strings.Join(info.Focus, " or "))
	}
	if info.FocusFile != "" && info.FocusFile != conformanceFiles {
		parts = append(parts, "focus file "+info.FocusFile)
	}
	if info.LabelFilter != "" && info.LabelFilter != conformanceLabels && info.LabelFilter != nodeConformanceLabels {
		parts = append(parts, "label filter "+info.LabelFilter)
	}
	if len(info.Skip) > 0 {
		parts = append(parts, "skip "+strings.Join(info.Skip, " or "))
	}
	if len(parts) == 0 {
		return "whole suite"
	}
	return strings.Join(parts, ", ")
}

// specResult is one spec's result for one node agent.
type specResult struct {
	state string // passed, failed, skipped
	why   string // the failure's first line, or why it was skipped
}

// agentResults merges the results of one agent's runs of a suite: a spec
// that ran in some run counts as it ran in the latest of them; one only
// skipped counts as skipped.
func agentResults(runs []tableRun) map[string]specResult {
	out := map[string]specResult{}
	for _, r := range runs {
		for _, n := range r.s.Passed {
			out[n] = specResult{state: "passed"}
		}
		for n, why := range r.s.Failed {
			out[n] = specResult{state: "failed", why: why}
		}
		for n, why := range r.s.Skipped {
			if _, ok := out[n]; !ok {
				out[n] = specResult{state: "skipped", why: why}
			}
		}
	}
	return out
}

// renderTable is the block: a row per run, grouped by suite (Splitlet's
// runs, then the kubelet's), then per suite the specs whose results differ
// between the agents and the skip list's specs with the kubelet's result.
func renderTable(runs []tableRun) string {
	bySuite := map[string][]tableRun{}
	for _, r := range runs {
		bySuite[r.s.Suite] = append(bySuite[r.s.Suite], r)
	}
	suites := make([]string, 0, len(bySuite))
	for s := range bySuite {
		suites = append(suites, s)
	}
	sort.Strings(suites)
	var b strings.Builder
	fmt.Fprintln(&b, "<!-- Generated by `make conformance-table` (bin/localup --conformance-table) from the runs' summary.json: edit the runs, not this block. -->")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| suite | node agent | commit | selection | ran | passed | failed | skipped | passed % | API server only: passed / failed / skipped | time |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, suite := range suites {
		for _, agent := range []string{agentSplitlet, agentKubelet} {
			ar := runsOf(bySuite[suite], agent)
			if len(ar) == 0 {
				fmt.Fprintf(&b, "| %s | %s | no run given | | | | | | | | |\n", suiteLabel(suite), agentLabel(agent))
			}
			for _, r := range ar {
				writeRow(&b, r)
			}
		}
	}
	for _, suite := range suites {
		writeComparison(&b, suite, runsOf(bySuite[suite], agentSplitlet), runsOf(bySuite[suite], agentKubelet))
	}
	return b.String()
}

// runsOf are the runs of one agent, oldest first.
func runsOf(runs []tableRun, agent string) []tableRun {
	var out []tableRun
	for _, r := range runs {
		if r.s.Agent == agent {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].s.Started.Equal(out[j].s.Started) {
			return out[i].s.Started.Before(out[j].s.Started)
		}
		return out[i].dir < out[j].dir
	})
	return out
}

// writeRow writes a run's row.
func writeRow(w io.Writer, r tableRun) {
	c := r.s.counts()
	fmt.Fprintf(w, "| %s | %s | `%s` | %s | %d | %d | %d | %d | %.1f %% | %d / %d / %d | %s |\n",
		suiteLabel(r.s.Suite), agentLabel(r.s.Agent), orUnknown(r.s.Commit), selectionText(r.selection),
		c.Node.ran(), c.Node.Passed, c.Node.Failed, c.Node.Skipped, c.Node.passRate(),
		c.APIOnly.Passed, c.APIOnly.Failed, c.APIOnly.Skipped, durationText(r.duration))
}

// writeComparison writes a suite's differences between the agents.
func writeComparison(w io.Writer, suite string, splitlet, kubelet []tableRun) {
	fmt.Fprintf(w, "\n**%s: Splitlet against the kubelet**\n", suiteLabel(suite))
	if len(splitlet) == 0 || len(kubelet) == 0 {
		missing := agentLabel(agentKubelet)
		if len(splitlet) == 0 {
			missing = agentLabel(agentSplitlet)
		}
		fmt.Fprintf(w, "\nNo run of %s given: no comparison.\n", missing)
	} else {
		sr, kr := agentResults(splitlet), agentResults(kubelet)
		writeSpecs(w, "Splitlet failed, the kubelet passed", differ(sr, kr, "failed", "passed"), sr)
		writeSpecs(w, "The kubelet failed, Splitlet passed", differ(kr, sr, "failed", "passed"), kr)
		writeSpecs(w, "Failed on both", differ(sr, kr, "failed", "failed"), sr)
	}
	writeSkipList(w, splitlet, kubelet)
}

// differ are the specs in state a in x and b in y, sorted.
func differ(x, y map[string]specResult, a, b string) []string {
	var out []string
	for n, r := range x {
		if r.state == a && y[n].state == b {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// writeSpecs lists specs with the first line of their failure in res.
func writeSpecs(w io.Writer, title string, names []string, res map[string]specResult) {
	fmt.Fprintf(w, "\n%s (%d)%s\n", title, len(names), map[bool]string{true: ".", false: ":"}[len(names) == 0])
	if len(names) > 0 {
		fmt.Fprintln(w)
	}
	for _, n := range names {
		line := "- " + specText(n)
		if why := res[n].why; why != "" {
			line += ": " + codeSpan(why)
		}
		fmt.Fprintln(w, line)
	}
}

// writeSkipList lists the specs the skip list left out, with each agent's
// result: those still skipped by it in an agent's latest result (a later
// run that ran a spec takes it off the list).
func writeSkipList(w io.Writer, splitlet, kubelet []tableRun) {
	sr, kr := agentResults(splitlet), agentResults(kubelet)
	listed := map[string]bool{}
	for _, res := range []map[string]specResult{sr, kr} {
		for n, r := range res {
			if r.skipListed() {
				listed[n] = true
			}
		}
	}
	names := make([]string, 0, len(listed))
	for n := range listed {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "\nSkipped by the skip list (%d), with each agent's result%s\n", len(names), map[bool]string{true: ".", false: ":"}[len(names) == 0])
	if len(names) > 0 {
		fmt.Fprintln(w)
	}
	for _, n := range names {
		fmt.Fprintf(w, "- %s: Splitlet %s; the kubelet %s\n", specText(n), resultText(sr, n), resultText(kr, n))
	}
}

func (r specResult) skipListed() bool {
	return r.state == "skipped" && strings.HasPrefix(r.why, skipListed)
}

// resultText is an agent's result for a spec in the skip list's lines.
func resultText(res map[string]specResult, name string) string {
	r, ok := res[name]
	switch {
	case !ok:
		return "not in its runs"
	case r.skipListed():
		return "skipped by the list"
	case r.state == "failed":
		return "failed: " + codeSpan(r.why)
	default:
		return r.state
	}
}

// suiteLabel names a suite in the table.
func suiteLabel(suite string) string {
	if suite == suiteNodeE2E {
		return "node (`make node-conformance`)"
	}
	if suite == suiteE2E {
		return "e2e (`make conformance`)"
	}
	return cellText(suite)
}

// agentLabel names a node agent in the table.
func agentLabel(agent string) string {
	if agent == agentKubelet {
		return "kubelet v1.36.3"
	}
	return "Splitlet"
}

// specText is a spec's name in the list, without Ginkgo's "[It] ",
// marked when the API server alone decides it.
func specText(name string) string {
	// (Ginkgo's JUnit report starts a spec's name with its node type)
	t := codeSpan(strings.TrimPrefix(name, "[It] "))
	if apiOnly(name) {
		t += " (API server only)"
	}
	return t
}

// codeSpan puts s in a Markdown code span whose fence no backtick of s
// closes.
func codeSpan(s string) string {
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return fence + s + fence
}

// cellText is s made safe in a table cell.
func cellText(s string) string {
	return codeSpan(strings.ReplaceAll(s, "|", `\|`))
}

// selectionText is a run's selection in its cell.
func selectionText(sel string) string {
	if sel == "whole suite" {
		return sel
	}
	return cellText(sel)
}

// durationText is a run's time: "46 min", "1 h 05 min", "unknown".
func durationText(d time.Duration) string {
	switch {
	case d <= 0:
		return "unknown"
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Round(time.Minute).Minutes()))
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%d h %02d min", int(d.Hours()), int(d.Minutes())%60)
}

// replaceBlock puts block between the markers of doc, each a line of its
// own (a marker quoted in the text is no marker), in place of what was
// there; the rest of doc is kept as it is.
func replaceBlock(doc, block string) (string, error) {
	begin := markerLine(doc, tableBegin, 0)
	if begin < 0 {
		return "", errors.New("no " + tableBegin + " line")
	}
	start := strings.IndexByte(doc[begin:], '\n') + begin + 1
	end := -1
	if start > begin {
		end = markerLine(doc, tableEnd, start)
	}
	if end < 0 {
		return "", errors.New("no " + tableEnd + " line after " + tableBegin)
	}
	if !strings.HasSuffix(block, "\n") {
		block += "\n"
	}
	return doc[:start] + block + doc[end:], nil
}

// markerLine is the offset of the first line of doc at or after from that
// is marker alone, or -1.
func markerLine(doc, marker string, from int) int {
	for i := from; i < len(doc); {
		j := strings.IndexByte(doc[i:], '\n')
		line := doc[i:]
		if j >= 0 {
			line = doc[i : i+j]
		}
		if strings.TrimRight(line, " \t\r") == marker {
			return i
		}
		if j < 0 {
			break
		}
		i += j + 1
	}
	return -1
}

// rewriteDoc replaces the block of the file at path.
func rewriteDoc(path, block string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc, err := replaceBlock(string(data), block)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(doc), fi.Mode().Perm())
}
