package volumes

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// File is one file of a volume's payload.
type File struct {
	Data []byte
	Mode fs.FileMode
}

// dataLink is the symbolic link that names the current payload directory;
// readers see it through the user-visible links at the volume's top level.
const (
	dataLink    = "..data"
	dataLinkTmp = "..data_tmp"
)

// writePayload makes dir hold exactly the payload (paths relative to dir),
// so that a reader never sees half of an update (kubelet: the atomic writer
// of ConfigMap, Secret, downward API and projected volumes):
//
//   - each version of the payload is a directory of its own, named
//     "..<time>.<random>", written whole before anything points at it;
//   - "..data" is a symbolic link to the current version, replaced by a
//     rename, which is atomic;
//   - each top-level name of the payload is a symbolic link through
//     "..data", so that a path keeps resolving across updates.
//
// A payload equal to the current one (contents and modes) changes nothing;
// changed reports whether a new version was written. With own, the
// version is given to the pod's user (owners.go), and a version that is
// not is written again.
func writePayload(dir string, payload map[string]File, own *owner) (changed bool, err error) {
	clean := make(map[string]File, len(payload))
	for p, f := range payload {
		cp, err := payloadPath(p)
		if err != nil {
			return false, err
		}
		clean[cp] = f
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	old, _ := os.Readlink(filepath.Join(dir, dataLink))
	if old != "" && samePayload(filepath.Join(dir, old), clean, own) {
		return false, nil
	}
	version, err := writeVersion(dir, clean, own)
	if err != nil {
		return false, err
	}
	tmp := filepath.Join(dir, dataLinkTmp)
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(version), tmp); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataLink)); err != nil {
		return false, err
	}
	want, err := linkTopNames(dir, clean)
	if err != nil {
		return false, err
	}
	if err := removeStale(dir, filepath.Base(version), want); err != nil {
		return false, err
	}
	return true, nil
}

// writeVersion writes the payload whole into a new version directory of
// dir (given to the pod's user with own) and returns its path.
func writeVersion(dir string, clean map[string]File, own *owner) (string, error) {
	version, err := os.MkdirTemp(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05."))
	if err != nil {
		return "", err
	}
	if err := os.Chmod(version, 0o755); err != nil {
		return "", err
	}
	for p, f := range clean {
		full := filepath.Join(version, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(full, f.Data, f.Mode.Perm()); err != nil {
			return "", err
		}
		// WriteFile's mode passes through the umask.
		if err := os.Chmod(full, f.Mode.Perm()); err != nil {
			return "", err
		}
	}
	if err := own.ownPayload(version); err != nil {
		return "", err
	}
	return version, nil
}

// linkTopNames makes the user-visible links, one per top-level name of the
// payload, through "..data"; it returns those names.
func linkTopNames(dir string, clean map[string]File) (map[string]bool, error) {
	want := map[string]bool{}
	for p := range clean {
		top, _, _ := strings.Cut(p, string(filepath.Separator))
		want[top] = true
	}
	for top := range want {
		link := filepath.Join(dir, top)
		target := filepath.Join(dataLink, top)
		if got, err := os.Readlink(link); err == nil && got == target {
			continue
		}
		_ = os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			return nil, err
		}
	}
	return want, nil
}

// removeStale removes from dir the versions other than current, left-overs
// of updates cut short, and the links of names the payload no longer has.
func removeStale(dir, current string, want map[string]bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == dataLink || name == current:
		case strings.HasPrefix(name, ".."):
			// an older version, or a left-over of an update cut short.
			_ = os.RemoveAll(filepath.Join(dir, name))
		case !want[name]:
			// a name the payload no longer has: only our links go.
			if got, err := os.Readlink(filepath.Join(dir, name)); err == nil && strings.HasPrefix(got, dataLink+string(filepath.Separator)) {
				_ = os.Remove(filepath.Join(dir, name))
			}
		}
	}
	return nil
}

// payloadPath refuses a path that would leave the volume (absolute, or with
// a ".." element) or hide behind the writer's own names.
func payloadPath(p string) (string, error) {
	if p == "" || filepath.IsAbs(p) {
		return "", fmt.Errorf("invalid path %q: must be relative", p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", fmt.Errorf("invalid path %q: must not contain '..'", p)
		}
	}
	if strings.HasPrefix(p, "..") {
		return "", fmt.Errorf("invalid path %q: must not start with '..'", p)
	}
	return filepath.Clean(p), nil
}

// samePayload says whether the version directory holds exactly payload.
func samePayload(version string, payload map[string]File, own *owner) bool {
	var found []string
	err := filepath.WalkDir(version, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if info, err := d.Info(); err != nil || !own.owns(info) {
				return errors.New("owner")
			}
			return nil
		}
		rel, err := filepath.Rel(version, path)
		if err != nil {
			return err
		}
		f, ok := payload[rel]
		if !ok {
			return errors.New("extra")
		}
		info, err := d.Info()
		if err != nil || info.Mode().Perm() != f.Mode.Perm() || !own.owns(info) {
			return errors.New("mode")
		}
		data, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(data, f.Data) {
			return errors.New("data")
		}
		found = append(found, rel)
		return nil
	})
	if err != nil || len(found) != len(payload) {
		return false
	}
	return true
}
