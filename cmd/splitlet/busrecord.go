package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/splitlet/splitlet/libs/recording"
)

// writeRecording writes entries to path ("-" or empty: stdout) and says
// whether it went to a file.
func writeRecording(path string, stdout io.Writer, entries []recording.Entry) (toFile bool, err error) {
	if path == "" || path == "-" {
		return false, recording.Write(stdout, entries)
	}
	f, err := os.Create(path)
	if err != nil {
		return true, err
	}
	if err := recording.Write(f, entries); err != nil {
		_ = f.Close()
		return true, err
	}
	return true, f.Close()
}

func readRecording(path string) ([]recording.Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := recording.Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return entries, nil
}

// busRecord writes what crossed the node's streams (all, or one stage's
// inputs) over a window: from --since ago up to now, or live for --for (or
// until interrupted).
func busRecord(ctx context.Context, args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("bus record", pflag.ContinueOnError)
	node := fs.String("node-name", os.Getenv("SPLITLET_NODE_NAME"), "the node to record (env SPLITLET_NODE_NAME)")
	var conn natsFlags
	conn.register(fs, "an identity that may read the node's streams (the admin's, or the recorded stage's)")
	stage := fs.String("stage", "all", "record what this stage consumes (podworkers, prober, statussync, nodehb), or all")
	since := fs.Duration("since", 0, "also record what the streams hold from this long ago (they keep an hour); without --for the recording ends at the moment it began")
	live := fs.Duration("for", 0, "record live for this long (0 with --since: up to now; 0 without: until interrupted)")
	out := fs.String("out", "-", "file to write (JSON lines; - is standard output)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *node == "" {
		return errors.New("--node-name is required")
	}
	filter, err := recording.Inputs(*node, *stage)
	if err != nil {
		return fmt.Errorf("--stage: %w", err)
	}
	nc, js, err := conn.jetStream("splitlet-bus-record")
	if err != nil {
		return err
	}
	defer nc.Close()
	o := recording.Options{Node: *node, Filter: filter}
	if *since > 0 {
		o.Since = time.Now().Add(-*since)
	}
	if *live > 0 {
		o.Until = time.Now().Add(*live)
	}
	entries, err := recording.Record(ctx, js, o)
	if err != nil {
		return err
	}
	toFile, err := writeRecording(*out, stdout, entries)
	if err != nil {
		return err
	}
	if toFile {
		fmt.Fprintf(stdout, "recorded %d messages of node %s (%s) to %s\n", len(entries), *node, *stage, *out)
	}
	return nil
}

// busReplay feeds a recording to a stage on a private NATS server and
// records what that stage published meanwhile.
func busReplay(ctx context.Context, args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("bus replay", pflag.ContinueOnError)
	node := fs.String("node-name", os.Getenv("SPLITLET_NODE_NAME"), "the node of the recording, and of the stage under test (env SPLITLET_NODE_NAME)")
	var conn natsFlags
	conn.register(fs, "an identity that may publish the recorded subjects and read the stage's outputs (a private server: none needed)")
	in := fs.String("in", "", "the recording to replay")
	stage := fs.String("stage", "", "the stage under test: its inputs are replayed and its outputs recorded (podworkers, prober, podconfig)")
	pace := fs.String("pace", string(recording.PaceRecorded), "recorded: the recorded gaps between messages; fast: as fast as the server takes them")
	settle := fs.Duration("settle", 3*time.Second, "how long to keep recording the stage's outputs after the last message")
	out := fs.String("out", "-", "file for what the stage published (JSON lines; - is standard output)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *node == "" || *in == "" || *stage == "" {
		return errors.New("--node-name, --in and --stage are required")
	}
	outputs, err := recording.Outputs(*node, *stage)
	if err != nil {
		return fmt.Errorf("--stage: %w", err)
	}
	entries, err := readRecording(*in)
	if err != nil {
		return err
	}
	if inputs, err := recording.Inputs(*node, *stage); err == nil {
		entries = recording.Keep(entries, inputs)
	}
	nc, js, err := conn.jetStream("splitlet-bus-replay")
	if err != nil {
		return err
	}
	defer nc.Close()
	started := time.Now()
	sent, err := recording.Replay(ctx, js, *node, entries, recording.Pace(*pace))
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(*settle):
	}
	// what the stage published since the replay began, up to now.
	published, err := recording.Record(ctx, js, recording.Options{Node: *node, Filter: outputs, Since: started.Add(-time.Second)})
	if err != nil {
		return err
	}
	toFile, err := writeRecording(*out, stdout, published)
	if err != nil {
		return err
	}
	if toFile {
		fmt.Fprintf(stdout, "replayed %d messages to %s; it published %d, written to %s\n", sent, *stage, len(published), *out)
	}
	return nil
}

