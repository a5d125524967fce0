package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

// junitSuites is the part of a JUnit XML report (as Ginkgo writes it for
// the e2e framework, junit_01.xml) the summary reads.
type junitSuites struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *struct {
		Type        string `xml:"type,attr"`
		Description string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Type        string `xml:"type,attr"`
		Description string `xml:",chardata"`
	} `xml:"error"`
}

// summary is what a run gave: the specs that ran (passed or failed), the
// ones skipped (by the skip list, with its cause, or while running:
// e2eskipper says the cluster lacks something), and the count of the ones
// the filters left out. Suite nodes (BeforeSuite, ReportAfterSuite...) are
// counted apart.
type summary struct {
	runInfo
	Passed      []string          `json:"passed"`
	Failed      map[string]string `json:"failed"`  // name: the first line of the failure
	Skipped     map[string]string `json:"skipped"` // name: why
	NotSelected int               `json:"notSelected"`
	// SuiteFailures are failed suite-level nodes (a failed BeforeSuite
	// fails the whole run).
	SuiteFailures map[string]string `json:"suiteFailures,omitempty"`
	// Seconds is the specs' time added up (the processes overlap: see
	// runInfo.DurationSeconds for the run's).
	Seconds float64 `json:"seconds"`
	// APIOnly are the specs of Passed, Failed and Skipped whose result the
	// API server alone decides (apiOnlySpecs), counted apart.
	APIOnly []string `json:"apiOnly"`
	// Counts are the node's specs' and the API-only ones' counts (written
	// for readers of summary.json; computed from the lists above).
	Counts *summaryCounts `json:"counts,omitempty"`
}

// runInfo says what ran: the suite (e2e, node), the node agent (splitlet,
// kubelet), the commit of the tree localup ran from (git rev-parse
// --short HEAD, -dirty with uncommitted changes; empty without git), when
// the test binary started and how long it ran, and its filters.
type runInfo struct {
	Suite           string    `json:"suite"`
	Agent           string    `json:"agent"`
	Commit          string    `json:"commit"`
	Started         time.Time `json:"started,omitzero"`
	DurationSeconds float64   `json:"durationSeconds,omitempty"`
	LabelFilter     string    `json:"labelFilter"`
	FocusFile       string    `json:"focusFile,omitempty"`
	Focus           []string  `json:"focus,omitempty"`
	// Skip are the user's --ginkgo.skip patterns (not the agent's skip
	// list, which the summary counts apart).
	Skip []string `json:"skip,omitempty"`
}

// resultCounts are the counts of one kind of spec.
type resultCounts struct {
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
}

// ran is passed + failed.
func (c resultCounts) ran() int { return c.Passed + c.Failed }

// passRate is passed / ran, in percent; 0 when nothing ran.
func (c resultCounts) passRate() float64 {
	if c.ran() == 0 {
		return 0
	}
	return 100 * float64(c.Passed) / float64(c.ran())
}

// summaryCounts split a run's specs into the node's and the API-only ones.
type summaryCounts struct {
	Node    resultCounts `json:"node"`
	APIOnly resultCounts `json:"apiOnly"`
}

// counts classifies the run's specs by name (apiOnly), so that a summary
// written before the classification, or with another one, counts alike.
func (s *summary) counts() summaryCounts {
	var c summaryCounts
	pick := func(name string) *resultCounts {
		if apiOnly(name) {
			return &c.APIOnly
		}
		return &c.Node
	}
	for _, n := range s.Passed {
		pick(n).Passed++
	}
	for n := range s.Failed {
		pick(n).Failed++
	}
	for n := range s.Skipped {
		pick(n).Skipped++
	}
	return c
}

// classify lists the API-only specs among those of the run.
func (s *summary) classify() {
	s.APIOnly = []string{}
	add := func(n string) {
		if apiOnly(n) {
			s.APIOnly = append(s.APIOnly, n)
		}
	}
	for _, n := range s.Passed {
		add(n)
	}
	for n := range s.Failed {
		add(n)
	}
	for n := range s.Skipped {
		add(n)
	}
	sort.Strings(s.APIOnly)
}

