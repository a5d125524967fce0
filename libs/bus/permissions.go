package bus

import (
	"fmt"
	"slices"
	"strings"
)

// Stage identities on the bus. Each stage connects as a user of its own
// whose permissions follow the subjects table of docs/bus.md: it may publish
// what the table says it publishes, subscribe to what it consumes, and use
// the JetStream API only on the streams it reads (consumers, message gets)
// and on nothing it could break (no stream create, update, purge or
// delete). The streams and the lease bucket are made beforehand by the
// admin identity (`splitlet bus init`).
const (
	StagePodconfig  = "podconfig"
	StagePodworkers = "podworkers"
	StageProber     = "prober"
	StageStatussync = "statussync"
	StageNodehb     = "nodehb"
)

// Stages lists the stage identities.
var Stages = []string{StagePodconfig, StagePodworkers, StageProber, StageStatussync, StageNodehb}

// InboxPrefix is the prefix of the inboxes (reply subjects) of a stage
// identity's connection, _INBOX.<stage>: each stage may subscribe to its
// own inboxes alone, so that no stage reads the replies another is sent
// (exec output, logs, stream URLs, JetStream deliveries). A connection sets
// it with nats.go's CustomInboxPrefix (nats.js: inboxPrefix).
func InboxPrefix(stage string) string { return "_INBOX." + stage }

// LeaseBucket is the key-value bucket of the pod workers' partition leases.
func LeaseBucket(node string) string { return "splitlet_v1_" + NodeToken(node) + "_owners" }

// Permissions is what one identity may publish and subscribe to.
type Permissions struct {
	Publish   []string
	Subscribe []string
	// Responses: the identity may answer requests it received (NATS
	// allow_responses: one reply per request), for the service API.
	Responses bool
}

// StagePermissions are a stage's permissions on the node's bus.
func StagePermissions(stage, node string) (Permissions, error) {
	s := For(node)
	stream := func(what string) string { return StreamName(node, what) }
	var p Permissions
	// Every client: server info, replies to its own requests (JetStream
	// API answers, pull deliveries, publish acknowledgements) on its own
	// inboxes alone, and the service API.
	p.Publish = append(p.Publish, "$JS.API.INFO")
	// Every stage checks that the node's streams are there (stream info:
	// read-only metadata).
	for _, what := range []string{StreamPodUpdates, StreamPodStatus, StreamProbes, StreamState} {
		p.Publish = append(p.Publish, "$JS.API.STREAM.INFO."+StreamName(node, what))
	}
	p.Subscribe = append(p.Subscribe, InboxPrefix(stage)+".>", "$SRV.>")
	p.Responses = true
	reads := func(names ...string) {
		for _, n := range names {
			p.Publish = append(p.Publish, readStream(n)...)
		}
	}
	runtime := func(kinds ...string) []string {
		var out []string
		for _, k := range kinds {
			out = append(out, s.prefix+"."+tokRuntime+"."+k+".*")
		}
		return out
	}
	switch stage {
	case StagePodconfig:
		// the pod updates and, on their own subjects (contract v2), the
		// reconciles: each pattern matches only its own kind, not the
		// whole of podupdates.>.
		p.Publish = append(p.Publish, s.PodUpdatesAll(), s.PodReconcilesAll(), s.SourcesReady())
		reads(stream(StreamPodUpdates), stream(StreamState))
	case StagePodworkers:
		p.Publish = append(p.Publish, s.PodStatusAll(), s.AgentReady(),
			// the log chunks after the first, to the kubelet API's
			// inbox (each one a request nodehb acknowledges).
			InboxPrefix(StageNodehb)+".>",
			"$KV."+LeaseBucket(node)+".>")
		p.Subscribe = append(p.Subscribe, runtime("logs", "exec", tokProbeExec, "stream", "stats")...)
		reads(stream(StreamPodUpdates), stream(StreamPodStatus), stream(StreamProbes), stream(StreamState), "KV_"+LeaseBucket(node))
	case StageProber:
		p.Publish = append(p.Publish, s.ProbeResultsAll())
		// its exec probes, which the pod workers check against the pod's
		// probe specs; never the kubelet API's exec.
		p.Publish = append(p.Publish, runtime(tokProbeExec)...)
		reads(stream(StreamPodUpdates), stream(StreamPodStatus), stream(StreamProbes))
	case StageStatussync:
		reads(stream(StreamPodUpdates), stream(StreamPodStatus), stream(StreamProbes), stream(StreamState))
	case StageNodehb:
		p.Publish = append(p.Publish, runtime("logs", "exec", "stream", "stats")...)
		// acknowledgements of the log chunks the pod workers send it.
		p.Publish = append(p.Publish, InboxPrefix(StagePodworkers)+".>")
		reads(stream(StreamState))
	default:
		return Permissions{}, fmt.Errorf("bus: no stage %q (one of %s)", stage, strings.Join(Stages, ", "))
	}
	// Its own status endpoint of the service API (answered through
	// allow_responses).
	p.Subscribe = append(p.Subscribe, s.Status(stage))
	return p, nil
}

// readStream is the JetStream API a stage uses to read a stream: its info,
// its consumers (durable or ordered: create, info, next, delete), their
// acknowledgements and flow control, and direct or stored message gets.
func readStream(name string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + name,
		"$JS.API.STREAM.MSG.GET." + name,
		"$JS.API.DIRECT.GET." + name,
		"$JS.API.DIRECT.GET." + name + ".>",
		"$JS.API.CONSUMER.CREATE." + name,
		"$JS.API.CONSUMER.CREATE." + name + ".>",
		"$JS.API.CONSUMER.DURABLE.CREATE." + name + ".>",
		"$JS.API.CONSUMER.INFO." + name + ".>",
		"$JS.API.CONSUMER.DELETE." + name + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + name + ".>",
		"$JS.ACK." + name + ".>",
		"$JS.FC." + name + ".>",
	}
}

// AuthorizationConfig is the authorization block of a nats-server
// configuration for a node: the admin identity (everything) and each
// stage's, by public nkey. keys maps "admin" and each stage to its public
// nkey; a stage without a key is left out.
func AuthorizationConfig(node string, keys map[string]string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# Splitlet bus identities of node %s (splitlet bus identities).\n", node)
	b.WriteString("authorization {\n  users: [\n")
	if k := keys["admin"]; k != "" {
		fmt.Fprintf(&b, "    # admin: makes the streams and the lease bucket (splitlet bus init)\n    { nkey: %s }\n", k)
	}
	for _, stage := range Stages {
		k := keys[stage]
		if k == "" {
			continue
		}
		p, err := StagePermissions(stage, node)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "    # %s\n    { nkey: %s\n      permissions: {\n", stage, k)
		fmt.Fprintf(&b, "        publish: { allow: %s }\n", quoteList(p.Publish))
		fmt.Fprintf(&b, "        subscribe: { allow: %s }\n", quoteList(p.Subscribe))
		if p.Responses {
			b.WriteString("        allow_responses: true\n")
		}
		b.WriteString("      } }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String(), nil
}

func quoteList(list []string) string {
	q := make([]string, 0, len(list))
	for _, s := range slices.Compact(slices.Clone(list)) {
		q = append(q, fmt.Sprintf("%q", s))
	}
	return "[" + strings.Join(q, ", ") + "]"
}
