package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/spf13/pflag"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/discovery"
)

const statusUsage = `usage:
  splitlet status --node-name N --nats-url U [--nats-nkey F] [--nats-creds F] [--nats-tls-ca F] [--wait D] [--json]
      the node's running stages from the NATS service API ($SRV.STATS): instance, readiness,
      partitions owned, consumer lag; and the pod workers' last readiness heartbeat
`

// stageRow is one instance's answer, as `splitlet status` shows it.
type stageRow struct {
	discovery.StageStatus
	// ID is the service API's id of the instance.
	ID string `json:"id"`
}

// nodeStatus is what `splitlet status --json` prints.
type nodeStatus struct {
	Node   string     `json:"node"`
	Stages []stageRow `json:"stages"`
	// Agent is the pod workers' last AgentReadiness, and AgentAt when it
	// was sent (the heartbeat).
	Agent   *bus.AgentReadiness `json:"agent,omitempty"`
	AgentAt time.Time           `json:"agentAt,omitzero"`
	// Missing lists the stages no instance of which answered.
	Missing []string `json:"missing,omitempty"`
}

// runStatus is `splitlet status`; it returns the exit code: 0 when every
// stage answered, 1 when one is missing or cannot be asked, 2 for bad flags.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("status", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, statusUsage, fs.FlagUsages()) }
	node := fs.String("node-name", os.Getenv("SPLITLET_NODE_NAME"), "the node to show (env SPLITLET_NODE_NAME)")
	var conn natsFlags
	conn.register(fs, "an identity that may ask the service API and read the state stream (the admin's)")
	wait := fs.Duration("wait", time.Second, "how long to collect the stages' answers")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *node == "" {
		fmt.Fprint(stderr, "splitlet status: --node-name is required\n", statusUsage)
		return 2
	}
	nc, err := conn.connect("splitlet-status")
	if err != nil {
		fmt.Fprintf(stderr, "splitlet status: %v\n", err)
		return 1
	}
	defer nc.Close()
	st, err := collectStatus(ctx, nc, *node, *wait)
	if err != nil {
		fmt.Fprintf(stderr, "splitlet status: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	} else {
		printStatus(stdout, st, time.Now())
	}
	if len(st.Missing) > 0 {
		return 1
	}
	return 0
}

// collectStatus asks every service of the NATS service API for its stats
// ($SRV.STATS), keeps the Splitlet stages of node, and reads the pod
// workers' last readiness from the state stream.
func collectStatus(ctx context.Context, nc *nats.Conn, node string, wait time.Duration) (*nodeStatus, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(micro.APIPrefix+"."+micro.StatsVerb.String(), inbox, nil); err != nil {
		return nil, err
	}
	out := &nodeStatus{Node: node}
	deadline := time.Now().Add(wait)
	for {
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			break
		}
		m, err := sub.NextMsg(left)
		if errors.Is(err, nats.ErrTimeout) {
			break
		}
		if err != nil {
			return nil, err
		}
		if row, ok := stageOf(m.Data, node); ok {
			out.Stages = append(out.Stages, row)
		}
	}
	// the stages in their order, their shadows after them.
	order := bus.StageIdentities()
	slices.SortFunc(out.Stages, func(a, b stageRow) int {
		if c := slices.Index(order, a.Stage) - slices.Index(order, b.Stage); c != 0 {
			return c
		}
		return strings.Compare(a.Instance+a.ID, b.Instance+b.ID)
	})
	for _, s := range bus.Stages {
		if !slices.ContainsFunc(out.Stages, func(r stageRow) bool { return r.Stage == s }) {
			out.Missing = append(out.Missing, s)
		}
	}
	out.Agent, out.AgentAt = lastReadiness(ctx, nc, node)
	return out, nil
}

// lastReadiness is the pod workers' last AgentReadiness kept on the state
// stream, and when it was sent; nil when there is none to read.
func lastReadiness(ctx context.Context, nc *nats.Conn, node string) (*bus.AgentReadiness, time.Time) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, time.Time{}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, bus.StreamName(node, bus.StreamState))
	if err != nil {
		return nil, time.Time{}
	}
	msg, err := stream.GetLastMsgForSubject(ctx, bus.For(node).AgentReady())
	if err != nil {
		return nil, time.Time{}
	}
	e, err := bus.Decode(msg.Data)
	if err != nil {
		return nil, time.Time{}
	}
	ar, err := bus.DecodeAgentReadiness(e)
	if err != nil {
		return nil, time.Time{}
	}
	return ar, e.SentAt
}

// stageOf reads one $SRV.STATS answer: a Splitlet stage of node, or not.
func stageOf(data []byte, node string) (stageRow, bool) {
	var stats micro.Stats
	if err := json.Unmarshal(data, &stats); err != nil || !strings.HasPrefix(stats.Name, discovery.ServicePrefix) {
		return stageRow{}, false
	}
	if stats.Metadata["node"] != node {
		return stageRow{}, false
	}
	row := stageRow{ID: stats.ID}
	for _, ep := range stats.Endpoints {
		if len(ep.Data) > 0 && json.Unmarshal(ep.Data, &row.StageStatus) == nil {
			break
		}
	}
	if row.Stage == "" {
		row.Stage = strings.TrimPrefix(stats.Name, discovery.ServicePrefix)
		row.Started = stats.Started
	}
	if row.Instance == "" {
		row.Instance = stats.ID
	}
	return row, true
}

func printStatus(w io.Writer, st *nodeStatus, now time.Time) {
	fmt.Fprintf(w, "node %s\n", st.Node)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tINSTANCE\tREADY\tPARTITIONS\tLAG\tUP\tVERSION")
	for _, r := range st.Stages {
		stage := r.Stage
		if r.Implementation != "" {
			stage += " (" + r.Implementation + ")"
		}
		parts := "all"
		if r.Partitions != nil {
			parts = partitionList(r.Partitions)
		}
		up := "-"
		if !r.Started.IsZero() {
			up = now.Sub(r.Started).Truncate(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%d\t%s\t%s\n", stage, r.Instance, r.Ready, parts, r.Lag, up, r.Version)
	}
	for _, m := range st.Missing {
		fmt.Fprintf(tw, "%s\t(none answered)\t\t\t\t\t\n", m)
	}
	_ = tw.Flush()
	if st.Agent == nil {
		fmt.Fprintln(w, "pod workers: no readiness heartbeat on the bus")
		return
	}
	state := "ready"
	if !st.Agent.Ready {
		state = "not ready: " + st.Agent.Reason
		if st.Agent.Message != "" {
			state += " (" + st.Agent.Message + ")"
		}
	}
	fmt.Fprintf(w, "pod workers: %s, %d replica(s), last heartbeat %s ago\n", state, len(st.Agent.Replicas),
		now.Sub(st.AgentAt).Truncate(time.Millisecond*100))
}

// partitionList writes partitions as ranges: 0-3,7,9-10 ("none" when empty).
func partitionList(ps []int) string {
	if len(ps) == 0 {
		return "none"
	}
	ps = slices.Clone(ps)
	slices.Sort(ps)
	var parts []string
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, fmt.Sprint(ps[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ps[i], ps[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