// suiteNode tells the suite's own nodes from specs by their names.
func suiteNode(name string) bool {
	for _, p := range []string{"[SynchronizedBeforeSuite]", "[SynchronizedAfterSuite]", "[BeforeSuite]", "[AfterSuite]", "[ReportBeforeSuite]", "[ReportAfterSuite]", "[DeferCleanup (Suite)]"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// junitSkip is a --ginkgo.skip pattern and why it is there.
type junitSkip struct {
	re    *regexp.Regexp
	cause string
}

// conformanceTag tells a spec of the conformance suite by its name.
var conformanceTag = regexp.MustCompile(`\[(Node)?Conformance\]`)

// skipListed starts the reason of a spec skipped by the skip list, before
// the pattern's cause.
const skipListed = "skip list: "

// nameTag is a bracketed tag of a spec's name: the e2e framework writes
// each of a spec's labels ([NodeConformance], [Serial], [sig-node]) there.
var nameTag = regexp.MustCompile(`\[([^\[\]]+)\]`)

// specSelector says whether a run's filters select a spec, by its name.
type specSelector func(name string) bool

// selectorFor is the selection of a run whose label filter is given: a
// spec is selected when its name's tags pass the filter (Ginkgo's own
// evaluation); with no filter, the conformance specs are.
func selectorFor(labelFilter string) (specSelector, error) {
	if strings.TrimSpace(labelFilter) == "" {
		return conformanceTag.MatchString, nil
	}
	f, err := types.ParseLabelFilter(labelFilter)
	if err != nil {
		return nil, fmt.Errorf("label filter %q: %w", labelFilter, err)
	}
	return func(name string) bool {
		var labels []string
		for _, m := range nameTag.FindAllStringSubmatch(name, -1) {
			labels = append(labels, m[1])
		}
		return f(labels)
	}, nil
}

// parseJUnit reads a JUnit report into a summary. Ginkgo reports the specs
// its filters left out as skipped without a reason: those among them that
// the run's selection holds (selected; nil: the conformance specs) and
// that match a pattern of skips count as skipped, with its cause.
func parseJUnit(r io.Reader, skips []junitSkip, selected specSelector) (*summary, error) {
	if selected == nil {
		selected = conformanceTag.MatchString
	}
	var doc junitSuites
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("JUnit report: %w", err)
	}
	s := &summary{Failed: map[string]string{}, Skipped: map[string]string{}, SuiteFailures: map[string]string{}}
	for _, suite := range doc.Suites {
		for _, c := range suite.Cases {
			s.Seconds += c.Time
			failure := ""
			switch {
			case c.Failure != nil:
				failure = c.Failure.Type + ": " + firstLine(c.Failure.Description)
			case c.Error != nil:
				failure = c.Error.Type + ": " + firstLine(c.Error.Description)
			}
			if suiteNode(c.Name) {
				if failure != "" {
					s.SuiteFailures[c.Name] = failure
				}
				continue
			}
			switch {
			case failure != "":
				s.Failed[c.Name] = failure
			case c.Skipped != nil || c.Status == "skipped" || c.Status == "pending":
				msg := ""
				if c.Skipped != nil {
					msg = c.Skipped.Message
				}
				// Ginkgo writes "skipped" for a spec the filters left out,
				// "skipped - <why>" for one that skipped itself.
				if why, ok := strings.CutPrefix(msg, "skipped - "); ok {
					s.Skipped[c.Name] = firstLine(why)
				} else if cause := skipCause(c.Name, skips, selected); cause != "" {
					s.Skipped[c.Name] = skipListed + cause
				} else {
					s.NotSelected++
				}
			default:
				s.Passed = append(s.Passed, c.Name)
			}
		}
	}
	sort.Strings(s.Passed)
	s.classify()
	return s, nil
}

// skipCause is the cause of the first skip pattern that matches the name
// of a spec the run selects, or "".
func skipCause(name string, skips []junitSkip, selected specSelector) string {
	if !selected(name) {
		return ""
	}
	for _, sk := range skips {
		if sk.re.MatchString(name) {
			return sk.cause
		}
	}
	return ""
}

// firstLine is the first non-empty line of s, trimmed, at most 300 bytes.
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 300 {
				l = l[:300] + "..."
			}
			return l
		}
	}
	return ""
}

// headline is the one-line result: the node's specs, then the API-only
// ones apart.
func (s *summary) headline() string {
	c := s.counts()
	return fmt.Sprintf("passed %d, failed %d, skipped %d (%.1f%% of the specs that ran passed); API server only: passed %d, failed %d, skipped %d; %d specs not selected",
		c.Node.Passed, c.Node.Failed, c.Node.Skipped, c.Node.passRate(), c.APIOnly.Passed, c.APIOnly.Failed, c.APIOnly.Skipped, s.NotSelected)
}

// write prints the summary as text: the headline, then every failed and
// skipped spec with its cause, then the passed ones.
func (s *summary) write(w io.Writer) {
	fmt.Fprintln(w, s.headline())
	section := func(title string, m map[string]string) {
		if len(m) == 0 {
			return
		}
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(w, "\n%s (%d):\n", title, len(m))
		for _, n := range names {
			fmt.Fprintf(w, "  %s\n      %s\n", n, m[n])
		}
	}
	section("suite failures", s.SuiteFailures)
	section("failed", s.Failed)
	section("skipped", s.Skipped)
	if len(s.APIOnly) > 0 {
		fmt.Fprintf(w, "\nAPI server only, counted apart (%d):\n", len(s.APIOnly))
		for _, n := range s.APIOnly {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	if len(s.Passed) > 0 {
		fmt.Fprintf(w, "\npassed (%d):\n", len(s.Passed))
		for _, n := range s.Passed {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
}
