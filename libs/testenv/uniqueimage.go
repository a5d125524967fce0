package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// ImportUniqueImage imports an image of its own under name: one file of
// random content, so that no other image shares its layers and removing it
// removes nothing else. It returns once the CRI plugin knows it.
func (c *Containerd) ImportUniqueImage(ctx context.Context, name string) error {
	var b [16]byte
	_, _ = rand.Read(b[:])
	var buf bytes.Buffer
	files := []ImageFile{{Path: "data", Mode: 0o644, Data: []byte(hex.EncodeToString(b[:]))}}
	if err := WriteImageArchive(&buf, []string{name}, ImageConfig{Cmd: []string{"/data"}}, files); err != nil {
		return err
	}
	f, err := os.CreateTemp("", "splitlet-image-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(buf.Bytes()); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := c.ImportImages(ctx, f.Name()); err != nil {
		return err
	}
	return c.WaitImages(ctx, name)
}

// OwnContainerd starts a containerd of the test's own, in a directory it
// returns for the test's other files, so that image removals touch no other
// test's images; both go when the test ends.
func OwnContainerd(t testing.TB, name string) (*Containerd, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "splitlet-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cd, err := EnsureContainerd(t.Context(), ContainerdOptions{Address: filepath.Join(dir, "none.sock"), Dir: filepath.Join(dir, "containerd")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cd.Stop)
	return cd, dir
}
