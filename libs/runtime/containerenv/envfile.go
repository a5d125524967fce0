package containerenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// fileKeyValue resolves a fileKeyRef: the key's value in the env file at
// the path beneath the pod's volume (kubelet, EnvFiles): a volume it
// cannot find, a file it cannot open or parse ("couldn't parse env file",
// the kubelet's message) and a key the file lacks (unless optional:
// skipped) fail the start. The file is opened through os.Root,
// so that a link the pod planted in its volume cannot lead out of it.
func fileKeyValue(ref *corev1.FileKeySelector, o Options) (string, bool, error) {
	dir, ok := o.VolumePaths[ref.VolumeName]
	if !ok {
		return "", false, fmt.Errorf("cannot find the volume %q referenced by FileKeyRef", ref.VolumeName)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", false, fmt.Errorf("failed to get host path for volume %q: %w", ref.VolumeName, err)
	}
	defer root.Close()
	f, err := root.Open(ref.Path)
	if err != nil {
		return "", false, errors.New("couldn't parse env file")
	}
	defer f.Close()
	v, err := envFileValue(f, ref.Key)
	if err != nil {
		return "", false, errors.New("couldn't parse env file")
	}
	if v == "" {
		if ref.Optional != nil && *ref.Optional {
			return "", true, nil
		}
		return "", false, fmt.Errorf("environment variable key %q not found in file %q", ref.Key, filepath.Join(dir, ref.Path))
	}
	return v, false, nil
}

// envFileValue reads the value of key from an env file in the kubelet's
// strict format: lines KEY='value' (the value single-quoted and literal,
// newlines kept until the closing quote, a comment allowed after it),
// blank lines and # comments skipped, leading blanks ignored, no blank
// before '='; a blank right after '=' is an empty value. A key the file
// lacks is "" without an error; the first assignment of a key wins.
func envFileValue(r io.Reader, key string) (string, error) {
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimLeft(sc.Text(), " \t")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		switch {
		case !ok:
			return "", fmt.Errorf("invalid environment variable format at line %d: missing '='", n)
		case strings.TrimRight(name, " \t") == "":
			return "", fmt.Errorf("invalid environment variable format at line %d: empty variable name", n)
		case strings.TrimRight(name, " \t") != name:
			return "", fmt.Errorf("invalid environment variable format at line %d: whitespace before '=' is not allowed", n)
		case strings.TrimLeft(value, " \t") != value:
			// as a shell reads KEY= 'v': KEY is empty.
			if name == key {
				return "", nil
			}
			continue
		case !strings.HasPrefix(value, "'"):
			return "", fmt.Errorf("invalid environment variable format at line %d: value must be enclosed in single quotes", n)
		}
		v, err := quoted(sc, value[1:], &n)
		if err != nil {
			return "", err
		}
		if name == key {
			return v, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("error reading environment variable file: %w", err)
	}
	return "", nil
}

// quoted reads a single-quoted value from rest (what follows the opening
// quote) and the lines after it, up to the closing quote.
func quoted(sc *bufio.Scanner, rest string, n *int) (string, error) {
	var b strings.Builder
	start := *n
	for {
		if i := strings.IndexByte(rest, '\''); i >= 0 {
			b.WriteString(rest[:i])
			after := strings.TrimLeft(rest[i+1:], " \t")
			if after != "" && !strings.HasPrefix(after, "#") {
				return "", fmt.Errorf("invalid environment variable format at line %d: unexpected content after closing quote", *n)
			}
			return b.String(), nil
		}
		b.WriteString(rest)
		b.WriteByte('\n')
		if !sc.Scan() {
			if err := sc.Err(); err != nil {
				return "", err
			}
			return "", fmt.Errorf("invalid environment variable format starting at line %d: unclosed single quote", start)
		}
		*n++
		rest = sc.Text()
	}
}
