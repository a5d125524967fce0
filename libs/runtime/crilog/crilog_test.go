package crilog

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/testenv"
)

func all() runtime.LogOptions { return runtime.LogOptions{TailLines: -1} }

func read(t *testing.T, path string, opts runtime.LogOptions) string {
	t.Helper()
	var b bytes.Buffer
	if err := ReadFile(context.Background(), path, opts, nil, &b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestCopyAndReadLongLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	f, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 2*MaxLineSize+100)
	in := "a\n" + long + "\n\nend"
	if err := f.Copy(Stdout, strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	var tags []string
	for _, l := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
		r, err := Parse([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		if r.Stream != Stdout || len(r.Content) > MaxLineSize {
			t.Fatalf("record %q", l[:min(len(l), 80)])
		}
		tag := TagFull
		if r.Partial {
			tag = TagPartial
		}
		tags = append(tags, tag)
	}
	if got := strings.Join(tags, ""); got != "FPPFFF" {
		t.Fatalf("tags %s, want FPPFFF", got)
	}
	if got := read(t, path, all()); got != in+"\n" {
		t.Fatalf("read back %d bytes, want %d", len(got), len(in)+1)
	}
	if got := read(t, path, runtime.LogOptions{TailLines: 3}); got != long+"\n\nend\n" {
		t.Fatalf("tail 3 read %d bytes", len(got))
	}
	ts := read(t, path, runtime.LogOptions{TailLines: 3, Timestamps: true})
	if n := strings.Count(ts, "Z "); n != 3 {
		t.Fatalf("%d timestamps in the last 3 lines, want 3", n)
	}
	if got := read(t, path, runtime.LogOptions{TailLines: -1, LimitBytes: 3}); got != "a\nx" {
		t.Fatalf("limit 3: %q", got)
	}
}

func TestReadSkipsMalformedLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	content := "garbage\n" +
		"2026-11-21T12:00:00.5Z stdout F one\n" +
		"2026-11-21T12:00:01Z stdwhat F bad stream\n" +
		"2026-11-21T12:00:02Z stderr F two\n" +
		"2026-11-21T12:00:03Z stdout X bad tag\n" +
		"2026-11-21T12:00:04Z stdout F\n" +
		"2026-11-21T12:00:05Z stdout F partial write without newline"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := read(t, path, all()); got != "one\ntwo\n\n" {
		t.Fatalf("read %q", got)
	}
	since := time.Date(2026, 11, 21, 12, 0, 1, 0, time.UTC)
	if got := read(t, path, runtime.LogOptions{TailLines: -1, Since: since, Timestamps: true}); got != "2026-11-21T12:00:02Z two\n2026-11-21T12:00:04Z \n" {
		t.Fatalf("since: %q", got)
	}
}

func TestFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	f, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Write(Stdout, false, []byte("old")); err != nil {
		t.Fatal(err)
	}
	var out apptest.Buffer
	done := make(chan error, 1)
	go func() {
		done <- ReadFile(context.Background(), path, runtime.LogOptions{Follow: true, TailLines: -1}, f, &out)
	}()
	waitFor := func(want string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("followed %q", want), func() (bool, string) {
			got := out.String()
			return got == want, fmt.Sprintf("%q", got)
		})
	}
	waitFor("old\n")
	if err := f.Write(Stderr, false, []byte("new 1")); err != nil {
		t.Fatal(err)
	}
	waitFor("old\nnew 1\n")
	select {
	case err := <-done:
		t.Fatalf("follow ended before the log was done: %v", err)
	default:
	}
	if err := f.Write(Stdout, false, []byte("last")); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not end when the log was done")
	}
	if got := out.String(); got != "old\nnew 1\nlast\n" {
		t.Fatalf("followed %q", got)
	}
	if err := f.Write(Stdout, false, []byte("after")); err == nil {
		t.Fatal("write after Close succeeded")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("2026-11-21T12:00:00.5Z stdout F one"))
	f.Add([]byte("2026-11-21T12:00:00Z stderr P"))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := Parse(line)
		if err != nil {
			return
		}
		back, err := Parse(bytes.TrimSuffix(r.Format(nil), []byte("\n")))
		if err != nil || !back.Time.Equal(r.Time) || back.Stream != r.Stream || back.Partial != r.Partial || !bytes.Equal(back.Content, r.Content) {
			t.Fatalf("round trip of %q: %+v, %v", line, back, err)
		}
	})
}

// polled is a live log that is checked every few milliseconds until done
// (a log another process writes).
type polled struct{ done atomic.Bool }

func (p *polled) Changed() <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(5*time.Millisecond, func() { close(ch) })
	return ch
}

func (p *polled) Done() bool { return p.done.Load() }

// A follower reads on across rotations: the rest of the renamed file, then
// the new file at the path from its start, losing and repeating no line.
func TestFollowAcrossRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	f, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	live := &polled{}
	var out apptest.Buffer
	done := make(chan error, 1)
	go func() {
		done <- ReadFile(t.Context(), path, runtime.LogOptions{Follow: true, TailLines: -1}, live, &out)
	}()
	var want strings.Builder
	n := 0
	write := func(k int) {
		for range k {
			line := fmt.Sprintf("line %d", n)
			n++
			if err := f.Write(Stdout, false, []byte(line)); err != nil {
				t.Fatal(err)
			}
			want.WriteString(line + "\n")
		}
	}
	for i := range 3 {
		write(5)
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("before rotation %d: followed %q", i, want.String()), func() (bool, string) {
			got := out.String()
			return got == want.String(), fmt.Sprintf("%q", got)
		})
		// lines written to the old file after the rename and before the
		// new file exists are read too.
		if err := os.Rename(path, fmt.Sprintf("%s.%d", path, i)); err != nil {
			t.Fatal(err)
		}
		write(2)
		_ = f.Close()
		if f, err = Create(path); err != nil {
			t.Fatal(err)
		}
	}
	write(3)
	live.done.Store(true)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not end")
	}
	_ = f.Close()
	if out.String() != want.String() {
		t.Fatalf("followed %q, want %q", out.String(), want.String())
	}
}
