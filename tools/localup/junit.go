package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
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
	Passed      []string          `json:"passed"`
	Failed      map[string]string `json:"failed"`  // name: the first line of the failure
	Skipped     map[string]string `json:"skipped"` // name: why
	NotSelected int               `json:"notSelected"`
	// SuiteFailures are failed suite-level nodes (a failed BeforeSuite
	// fails the whole run).
	SuiteFailures map[string]string `json:"suiteFailures,omitempty"`
	Seconds       float64           `json:"seconds"`
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

// parseJUnit reads a JUnit report into a summary. Ginkgo reports the specs
// its filters left out as skipped without a reason: the conformance specs
// among them (by their [NodeConformance] or [Conformance] tag) that match
// a pattern of skips count as skipped, with its cause.
func parseJUnit(r io.Reader, skips []junitSkip) (*summary, error) {
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
				} else if cause := skipCause(c.Name, skips); cause != "" {
					s.Skipped[c.Name] = "skip list: " + cause
				} else {
					s.NotSelected++
				}
			default:
				s.Passed = append(s.Passed, c.Name)
			}
		}
	}
	sort.Strings(s.Passed)
	return s, nil
}

// skipCause is the cause of the first skip pattern that matches a
// conformance spec's name, or "".
func skipCause(name string, skips []junitSkip) string {
	if !conformanceTag.MatchString(name) {
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

// passRate is passed / (passed + failed), in percent; 0 when nothing ran.
func (s *summary) passRate() float64 {
	ran := len(s.Passed) + len(s.Failed)
	if ran == 0 {
		return 0
	}
	return 100 * float64(len(s.Passed)) / float64(ran)
}

// headline is the one-line result.
func (s *summary) headline() string {
	return fmt.Sprintf("passed %d, failed %d, skipped %d (%.1f%% of the specs that ran passed; %d specs not selected)",
		len(s.Passed), len(s.Failed), len(s.Skipped), s.passRate(), s.NotSelected)
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
	if len(s.Passed) > 0 {
		fmt.Fprintf(w, "\npassed (%d):\n", len(s.Passed))
		for _, n := range s.Passed {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
}
