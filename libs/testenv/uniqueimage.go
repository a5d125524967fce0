package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
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
