package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A busybox without the nmeter applet (Debian's) gets the stand-in script;
// one with it gets the applet's link.
func TestBusyboxImageFilesNmeter(t *testing.T) {
	dir := t.TempDir()
	fake := func(name, applets string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho "+applets+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		applets    string
		wantScript bool
	}{{"sh sleep", true}, {"sh nmeter", false}} {
		files, err := BusyboxImageFiles(fake("busybox-"+map[bool]string{true: "without", false: "with"}[c.wantScript], c.applets))
		if err != nil {
			t.Fatal(err)
		}
		var nmeter *ImageFile
		for i := range files {
			if files[i].Path == "bin/nmeter" {
				nmeter = &files[i]
			}
		}
		switch {
		case nmeter == nil:
			t.Errorf("%q: no bin/nmeter", c.applets)
		case c.wantScript && (string(nmeter.Data) != nmeterScript || nmeter.Mode&0o111 == 0):
			t.Errorf("%q: bin/nmeter is not the executable stand-in: %+v", c.applets, nmeter)
		case !c.wantScript && nmeter.Link != "busybox":
			t.Errorf("%q: bin/nmeter is not the applet: %+v", c.applets, nmeter)
		}
	}
}

// The stand-in prints the UTC time of day with milliseconds as the
// lifecycle specs read it (`date -u +%FT$(nmeter -d0 '%3t' | head -n1)Z`
// parses as RFC 3339), and ends when its output is closed. Run with the
// host's busybox, as in the images.
func TestNmeterScript(t *testing.T) {
	busybox := os.Getenv(BusyboxPathEnv)
	if busybox == "" {
		busybox = "/bin/busybox"
	}
	if _, err := os.Stat(busybox); err != nil {
		t.Fatalf("busybox (Debian's busybox-static, or %s): %v", BusyboxPathEnv, err)
	}
	dir := t.TempDir()
	for _, a := range []string{"sh", "date", "head", "adjtimex", "sed", "printf"} {
		if err := os.Symlink(busybox, filepath.Join(dir, a)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "nmeter"), []byte(nmeterScript), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), filepath.Join(dir, "sh"), "-c", "date -u +%FT$(nmeter -d0 '%3t' | head -n1)Z")
	cmd.Env = []string{"PATH=" + dir}
	before := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got, err := time.Parse(time.RFC3339, strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if d := got.Sub(before); d < -time.Second || d > 5*time.Second {
		t.Errorf("%s is %s away from the time it was taken", got, d)
	}
	if got.Nanosecond()%int(time.Millisecond) != 0 || !strings.Contains(string(out), ".") {
		t.Errorf("%q: want milliseconds", out)
	}
}
