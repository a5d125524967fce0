// Package crilog writes and reads container logs in the CRI log format, the
// format the kubelet reads from containerd and CRI-O:
//
//	<RFC3339Nano timestamp> <stdout|stderr> <F|P> <text>
//
// one record a line. A line of the container's output longer than
// MaxLineSize is split into records tagged P (partial) followed by one tagged
// F (full: the line ends there). Reading turns records back into the
// container's text, as `kubectl logs` shows it, with tail, since,
// timestamps, a byte limit and follow (runtime.LogOptions).
package crilog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Stream names.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// Tags of a record.
const (
	TagFull    = "F"
	TagPartial = "P"
)

// MaxLineSize is the longest text one record carries (containerd and CRI-O
// split at 16 KiB too).
const MaxLineSize = 16 * 1024

// Record is one line of a CRI log file.
type Record struct {
	Time    time.Time
	Stream  string
	Partial bool
	Content []byte
}

// Format appends the record as a CRI log line (with its newline) to b.
func (r Record) Format(b []byte) []byte {
	b = r.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, ' ')
	b = append(b, r.Stream...)
	if r.Partial {
		b = append(b, " P "...)
	} else {
		b = append(b, " F "...)
	}
	b = append(b, r.Content...)
	return append(b, '\n')
}

// Parse reads one CRI log line (without its newline). Content aliases line.
func Parse(line []byte) (Record, error) {
	var r Record
	ts, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return r, fmt.Errorf("crilog: no stream after the timestamp in %q", truncate(line))
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return r, fmt.Errorf("crilog: bad timestamp: %w", err)
	}
	stream, rest, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return r, fmt.Errorf("crilog: no tag after the stream in %q", truncate(line))
	}
	if s := string(stream); s != Stdout && s != Stderr {
		return r, fmt.Errorf("crilog: unknown stream %q", s)
	}
	tag, content, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		// "<ts> stdout F" with nothing after it: an empty line.
		tag, content = rest, nil
	}
	switch string(tag) {
	case TagFull:
	case TagPartial:
		r.Partial = true
	default:
		return r, fmt.Errorf("crilog: unknown tag %q", tag)
	}
	r.Time, r.Stream, r.Content = t, string(stream), content
	return r, nil
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// File is a CRI log file being written by the streams of one container
// instance. Readers in the same process follow it through Changed and Done.
type File struct {
	mu      sync.Mutex
	f       *os.File
	buf     []byte
	changed chan struct{}
	waiters bool
	done    bool
	now     func() time.Time
}

// Create creates (or truncates) the log file at path.
func Create(path string) (*File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	return NewFile(f), nil
}

// NewFile writes the log to f, opened for writing (the caller chose how:
// a runtime working in a directory a container can write opens it through
// no link).
func NewFile(f *os.File) *File {
	return &File{f: f, changed: make(chan struct{}), now: time.Now}
}

// Write appends one record.
func (f *File) Write(stream string, partial bool, content []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return os.ErrClosed
	}
	f.buf = Record{Time: f.now(), Stream: stream, Partial: partial, Content: content}.Format(f.buf[:0])
	_, err := f.f.Write(f.buf)
	if f.waiters {
		close(f.changed)
		f.changed = make(chan struct{})
		f.waiters = false
	}
	return err
}

// Copy writes what r yields as records of stream until r ends. A last line
// without a newline is written as a full record.
func (f *File) Copy(stream string, r io.Reader) error {
	br := bufio.NewReaderSize(r, MaxLineSize)
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			if werr := f.Write(stream, false, line[:len(line)-1]); werr != nil {
				return werr
			}
		case errors.Is(err, bufio.ErrBufferFull):
			if werr := f.Write(stream, true, line); werr != nil {
				return werr
			}
		default:
			if len(line) > 0 {
				if werr := f.Write(stream, false, line); werr != nil {
					return werr
				}
			}
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
				return nil
			}
			return err
		}
	}
}

// Changed is closed at the next write or at Close.
func (f *File) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waiters = true
	return f.changed
}

// Done reports whether the file is complete (Close was called).
func (f *File) Done() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done
}

// Close ends writing: followers drain the file and stop.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return nil
	}
	f.done = true
	close(f.changed)
	return f.f.Close()
}
