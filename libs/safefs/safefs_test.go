package safefs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// both runs f with openat2 and with the element-by-element fallback.
func both(t *testing.T, f func(t *testing.T)) {
	t.Run("openat2", func(t *testing.T) { f(t) })
	t.Run("fallback", func(t *testing.T) {
		was := noOpenat2.Load()
		noOpenat2.Store(true)
		defer noOpenat2.Store(was)
		f(t)
	})
}

// setup makes a directory holding a "victim" file outside the trusted one,
// and the trusted directory "box" with a link to the victim, a hard link
// to it, and a link to the outside directory.
func setup(t *testing.T) (box *Dir, victim string) {
	t.Helper()
	base := t.TempDir()
	victim = filepath.Join(base, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "box")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		os.Symlink(victim, filepath.Join(dir, "link")),
		os.Link(victim, filepath.Join(dir, "hard")),
		os.Symlink(base, filepath.Join(dir, "out")),
		os.Symlink("sub", filepath.Join(dir, "inside")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d, victim
}

func intact(t *testing.T, victim string) {
	t.Helper()
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious" {
		t.Fatalf("the file outside was touched: %q %v", b, err)
	}
}

// Create replaces a link or a hard link by a new file and leaves what it
// pointed at as it was.
func TestCreateWritesThroughNoLink(t *testing.T) {
	both(t, func(t *testing.T) {
		d, victim := setup(t)
		for _, name := range []string{"link", "hard"} {
			f, err := d.Create(name, 0o640, 0)
			if err != nil {
				t.Fatalf("create %s: %v", name, err)
			}
			_, _ = f.WriteString("log line")
			_ = f.Close()
			intact(t, victim)
			fi, err := os.Lstat(filepath.Join(d.Path(), name))
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o640 {
				t.Fatalf("%s after create: %v %v", name, fi, err)
			}
		}
		if _, err := d.Create("out/victim", 0o640, 0); err == nil {
			t.Fatal("created a file through a linked directory")
		}
		intact(t, victim)
	})
}

// Opening, reading, making directories, links, chown and chmod refuse a
// path with a link on it, even one that stays inside.
func TestNothingFollowsALink(t *testing.T) {
	both(t, func(t *testing.T) {
		d, victim := setup(t)
		if _, err := d.OpenFile("link", os.O_WRONLY|os.O_TRUNC, 0); err == nil {
			t.Fatal("opened a link")
		}
		if _, err := d.ReadFile("link", 0); err == nil {
			t.Fatal("read through a link")
		}
		if _, err := d.ReadFile("out/victim", 0); err == nil {
			t.Fatal("read through a linked directory")
		}
		if _, err := d.Open("inside/x"); err == nil {
			t.Fatal("opened through a link that stays inside")
		}
		if err := d.MkdirAll("out/made", 0o755); err == nil {
			t.Fatal("made a directory through a link")
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(victim), "made")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a directory was made outside: %v", err)
		}
		if err := d.Symlink("/etc", "out/planted"); err == nil {
			t.Fatal("made a link through a link")
		}
		if err := d.Chmod("link", 0o777); err == nil {
			t.Fatal("chmod through a link")
		}
		if err := d.Lchown("out/victim", 1, 1); err == nil {
			t.Fatal("chown through a linked directory")
		}
		if err := d.Remove("out/victim"); err == nil {
			t.Fatal("removed through a linked directory")
		}
		for _, rel := range []string{"../victim", "/etc/passwd", "sub/../../victim", ""} {
			if _, err := d.Open(rel); err == nil {
				t.Fatalf("opened %q", rel)
			}
		}
		intact(t, victim)
		if fi, _ := os.Stat(victim); fi.Mode().Perm() != 0o600 {
			t.Fatalf("victim's mode changed: %v", fi.Mode())
		}
	})
}

// What has no link on its way works as os would do it.
func TestPlainPaths(t *testing.T) {
	both(t, func(t *testing.T) {
		d, _ := setup(t)
		if err := d.MkdirAll("a/b/c", 0o750); err != nil {
			t.Fatal(err)
		}
		if err := d.MkdirAll("a/b/c", 0o750); err != nil {
			t.Fatalf("again: %v", err)
		}
		if err := d.Symlink("/some/where", "a/b/c/mnt"); err != nil {
			t.Fatal(err)
		}
		if err := d.Symlink("/else/where", "a/b/c/mnt"); err != nil {
			t.Fatalf("replace a link: %v", err)
		}
		if got, err := d.Readlink("a/b/c/mnt"); err != nil || got != "/else/where" {
			t.Fatalf("readlink %q %v", got, err)
		}
		f, err := d.Create("a/b/f", 0o600, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteString("hello")
		_ = f.Close()
		if b, err := d.ReadFile("a/b/f", 3); err != nil || string(b) != "hel" {
			t.Fatalf("read %q %v", b, err)
		}
		if err := d.Chmod("a/b", 0o700|os.ModeSetgid); err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(filepath.Join(d.Path(), "a/b")); fi.Mode()&(os.ModePerm|os.ModeSetgid) != 0o700|os.ModeSetgid {
			t.Fatalf("mode %v", fi.Mode())
		}
		if os.Geteuid() == 0 {
			if err := d.Lchown("a/b/f", 1234, 4321); err != nil {
				t.Fatal(err)
			}
			fi, _ := os.Stat(filepath.Join(d.Path(), "a/b/f"))
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1234 || st.Gid != 4321 {
				t.Fatalf("owner %d:%d", st.Uid, st.Gid)
			}
		}
		if err := d.Remove("a/b/f"); err != nil {
			t.Fatal(err)
		}
		if err := d.Remove("a/b/c/mnt"); err != nil {
			t.Fatal(err)
		}
		if err := d.Remove("a/b/c"); err != nil {
			t.Fatalf("remove an empty directory: %v", err)
		}
	})
}
