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
	Publish []string
	// PublishDeny wins over Publish: the other stages' durable consumers on
	// a stream where the identity's ordered consumers take any name.
	PublishDeny []string
	Subscribe   []string
	// Responses: the identity may answer requests it received (NATS
	// allow_responses: one reply per request), for the service API.
	Responses bool
}

// StagePermissions are a stage's permissions on the bus of a node.
func StagePermissions(stage, node string) (Permissions, error) {
	if !slices.Contains(Stages, stage) {
		return Permissions{}, fmt.Errorf("bus: no stage %q (one of %s)", stage, strings.Join(Stages, ", "))
	}
	s := For(node)
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
	runtime := func(kinds ...string) []string {
		var out []string
		for _, k := range kinds {
			out = append(out, s.prefix+"."+tokRuntime+"."+k+".*")
		}
		return out
	}
	switch stage {
	case StagePodconfig:
		// the pod updates and, on their own subjects, the reconciles: each pattern matches only its own kind, not the
		// whole of podupdates.>.
		p.Publish = append(p.Publish, s.PodUpdatesAll(), s.PodReconcilesAll(), s.SourcesReady(), s.StaticPods())
	case StagePodworkers:
		p.Publish = append(p.Publish, s.PodStatusAll(), s.AgentReady(),
			// the log chunks after the first, to the kubelet API's
			// inbox (each one a request nodehb acknowledges).
			InboxPrefix(StageNodehb)+".>",
			"$KV."+LeaseBucket(node)+".>",
			// the device allocation of its pods (the device manager's).
			s.DevicesAllocate())
		p.Subscribe = append(p.Subscribe, runtime("logs", "exec", tokProbeExec, "stream", "stats", tokEvict, tokReclaim)...)
	case StageProber:
		p.Publish = append(p.Publish, s.ProbeResultsAll())
		// its exec probes, which the pod workers check against the pod's
		// probe specs; never the kubelet API's exec.
		p.Publish = append(p.Publish, runtime(tokProbeExec)...)
	case StageNodehb:
		p.Publish = append(p.Publish, runtime("logs", "exec", "stream", "stats", tokEvict, tokReclaim)...)
		// the node's pressure conditions (the eviction manager's).
		p.Publish = append(p.Publish, s.NodePressure())
		// acknowledgements of the log chunks the pod workers send it.
		p.Publish = append(p.Publish, InboxPrefix(StagePodworkers)+".>")
		// the device manager answers the pod workers' allocations.
		p.Subscribe = append(p.Subscribe, s.DevicesAllocate())
	}
	for _, u := range StageStreams(stage, node) {
		p.Publish = append(p.Publish, readStream(u)...)
		if u.Ordered {
			p.PublishDeny = append(p.PublishDeny, othersDurables(stage, node, u.Stream)...)
		}
	}
	// Its own status endpoint of the service API (answered through
	// allow_responses).
	p.Subscribe = append(p.Subscribe, s.Status(stage))
	return p, nil
}

// readStream is the JetStream API a stage uses to read a stream: its info,
// its own durable consumers (create, info, next message, delete, and their
// acknowledgements), ordered consumers of any name, and message gets.
// Nothing lists a stream's consumers, so no stage learns the names of
// another's ordered consumers.
func readStream(u StreamUse) []string {
	out := []string{"$JS.API.STREAM.INFO." + u.Stream}
	if u.Gets {
		out = append(out, "$JS.API.STREAM.MSG.GET."+u.Stream, "$JS.API.DIRECT.GET."+u.Stream, "$JS.API.DIRECT.GET."+u.Stream+".>")
	}
	names := slices.Clone(u.Durables)
	if u.Ordered {
		names = append(names, "*")
	}
	for _, n := range names {
		out = append(out, consumerAPI(u.Stream, n)...)
	}
	for _, d := range u.Durables {
		out = append(out, "$JS.ACK."+u.Stream+"."+d+".>")
	}
	if u.Push {
		out = append(out, "$JS.FC."+u.Stream+".>")
	}
	return out
}

// consumerAPI are the JetStream API subjects of one consumer of a stream
// (name "*": of any): create (with or without a filter subject token),
// info, delete and the next messages of a pull.
func consumerAPI(stream, name string) []string {
	c := "$JS.API.CONSUMER."
	return []string{
		c + "CREATE." + stream + "." + name,
		c + "CREATE." + stream + "." + name + ".>",
		c + "INFO." + stream + "." + name,
		c + "DELETE." + stream + "." + name,
		c + "MSG.NEXT." + stream + "." + name,
	}
}

// othersDurables is the consumer API of the durables the other
// identities (the stages and their shadows) keep on a stream: denied to an
// identity whose ordered consumers take any name there.
func othersDurables(id, node, stream string) []string {
	var out []string
	add := func(uses []StreamUse) {
		for _, u := range uses {
			if u.Stream != stream {
				continue
			}
			for _, d := range u.Durables {
				out = append(out, consumerAPI(stream, d)...)
				out = append(out, "$JS.ACK."+stream+"."+d+".>")
			}
		}
	}
	for _, other := range Stages {
		if other != id {
			add(StageStreams(other, node))
		}
	}
	for _, other := range ShadowStages {
		if ShadowIdentity(other) != id {
			add(ShadowStreams(other, node))
		}
	}
	return out
}

// IdentityPermissions are the permissions of a stage identity or of a
// shadow's (ShadowIdentity).
func IdentityPermissions(id, node string) (Permissions, error) {
	for _, stage := range ShadowStages {
		if id == ShadowIdentity(stage) {
			return ShadowPermissions(stage, node)
		}
	}
	return StagePermissions(id, node)
}

// StageIdentities are the identities of the stages and of their shadows,
// in the order of Stages, then ShadowStages.
func StageIdentities() []string {
	out := slices.Clone(Stages)
	for _, stage := range ShadowStages {
		out = append(out, ShadowIdentity(stage))
	}
	return out
}

// AuthorizationConfig is the authorization block of a nats-server
// configuration for a node: the admin identity (everything) and each
// stage's and shadow's (StageIdentities), by public nkey. keys maps
// "admin" and each of them to its public nkey; a stage without a key is left out.
func AuthorizationConfig(node string, keys map[string]string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# Splitlet bus identities of node %s (splitlet bus identities).\n", node)
	b.WriteString("authorization {\n  users: [\n")
	if k := keys["admin"]; k != "" {
		fmt.Fprintf(&b, "    # admin: makes the streams and the lease bucket (splitlet bus init)\n    { nkey: %s }\n", k)
	}
	for _, stage := range StageIdentities() {
		k := keys[stage]
		if k == "" {
			continue
		}
		p, err := IdentityPermissions(stage, node)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "    # %s\n    { nkey: %s\n      permissions: {\n", stage, k)
		if len(p.PublishDeny) > 0 {
			fmt.Fprintf(&b, "        publish: { allow: %s\n          deny: %s }\n", quoteList(p.Publish), quoteList(p.PublishDeny))
		} else {
			fmt.Fprintf(&b, "        publish: { allow: %s }\n", quoteList(p.Publish))
		}
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
