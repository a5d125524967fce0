// Package recording records what crossed a node's bus, replays a recording
// into a stage, and compares what two runs of a stage published: the
// experimenter's A/B loop (`splitlet bus record`, `replay`, `diff`;
// docs/experiments.md).
//
// A recording is JSON lines, one Entry per message, in the order the
// node's streams stored them: the time, the stream, the subject, the NATS
// headers and the message itself (as JSON when it is JSON, else base64).
// It holds the stream subjects (pod updates, pod status, probe results and
// the state subjects); request/reply traffic (logs, exec, stats) is not
// stored by the bus and is not recorded.
package recording

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/splitlet/splitlet/libs/bus"
)

// Entry is one recorded message.
type Entry struct {
	// Time is when the stream stored the message.
	Time    time.Time   `json:"time"`
	Stream  string      `json:"stream"`
	Subject string      `json:"subject"`
	Header  nats.Header `json:"header,omitempty"`
	// Data is the message when it is JSON; Binary (base64 in the file)
	// when it is not.
	Data   json.RawMessage `json:"data,omitempty"`
	Binary []byte          `json:"binary,omitempty"`
}

// Payload is the message's bytes.
func (e *Entry) Payload() []byte {
	if e.Data != nil {
		return e.Data
	}
	return e.Binary
}

// streams are the node's streams a recording reads, in this order.
var streams = []string{bus.StreamPodUpdates, bus.StreamPodStatus, bus.StreamProbes, bus.StreamState}

// Filter picks subjects of a node's streams.
type Filter struct {
	// Subjects per stream (the stream's short name); a stream not named
	// is not read.
	Subjects map[string][]string
}

// All is every stream subject of the node.
func All(node string) Filter {
	s := bus.For(node)
	return Filter{Subjects: map[string][]string{
		bus.StreamPodUpdates: {s.PodUpdatesStream()},
		bus.StreamPodStatus:  {s.PodStatusAll()},
		bus.StreamProbes:     {s.ProbeResultsAll()},
		bus.StreamState:      {s.StateAll()},
	}}
}

// Inputs is what a stage consumes from the node's streams (docs/bus.md's
// table).
func Inputs(node, stage string) (Filter, error) {
	s := bus.For(node)
	f := Filter{Subjects: map[string][]string{}}
	switch stage {
	case "", "all":
		return All(node), nil
	case bus.StagePodconfig:
		return Filter{}, errors.New("podconfig reads the API server and pod files, not the bus: record its outputs instead")
	case bus.StagePodworkers:
		// the pod updates and what only the owner reads (the reconciles,
		// the grace-shortening deletes): the prober and statussync take
		// the pod updates alone.
		f.Subjects[bus.StreamPodUpdates] = []string{s.PodUpdatesStream()}
		f.Subjects[bus.StreamProbes] = []string{s.ProbeResultsAll()}
		f.Subjects[bus.StreamState] = []string{s.SourcesReady()}
	case bus.StageProber:
		f.Subjects[bus.StreamPodUpdates] = []string{s.PodUpdatesAll()}
		f.Subjects[bus.StreamPodStatus] = []string{s.PodStatusAll()}
	case bus.StageStatussync:
		f.Subjects[bus.StreamPodUpdates] = []string{s.PodUpdatesAll()}
		f.Subjects[bus.StreamPodStatus] = []string{s.PodStatusAll()}
		f.Subjects[bus.StreamProbes] = []string{s.ProbeResultsAll()}
		f.Subjects[bus.StreamState] = []string{s.SourcesReady()}
	case bus.StageNodehb:
		f.Subjects[bus.StreamState] = []string{s.AgentReady()}
	default:
		return Filter{}, fmt.Errorf("no stage %q (one of all, %v)", stage, bus.Stages)
	}
	return f, nil
}

// Outputs is what a stage publishes on the node's streams.
func Outputs(node, stage string) (Filter, error) {
	s := bus.For(node)
	f := Filter{Subjects: map[string][]string{}}
	switch stage {
	case bus.StagePodconfig:
		f.Subjects[bus.StreamPodUpdates] = []string{s.PodUpdatesStream()}
		f.Subjects[bus.StreamState] = []string{s.SourcesReady()}
	case bus.StagePodworkers:
		f.Subjects[bus.StreamPodStatus] = []string{s.PodStatusAll()}
		f.Subjects[bus.StreamState] = []string{s.AgentReady()}
	case bus.StageProber:
		f.Subjects[bus.StreamProbes] = []string{s.ProbeResultsAll()}
	case bus.StageStatussync, bus.StageNodehb:
		return Filter{}, fmt.Errorf("%s publishes nothing on the bus (it writes to the API server): compare its API objects instead", stage)
	default:
		return Filter{}, fmt.Errorf("no stage %q (one of %v)", stage, bus.Stages)
	}
	return f, nil
}

