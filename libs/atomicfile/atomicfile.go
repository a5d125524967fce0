// Package atomicfile replaces a file's content at once: the data goes to a
// temporary file beside it, synced, then renamed over it, so that a reader
// or a process killed mid-write sees the old content or the new, never a
// part. The file is private (0600) and its directory made 0700 if missing:
// what is kept this way (credentials, checkpoints, pull records) is the
// agent's own.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path's content with data.
func Write(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
