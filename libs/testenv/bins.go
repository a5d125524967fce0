package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// BinDirEnv overrides where the control plane binaries are looked for.
const BinDirEnv = "SPLITLET_BIN_DIR"

// BinDir finds the bin/ directory of the Splitlet checkout: $SPLITLET_BIN_DIR,
// or bin/ beside the go.work file above the working directory.
func BinDir() (string, error) {
	if d := os.Getenv(BinDirEnv); d != "" {
		return d, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return filepath.Join(dir, "bin"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: no go.work above the working directory; set " + BinDirEnv)
		}
		dir = parent
	}
}

// Binary returns the path of a binary in BinDir, or an error that says how
// to build it.
func Binary(name string) (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("testenv: %s not found; run `make testenv` to build the test control plane", p)
	}
	return p, nil
}