// errDiffer makes `splitlet bus diff` exit 1 when the runs differ.
var errDiffer = errors.New("the runs differ")

// busDiff compares two recordings of a stage's outputs pod by pod, or
// (--live) a stage's live outputs with its shadow's as they come.
func busDiff(ctx context.Context, args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("bus diff", pflag.ContinueOnError)
	ignore := fs.StringSlice("ignore", nil, "more payload field names to leave out, at any depth (always left out: seq, sentAt, source, and "+strings.Join(recording.DefaultIgnore, ", ")+")")
	live := fs.String("live", "", "compare this stage's live outputs with its shadow's (splitlet.v1.<node>.shadow.<stage>), as they come")
	node := fs.String("node-name", os.Getenv("SPLITLET_NODE_NAME"), "with --live: the node (env SPLITLET_NODE_NAME)")
	var conn natsFlags
	conn.register(fs, "with --live: an identity that may read the node's probe and shadow streams (the admin's)")
	runFor := fs.Duration("for", 0, "with --live: compare for this long, then exit 1 if anything differed (0: until interrupted)")
	since := fs.Duration("since", 0, "with --live: also compare what the streams hold from this long ago (0: all they hold)")
	settle := fs.Duration("settle", 5*time.Second, "with --live: how long the two sides may disagree about a pod before it counts as a difference (each runs on its own clock)")
	every := fs.Duration("every", 10*time.Second, "with --live: how often to print the running summary")
	asJSON := fs.Bool("json", false, "with --live: one JSON object a line (a difference, or a summary) for scripts")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *live != "" {
		if fs.NArg() != 0 {
			return errors.New("--live compares the live bus, not recordings: no file arguments")
		}
		if *node == "" {
			return errors.New("--node-name is required with --live")
		}
		o := recording.LiveOptions{Node: *node, Stage: *live, Ignore: *ignore, Settle: *settle, Every: *every}
		if *since > 0 {
			o.Since = time.Now().Add(-*since)
		}
		return busDiffLive(ctx, conn, o, *runFor, *asJSON, stdout)
	}
	if fs.NArg() != 2 {
		return errors.New("two recordings are needed: splitlet bus diff A.jsonl B.jsonl (or --live <stage>)")
	}
	a, err := readRecording(fs.Arg(0))
	if err != nil {
		return err
	}
	b, err := readRecording(fs.Arg(1))
	if err != nil {
		return err
	}
	r := recording.Diff(a, b, *ignore)
	r.Print(stdout)
	if len(r.Diffs) > 0 {
		return errDiffer
	}
	return nil
}

// busDiffLive runs recording.Live and prints what it reports; with a
// duration, a difference makes it exit 1.
func busDiffLive(ctx context.Context, conn natsFlags, o recording.LiveOptions, runFor time.Duration, asJSON bool, stdout io.Writer) error {
	if _, err := recording.Outputs(o.Node, o.Stage); err != nil {
		return fmt.Errorf("--live: %w", err)
	}
	nc, js, err := conn.jetStream("splitlet-bus-diff")
	if err != nil {
		return err
	}
	defer nc.Close()
	if runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, runFor)
		defer cancel()
	}
	enc := json.NewEncoder(stdout)
	show := func(ev recording.LiveEvent) {
		if asJSON {
			_ = enc.Encode(ev)
			return
		}
		if d := ev.Difference; d != nil {
			fmt.Fprintf(stdout, "%s: differs\n  live   %s\n  shadow %s\n", d.Key, itemText(d.Live), itemText(d.Shadow))
			return
		}
		s := ev.Summary
		fmt.Fprintf(stdout, "compared %d messages (live %d, shadow %d) about %d pods/probes: %d differ, in %d pods\n",
			s.Compared, s.Live, s.Shadow, s.Keys, s.Differ, len(s.Pods))
	}
	sum, err := recording.Live(ctx, js, o, show)
	if err != nil {
		return err
	}
	show(recording.LiveEvent{Summary: &sum})
	if runFor > 0 && sum.Differ > 0 {
		return errDiffer
	}
	return nil
}

func itemText(it *recording.Item) string {
	if it == nil {
		return "(nothing)"
	}
	return it.String()
}
