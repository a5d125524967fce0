package crilog

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"time"

	"github.com/splitlet/splitlet/libs/runtime"
)

// Live is a log still being written: a *File.
type Live interface {
	// Changed is closed at the next write or when writing ends.
	Changed() <-chan struct{}
	// Done reports that writing has ended.
	Done() bool
}

// Output renders records as `kubectl logs` shows them: the text, with each
// line prefixed by its timestamp when asked; it applies tail (as a number
// of lines to skip, see NewOutput), since and the byte limit.
type Output struct {
	w         io.Writer
	opts      runtime.LogOptions
	skip      int64
	line      int64
	midLine   bool
	remaining int64
	buf       []byte
}

// NewOutput writes to w. totalLines is how many lines the log holds now; it
// is only used with opts.TailLines >= 0, to skip all but the last ones.
func NewOutput(w io.Writer, opts runtime.LogOptions, totalLines int64) *Output {
	o := &Output{w: w, opts: opts, remaining: -1}
	if opts.TailLines >= 0 && totalLines > opts.TailLines {
		o.skip = totalLines - opts.TailLines
	}
	if opts.LimitBytes > 0 {
		o.remaining = opts.LimitBytes
	}
	return o
}

// Add renders one record. It reports false once the byte limit is reached:
// nothing more will be written.
func (o *Output) Add(r Record) (bool, error) {
	if o.remaining == 0 {
		return false, nil
	}
	idx := o.line
	if !r.Partial {
		o.line++
	}
	if idx < o.skip {
		return true, nil
	}
	// kubelet: a record older than since is dropped (per record, like
	// the kubelet's log reader).
	if !o.opts.Since.IsZero() && r.Time.Before(o.opts.Since) {
		return true, nil
	}
	b := o.buf[:0]
	if o.opts.Timestamps && !o.midLine {
		b = r.Time.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, ' ')
	}
	o.midLine = r.Partial
	b = append(b, r.Content...)
	if !r.Partial {
		b = append(b, '\n')
	}
	o.buf = b
	more := true
	if o.remaining >= 0 {
		if int64(len(b)) >= o.remaining {
			b = b[:o.remaining]
			more = false
		}
		o.remaining -= int64(len(b))
	}
	if _, err := o.w.Write(b); err != nil {
		return false, err
	}
	return more, nil
}

// ReadFile writes the log at path to w as opts select. With opts.Follow and
// a live log it keeps writing new lines until ctx ends or the log is done
// and drained, and follows the log across a rotation (the file renamed and
// a new one made at path: the rest of the old file, then the new one from
// its start); otherwise it stops at the end of the file. Malformed lines
// are skipped.
func ReadFile(ctx context.Context, path string, opts runtime.LogOptions, live Live, w io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	files := []*os.File{f}
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	// next opens the file that replaced the one read last at path, if
	// one did; the one before that is read to its end and closed.
	next := func() io.Reader {
		cur := files[len(files)-1]
		was, err1 := cur.Stat()
		now, err2 := os.Stat(path)
		if err1 != nil || err2 != nil || os.SameFile(was, now) {
			return nil
		}
		nf, err := os.Open(path)
		if err != nil {
			return nil
		}
		if len(files) > 1 {
			_ = files[0].Close()
			files = files[1:]
		}
		files = append(files, nf)
		return nf
	}
	return readLog(ctx, f, opts, live, w, next)
}

// Read is ReadFile of a log already open (from its start), without
// following a rotation.
func Read(ctx context.Context, f io.ReadSeeker, opts runtime.LogOptions, live Live, w io.Writer) error {
	return readLog(ctx, f, opts, live, w, nil)
}

func readLog(ctx context.Context, f io.ReadSeeker, opts runtime.LogOptions, live Live, w io.Writer, next func() io.Reader) error {
	var total int64
	var err error
	if opts.TailLines >= 0 {
		if total, err = countLines(f); err != nil {
			return err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
	}
	o := NewOutput(w, opts, total)
	lines := newLineReader(f)
	for {
		var changed <-chan struct{}
		done := true
		if opts.Follow && live != nil {
			// Taken before reading: whatever was written before Done
			// turned true is read below.
			changed = live.Changed()
			done = live.Done()
		}
		if stop, err := drain(lines, o); stop || err != nil {
			return err
		}
		if next != nil && opts.Follow && live != nil {
			if nf := next(); nf != nil {
				// rotated: the old file takes no more writes once the
				// new one exists; read its last lines, then the new one.
				if stop, err := drain(lines, o); stop || err != nil {
					return err
				}
				lines.reset(nf)
				continue
			}
		}
		if done {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}

// drain writes the records lines holds up to the end of what is written
// so far; stop: the output's limit was reached, or an error.
func drain(lines *lineReader, o *Output) (stop bool, err error) {
	for {
		line, err := lines.next()
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return true, err
		}
		rec, perr := Parse(line)
		if perr != nil {
			continue
		}
		if more, werr := o.Add(rec); werr != nil || !more {
			return true, werr
		}
	}
}

// lineReader reads the whole lines of a log that may still be written: a
// line longer than its buffer, or cut by the end of what is written so
// far, is kept until its end comes.
type lineReader struct {
	br      *bufio.Reader
	pending []byte
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64*1024)}
}

// next returns the next whole line without its newline, valid until the
// next call; io.EOF at the end of what is written so far.
func (l *lineReader) next() ([]byte, error) {
	for {
		line, err := l.br.ReadSlice('\n')
		if err == nil {
			if len(l.pending) > 0 {
				l.pending = append(l.pending, line...)
				line = l.pending
			}
			l.pending = l.pending[:0]
			return line[:len(line)-1], nil
		}
		l.pending = append(l.pending, line...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

// reset reads r from now on, dropping a line left unended.
func (l *lineReader) reset(r io.Reader) {
	l.br.Reset(r)
	l.pending = l.pending[:0]
}

// countLines counts the complete lines (F records) of a CRI log.
func countLines(r io.Reader) (int64, error) {
	lines := newLineReader(r)
	var n int64
	for {
		line, err := lines.next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if rec, perr := Parse(line); perr == nil && !rec.Partial {
			n++
		}
	}
}
