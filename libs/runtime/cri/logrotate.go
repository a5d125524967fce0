package cri

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/gc"
)

var _ gc.LogRotator = (*Runtime)(nil)

// Rotated log files are named <log>.<timestamp> (the kubelet's format),
// then compressed to <log>.<timestamp>.gz through <...>.tmp.
const (
	rotateTimeFormat = "20060102-150405"
	gzSuffix         = ".gz"
	tmpSuffix        = ".tmp"
)

// globEscape escapes what a glob pattern would take as its own.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// RotateLogs implements gc.LogRotator: the log of each running container
// of the node that reached p.MaxSize is rotated (kubelet: the container log
// manager), p.Workers at a time.
func (r *Runtime) RotateLogs(ctx context.Context, p gc.LogPolicy) error {
	type job struct{ id, path string }
	var jobs []job
	r.mu.Lock()
	for id, in := range r.byID {
		if in.status.State == runtime.StateRunning && in.status.LogPath != "" {
			jobs = append(jobs, job{id, in.status.LogPath})
		}
	}
	r.mu.Unlock()
	ch := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range max(p.Workers, 1) {
		wg.Go(func() {
			for j := range ch {
				if err := r.rotateIfFull(ctx, j.id, j.path, p); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("container %s: %w", j.id, err))
					mu.Unlock()
				}
			}
		})
	}
	for _, j := range jobs {
		select {
		case ch <- j:
		case <-ctx.Done():
		}
	}
	close(ch)
	wg.Wait()
	return errors.Join(errs...)
}

// rotateIfFull rotates a running container's log once it is p.MaxSize; a
// log that is gone is reopened.
func (r *Runtime) rotateIfFull(ctx context.Context, id, path string, p gc.LogPolicy) error {
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := r.rs.ReopenContainerLog(ctx, id); err != nil {
			return fmt.Errorf("reopen the missing log %s: %s", path, grpcMessage(err))
		}
		info, err = os.Stat(path)
	}
	if err != nil {
		return err
	}
	if info.Size() < p.MaxSize {
		return nil
	}
	kept, err := r.pruneRotated(path, p.MaxFiles)
	if err != nil {
		return err
	}
	for _, f := range kept {
		if !strings.HasSuffix(f, gzSuffix) {
			if err := compress(f); err != nil {
				return err
			}
		}
	}
	return r.rotateLive(ctx, id, path)
}

// pruneRotated removes the rotated files of the log at path that are left
// over (a compression cut short) or beyond maxFiles with the live log and
// the one about to be rotated; it returns those kept, oldest first.
func (r *Runtime) pruneRotated(path string, maxFiles int) ([]string, error) {
	all, err := filepath.Glob(globEscape(path) + ".*")
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, f := range all {
		have[f] = true
	}
	var kept []string
	for _, f := range all {
		// a temporary file, or a plain one whose compressed copy is done
		if strings.HasSuffix(f, tmpSuffix) || have[f+gzSuffix] {
			if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
			continue
		}
		kept = append(kept, f)
	}
	sort.Strings(kept)
	excess := len(kept) - max(maxFiles-2, 0)
	for i := 0; i < excess; i++ {
		if err := os.Remove(kept[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	if excess > 0 {
		kept = kept[excess:]
	}
	return kept, nil
}

// compress gzips a rotated log to <f>.gz (through a temporary file) and
// removes f.
func compress(f string) error {
	in, err := os.Open(f)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	tmp := f + tmpSuffix
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, info.Mode().Perm())
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	zw := gzip.NewWriter(out)
	_, err = io.Copy(zw, in)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("compress %s: %w", f, err)
	}
	if err := os.Rename(tmp, f+gzSuffix); err != nil {
		return err
	}
	return os.Remove(f)
}

// rotateLive renames the live log to <log>.<timestamp> and has the
// runtime reopen it (a new file at path); when the runtime cannot, the
// rename is undone. A rotated file of the same second is not overwritten:
// the rotation waits for the next pass.
func (r *Runtime) rotateLive(ctx context.Context, id, path string) error {
	rotated := path + "." + time.Now().Format(rotateTimeFormat)
	for _, f := range []string{rotated, rotated + gzSuffix} {
		if _, err := os.Lstat(f); err == nil {
			return nil
		}
	}
	if err := os.Rename(path, rotated); err != nil {
		return err
	}
	if err := r.rs.ReopenContainerLog(ctx, id); err != nil {
		if rerr := os.Rename(rotated, path); rerr != nil {
			r.log.Warn("cannot put a rotated log back", zap.String("path", path), zap.String("id", id), zap.Error(rerr))
		}
		return fmt.Errorf("reopen the log %s: %s", path, grpcMessage(err))
	}
	r.log.Debug("container log rotated", zap.String("id", id), zap.String("path", rotated))
	return nil
}
