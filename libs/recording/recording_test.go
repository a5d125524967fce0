package recording

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestKeepAppliesWildcards: Keep picks subjects with NATS's wildcards (*
// one token, > the rest).
func TestKeepAppliesWildcards(t *testing.T) {
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{"splitlet.v1.n.probes.*", "splitlet.v1.n.probes.3", true},
		{"splitlet.v1.n.probes.*", "splitlet.v1.n.probes.3.x", false},
		{"splitlet.v1.n.probes.*", "splitlet.v1.n.probes", false},
		{"splitlet.v1.n.state.>", "splitlet.v1.n.state.agent", true},
		{"splitlet.v1.n.state.sources", "splitlet.v1.n.state.agent", false},
		{"splitlet.v1.n.state.sources", "splitlet.v1.n.state.sources", true},
	} {
		kept := Keep([]Entry{{Stream: "s", Subject: c.subject, Data: []byte("{}")}}, Filter{Subjects: map[string][]string{"s": {c.pattern}}})
		if got := len(kept) == 1; got != c.want {
			t.Errorf("Keep %q with %q = %v", c.subject, c.pattern, got)
		}
	}
}

func probeEntry(seq int, container, result string) Entry {
	data, _ := json.Marshal(map[string]any{"schemaVersion": 1, "kind": "ProbeResult", "node": "n", "source": "p", "seq": seq,
		"sentAt":  time.Now().Add(time.Duration(seq) * time.Second),
		"payload": map[string]any{"podUID": "u", "namespace": "d", "name": "p", "container": container, "probe": "Readiness", "result": result}})
	return Entry{Stream: "probes", Subject: "splitlet.v1.n.probes.0", Data: data}
}

func TestDiffFoldsRepeatsAndIgnoresTiming(t *testing.T) {
	a := []Entry{probeEntry(1, "x", "Failure"), probeEntry(2, "y", "Success"), probeEntry(3, "x", "Success"), probeEntry(4, "x", "Success")}
	// the same behaviour, other timing and interleaving
	b := []Entry{probeEntry(10, "y", "Success"), probeEntry(11, "x", "Failure"), probeEntry(12, "x", "Failure"), probeEntry(13, "x", "Success")}
	if r := Diff(a, b, nil); len(r.Diffs) != 0 || r.Keys != 2 {
		t.Errorf("same behaviour: %+v", r)
	}
	c := []Entry{probeEntry(1, "x", "Failure"), probeEntry(2, "y", "Failure")}
	r := Diff(a, c, nil)
	if len(r.Diffs) != 2 {
		t.Fatalf("want x (one item short) and y (another result) to differ: %+v", r)
	}
	var out bytes.Buffer
	r.Print(&out)
	if !strings.Contains(out.String(), "2 of 2 pods/probes differ") || !strings.Contains(out.String(), "container=y probe=Readiness") {
		t.Errorf("report:\n%s", out.String())
	}
}

func TestReadRejectsBadLines(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, []Entry{probeEntry(1, "x", "Success"), {Stream: "probes", Subject: "s", Binary: []byte{0xff, 0}}}); err != nil {
		t.Fatal(err)
	}
	entries, err := Read(&buf)
	if err != nil || len(entries) != 2 || entries[1].Binary == nil || entries[0].Data == nil {
		t.Fatalf("round trip: %v %+v", err, entries)
	}
	for _, bad := range []string{"{", `{"subject":""}`, `{"subject":"s"}`} {
		if _, err := Read(strings.NewReader(bad + "\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("Read(%q) = %v, want an error naming line 1", bad, err)
		}
	}
}

// FuzzRead: a recording is outside input (a file anyone may edit): Read
// and Diff never panic on it.
func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	_ = Write(&buf, []Entry{probeEntry(1, "x", "Success")})
	f.Add(buf.Bytes())
	f.Add([]byte(`{"subject":"a","data":{"kind":"PodUpdate","payload":{"pods":[{"metadata":{"uid":"u"}}]}}}` + "\n"))
	f.Add([]byte(`{"subject":"a","data":{"kind":"X","payload":{"pods":3}}}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := Read(bytes.NewReader(data))
		if err != nil {
			return
		}
		_ = Diff(entries, entries, nil)
	})
}
