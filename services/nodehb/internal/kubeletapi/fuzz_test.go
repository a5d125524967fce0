package kubeletapi

import (
	"net/http"
	"net/url"
	"testing"
)

// FuzzQueries: whatever query string reaches the kubelet API's logs and
// exec endpoints, parsing answers options or an error and never panics;
// accepted log options respect the API's bounds, accepted exec options
// name a command and a stream.
func FuzzQueries(f *testing.F) {
	for _, seed := range []string{
		"follow=true&tailLines=10", "sinceSeconds=0", "sinceTime=2026-01-01T00:00:00Z&sinceSeconds=5",
		"limitBytes=-1", "previous=maybe", "tailLines=99999999999999999999",
		"command=sh&command=-c&command=echo+hi&stdout=1", "command=ls&stdin=true&tty=true", "%zz", "command=&output=1",
	} {
		f.Add(seed, "echo hello  world")
	}
	f.Fuzz(func(t *testing.T, rawQuery, cmd string) {
		r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/containerLogs/ns/pod/c", RawQuery: rawQuery}}
		if lo, err := parseLogOptions(r); err == nil {
			if lo.TailLines != nil && *lo.TailLines < 0 || lo.SinceSeconds != nil && *lo.SinceSeconds < 1 || lo.LimitBytes != nil && *lo.LimitBytes < 1 {
				t.Fatalf("accepted out-of-range log options from %q: %+v", rawQuery, lo)
			}
			if lo.SinceSeconds != nil && lo.SinceTime != nil {
				t.Fatalf("accepted both sinceSeconds and sinceTime from %q", rawQuery)
			}
		}
		if eo, err := parseExecOptions(r); err == nil {
			if len(eo.command) == 0 || !eo.stdin && !eo.stdout && !eo.stderr {
				t.Fatalf("accepted exec options without a command or a stream from %q: %+v", rawQuery, eo)
			}
		}
		for _, word := range splitCommand(cmd) {
			if word == "" {
				t.Fatalf("splitCommand(%q) gave an empty word", cmd)
			}
		}
	})
}