// Options of Record.
type Options struct {
	Node   string
	Filter Filter
	// Since reads what the streams hold from this time on; zero records
	// only what arrives after the call.
	Since time.Time
	// Until stops the recording at this time; zero stops it once the
	// streams are read up to the moment Record was called (with Since),
	// or when ctx ends.
	Until time.Time
}

// Record reads the node's streams and returns their messages, ordered by
// the time the streams stored them.
func Record(ctx context.Context, js jetstream.JetStream, o Options) ([]Entry, error) {
	if o.Since.IsZero() && o.Until.IsZero() && ctx.Done() == nil {
		return nil, errors.New("recording: a live recording needs an end (Until, or a context that ends)")
	}
	started := time.Now()
	var out []Entry
	for _, what := range streams {
		subjects := o.Filter.Subjects[what]
		if len(subjects) == 0 {
			continue
		}
		entries, err := readStream(ctx, js, what, bus.StreamName(o.Node, what), subjects, o, started)
		if err != nil {
			return out, err
		}
		out = append(out, entries...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out, nil
}

func readStream(ctx context.Context, js jetstream.JetStream, what, name string, subjects []string, o Options, started time.Time) ([]Entry, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverNewPolicy}
	if !o.Since.IsZero() {
		since := o.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := js.OrderedConsumer(ctx, name, cfg)
	if err != nil {
		return nil, fmt.Errorf("recording: stream %s: %w", name, err)
	}
	// Without an end time, the stream is read up to what it held when the
	// recording began.
	caughtUp := o.Until.IsZero() && !o.Since.IsZero()
	if caughtUp {
		if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
			return nil, nil
		}
	}
	var out []Entry
	for {
		if ctx.Err() != nil || (!o.Until.IsZero() && time.Now().After(o.Until)) {
			return out, nil
		}
		wait := time.Second
		if !o.Until.IsZero() {
			wait = min(wait, max(time.Until(o.Until), time.Millisecond))
		}
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(wait))
		if err != nil {
			if errors.Is(err, context.Canceled) || ctx.Err() != nil {
				return out, nil
			}
			return out, fmt.Errorf("recording: stream %s: %w", name, err)
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			if caughtUp && md.Timestamp.After(started) {
				return out, nil
			}
			out = append(out, entryOf(what, m.Subject(), m.Headers(), m.Data(), md.Timestamp))
			if caughtUp && md.NumPending == 0 {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			return out, fmt.Errorf("recording: stream %s: %w", name, err)
		}
	}
}

func entryOf(stream, subject string, h nats.Header, data []byte, at time.Time) Entry {
	e := Entry{Time: at.UTC(), Stream: stream, Subject: subject}
	if len(h) > 0 {
		e.Header = h
	}
	if json.Valid(data) {
		e.Data = slices.Clone(data)
	} else {
		e.Binary = slices.Clone(data)
	}
	return e
}

// Write writes entries as JSON lines.
func Write(w io.Writer, entries []Entry) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i := range entries {
		if err := enc.Encode(&entries[i]); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// Read reads a recording; a line that does not decode is an error naming
// the line.
func Read(r io.Reader) ([]Entry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	var out []Entry
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("recording: line %d: %w", n, err)
		}
		if e.Subject == "" || (e.Data == nil && e.Binary == nil) {
			return nil, fmt.Errorf("recording: line %d: an entry needs a subject and a message", n)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// Keep returns the entries whose subject the filter picks.
func Keep(entries []Entry, f Filter) []Entry {
	var out []Entry
	for _, e := range entries {
		for _, pattern := range f.Subjects[e.Stream] {
			if server.SubjectMatchesFilter(e.Subject, pattern) {
				out = append(out, e)
				break
			}
		}
	}
	return out
}

// Pace is how Replay spaces the messages.
type Pace string

// The paces.
const (
	// PaceRecorded keeps the gaps between the messages as recorded.
	PaceRecorded Pace = "recorded"
	// PaceFast sends each message once the one before it is stored.
	PaceFast Pace = "fast"
)

// Replay publishes entries into the streams of js (a private server: the
// node's streams are made there if missing), with their headers (the
// JetStream message IDs among them), at the given pace. It returns how
// many it sent.
func Replay(ctx context.Context, js jetstream.JetStream, node string, entries []Entry, pace Pace) (int, error) {
	if pace != PaceRecorded && pace != PaceFast {
		return 0, fmt.Errorf("recording: pace %q: must be %s or %s", pace, PaceRecorded, PaceFast)
	}
	if err := bus.EnsureStreams(ctx, js, node); err != nil {
		return 0, fmt.Errorf("recording: the node's streams: %w", err)
	}
	start := time.Now()
	for i, e := range entries {
		if pace == PaceRecorded && i > 0 {
			due := start.Add(e.Time.Sub(entries[0].Time))
			if d := time.Until(due); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return i, ctx.Err()
				case <-t.C:
				}
			}
		}
		msg := &nats.Msg{Subject: e.Subject, Header: e.Header, Data: e.Payload()}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			return i, fmt.Errorf("recording: entry %d (%s): %w", i+1, e.Subject, err)
		}
	}
	return len(entries), nil
}
