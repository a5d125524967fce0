package source

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/services/podconfig/internal/manifest"
	"github.com/splitlet/splitlet/services/podconfig/internal/merge"
)

// ReasonInvalidManifest is the reason of the Node Event about a static pod
// manifest that cannot be used.
const ReasonInvalidManifest = "InvalidStaticPodManifest"

// File is the static pod directory source: every regular file not starting
// with a dot holds one pod. The directory is read in full at start, every
// period and shortly after any file system notification, and each read is
// reported as a SET. A manifest that cannot be used is left out with a log
// line and a Node Event naming the file and the reason; the others go on.
// A file removed (or renamed away) is reported gone at once, before the
// read that follows: a manifest removed and written again is a pod removed
// and added again, which restarts it (kubelet: the file source's delete
// and add events).
type File struct {
	path     string
	node     string
	period   time.Duration
	sink     Sink
	log      *zap.Logger
	recorder record.EventRecorder
	bad      map[string]string // file -> last error reported
	// last holds the pod of each file of the last SET, by file.
	last map[string]*corev1.Pod
}

// NewFile builds the source; Run runs it.
func NewFile(path, node string, period time.Duration, sink Sink, recorder record.EventRecorder, log *zap.Logger) *File {
	return &File{path: strings.TrimRight(path, string(os.PathSeparator)), node: node, period: period,
		sink: sink, log: log, recorder: recorder, bad: map[string]string{}, last: map[string]*corev1.Pod{}}
}

// Run reads and watches the path until ctx ends.
func (f *File) Run(ctx context.Context) {
	tick := time.NewTicker(f.period)
	defer tick.Stop()
	var w *fsnotify.Watcher
	defer func() {
		if w != nil {
			_ = w.Close()
		}
	}()
	var debounce <-chan time.Time
	for {
		if w == nil {
			w = f.watch()
		}
		if !f.scan() && w != nil {
			// The directory is gone: watch it again once it is back.
			_ = w.Close()
			w = nil
		}
		var events chan fsnotify.Event
		var errs chan error
		if w != nil {
			events, errs = w.Events, w.Errors
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				break wait
			case <-debounce:
				debounce = nil
				break wait
			case e, ok := <-events:
				if !ok {
					w = nil
					break wait
				}
				if strings.HasPrefix(filepath.Base(e.Name), ".") {
					continue // kubelet: dot files are ignored
				}
				if e.Op.Has(fsnotify.Remove) || e.Op.Has(fsnotify.Rename) {
					f.removed(e.Name)
				}
				if debounce == nil {
					// Editors write in steps: read once things settle.
					debounce = time.After(100 * time.Millisecond)
				}
			case err, ok := <-errs:
				if ok {
					f.log.Warn("watching the static pod path failed, falling back to periodic reads", zap.String("path", f.path), zap.Error(err))
				}
				_ = w.Close()
				w = nil
				break wait
			}
		}
	}
}

func (f *File) watch() *fsnotify.Watcher {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		f.log.Warn("cannot watch the static pod path", zap.String("path", f.path), zap.Error(err))
		return nil
	}
	if err := w.Add(f.path); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			f.log.Warn("cannot watch the static pod path", zap.String("path", f.path), zap.Error(err))
		}
		_ = w.Close()
		return nil
	}
	return w
}

// scan reads the path and reports its pods as a SET; false when the path
// does not exist.
func (f *File) scan() bool {
	st, err := os.Stat(f.path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			f.log.Error("cannot read the static pod path", zap.String("path", f.path), zap.Error(err))
			return true
		}
		// kubelet: a missing path is an empty source, so it can be seen.
		f.sink.Submit(merge.Update{Source: merge.SourceFile, Op: bus.OpSet, Pods: []*corev1.Pod{}})
		return false
	}
	var files []string
	if st.IsDir() {
		entries, err := os.ReadDir(f.path)
		if err != nil {
			f.log.Error("cannot read the static pod path", zap.String("path", f.path), zap.Error(err))
			return true
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			files = append(files, filepath.Join(f.path, e.Name()))
		}
		sort.Strings(files)
	} else {
		files = []string{f.path}
	}
	pods := []*corev1.Pod{}
	last := map[string]*corev1.Pod{}
	stillBad := map[string]bool{}
	for _, file := range files {
		st, err := os.Stat(file)
		if err != nil || st.IsDir() || !st.Mode().IsRegular() {
			continue // kubelet: no recursion into directories
		}
		p, err := f.read(file)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed while reading
			}
			stillBad[file] = true
			f.reject(file, err)
			continue
		}
		pods = append(pods, p)
		last[file] = p.DeepCopy()
	}
	for file := range f.bad {
		if !stillBad[file] {
			delete(f.bad, file)
		}
	}
	f.last = last
	f.sink.Submit(merge.Update{Source: merge.SourceFile, Op: bus.OpSet, Pods: pods})
	return true
}

// removed reports the pods without the one of a file just removed, if the
// last SET had it.
func (f *File) removed(file string) {
	if _, ok := f.last[file]; !ok {
		return
	}
	delete(f.last, file)
	files := make([]string, 0, len(f.last))
	for name := range f.last {
		files = append(files, name)
	}
	sort.Strings(files)
	pods := make([]*corev1.Pod, 0, len(files))
	for _, name := range files {
		pods = append(pods, f.last[name].DeepCopy())
	}
	f.sink.Submit(merge.Update{Source: merge.SourceFile, Op: bus.OpSet, Pods: pods})
}

func (f *File) read(file string) (*corev1.Pod, error) {
	fh, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, manifest.MaxSize+1))
	if err != nil {
		return nil, err
	}
	pods, err := manifest.Decode(data, manifest.Origin{Node: f.node, File: file}, true)
	if err != nil {
		return nil, err
	}
	return pods[0], nil
}

// reject logs and records a bad manifest, once per distinct reason.
func (f *File) reject(file string, err error) {
	msg := err.Error()
	if f.bad[file] == msg {
		return
	}
	f.bad[file] = msg
	f.log.Error("skipping static pod manifest", zap.String("file", file), zap.Error(err))
	if f.recorder != nil {
		f.recorder.Eventf(kube.NodeRef(f.node), corev1.EventTypeWarning, ReasonInvalidManifest,
			"Static pod manifest %s skipped: %s", file, msg)
	}
}
