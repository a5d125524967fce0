package discovery

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"testing"
)

func TestSemVer(t *testing.T) {
	for in, want := range map[string]string{
		"v0.1.0-dev":                "0.1.0-dev",
		"1.2.3":                     "1.2.3",
		"v0.2.0-3-gabc1234-dirty":   "0.2.0-3-gabc1234-dirty",
		"722e0bb":                   "0.0.0-build-722e0bb",
		"722e0bb-dirty":             "0.0.0-build-722e0bb-dirty",
		"0123":                      "0.0.0-build-0123",
		"v1.2.3-01":                 "0.0.0-build-v1-2-3-01",
		"":                          "0.0.0",
		"v1.2.3+meta.1":             "1.2.3+meta.1",
		"weird/version with spaces": "0.0.0-build-weird-version-with-spaces",
	} {
		got := SemVer(in)
		if got != want {
			t.Errorf("SemVer(%q) = %q, want %q", in, got, want)
		}
		if !semVer.MatchString(got) {
			t.Errorf("SemVer(%q) = %q is not SemVer", in, got)
		}
	}
}

// TestDocExample decodes docs/bus.md's StageStatus example strictly: the
// page and the type say the same.
func TestDocExample(t *testing.T) {
	data, err := os.ReadFile("../../docs/bus.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```json StageStatus\n(.*?)```").FindSubmatch(data)
	if m == nil {
		t.Fatal("docs/bus.md has no StageStatus example")
	}
	dec := json.NewDecoder(bytes.NewReader(m[1]))
	dec.DisallowUnknownFields()
	var st StageStatus
	if err := dec.Decode(&st); err != nil {
		t.Fatalf("docs/bus.md's StageStatus example: %v", err)
	}
	if st.Stage != "podworkers" || len(st.Partitions) == 0 || len(st.Consumers) == 0 || st.Started.IsZero() {
		t.Errorf("example decoded to %+v", st)
	}
}
