package recording

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/splitlet/splitlet/libs/bus"
)

// DefaultIgnore are the payload fields that differ between any two runs
// (times, and the IDs a runtime makes up) and that Diff leaves out unless
// told otherwise. The envelope's seq, sentAt and source always are.
var DefaultIgnore = []string{"startedAt", "finishedAt", "startTime", "createdAt", "lastTransitionTime", "lastProbeTime", "kubernetes.io/config.seen"}

// Item is one message's part about one pod (or the node), as Diff
// compares it: the kind, the operation and the payload without the fields
// that always differ.
type Item struct {
	Kind, Op, Payload string
}

func (it Item) String() string {
	s := it.Kind
	if it.Op != "" {
		s += " " + it.Op
	}
	return s + " " + it.Payload
}

// PodDiff is what differs for one key (a pod, or one probe of a pod's
// container: `ns/name (uid) container=c probe=Readiness`): its items in
// each run, consecutive repeats folded.
type PodDiff struct {
	Key  string
	A, B []Item
	// At is the index of the first item that differs.
	At int
}

// Report is the outcome of Diff.
type Report struct {
	// Keys counts the pods and probes compared.
	Keys  int
	Diffs []PodDiff
	// Skipped counts messages that were not Splitlet envelopes.
	Skipped int
}

// Diff compares what two runs published, pod by pod (and, for probe
// results, probe by probe, since the probes of one pod run on their own
// clocks): the sequence of distinct items each run published about each
// (an item repeated back to back counts once, since how often a state is
// re-sent depends on timing, not on behaviour). ignore lists payload field names left out at
// any depth, in addition to the envelope's seq, sentAt and source.
func Diff(a, b []Entry, ignore []string) Report {
	pa, skippedA := byPod(a, ignore)
	pb, skippedB := byPod(b, ignore)
	keys := map[string]bool{}
	for k := range pa {
		keys[k] = true
	}
	for k := range pb {
		keys[k] = true
	}
	r := Report{Keys: len(keys), Skipped: skippedA + skippedB}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		x, y := pa[k], pb[k]
		at := -1
		for i := 0; i < max(len(x), len(y)); i++ {
			if i >= len(x) || i >= len(y) || x[i] != y[i] {
				at = i
				break
			}
		}
		if at >= 0 {
			r.Diffs = append(r.Diffs, PodDiff{Key: k, A: x, B: y, At: at})
		}
	}
	return r
}

// Print writes the report for people: each pod that differs, with the two
// runs' items from the first difference on.
func (r Report) Print(w io.Writer) {
	for _, d := range r.Diffs {
		fmt.Fprintf(w, "%s: differs from item %d (A has %d, B has %d)\n", d.Key, d.At+1, len(d.A), len(d.B))
		for i := d.At; i < max(len(d.A), len(d.B)); i++ {
			if i < len(d.A) {
				fmt.Fprintf(w, "  A[%d] %s\n", i+1, d.A[i])
			}
			if i < len(d.B) {
				fmt.Fprintf(w, "  B[%d] %s\n", i+1, d.B[i])
			}
		}
	}
	fmt.Fprintf(w, "%d of %d pods/probes differ", len(r.Diffs), r.Keys)
	if r.Skipped > 0 {
		fmt.Fprintf(w, " (%d messages were not envelopes and were left out)", r.Skipped)
	}
	fmt.Fprintln(w)
}

// byPod splits the entries into items per pod, folding repeats.
func byPod(entries []Entry, ignore []string) (map[string][]Item, int) {
	drop := dropSet(ignore)
	out := map[string][]Item{}
	skipped := 0
	for _, e := range entries {
		items, ok := itemsOf(e, drop)
		if !ok {
			skipped++
			continue
		}
		for _, k := range items {
			list := out[k.key]
			if n := len(list); n > 0 && list[n-1] == k.item {
				continue
			}
			out[k.key] = append(list, k.item)
		}
	}
	return out, skipped
}

// dropSet is the payload fields left out: DefaultIgnore and ignore.
func dropSet(ignore []string) map[string]bool {
	drop := map[string]bool{}
	for _, k := range append(slices.Clone(DefaultIgnore), ignore...) {
		drop[k] = true
	}
	return drop
}

// keyed is one message's item about one key (a pod, or a probe of one).
type keyed struct {
	key  string
	item Item
}

// itemsOf is what one message says about each pod it carries (a
// PodUpdate: one item per pod; anything else: one item, keyed by its pod,
// container and probe); false when it is not a Splitlet envelope.
func itemsOf(e Entry, drop map[string]bool) ([]keyed, bool) {
	var env struct {
		Kind    string         `json:"kind"`
		Op      string         `json:"op"`
		Payload map[string]any `json:"payload"`
	}
	data := e.Data
	if data == nil {
		data = jsonForm(e)
	}
	if data == nil || json.Unmarshal(data, &env) != nil || env.Kind == "" {
		return nil, false
	}
	payload := env.Payload
	if raw, ok := payload["pods"]; ok {
		list, _ := raw.([]any)
		pods := make([]map[string]any, 0, len(list))
		for _, p := range list {
			if pod, ok := p.(map[string]any); ok {
				pods = append(pods, pod)
			}
		}
		if raw != nil && (list == nil || len(pods) != len(list)) {
			return nil, false // not a list of objects
		}
		out := make([]keyed, 0, len(pods))
		for _, pod := range pods {
			out = append(out, keyed{podKey(pod), Item{Kind: env.Kind, Op: env.Op, Payload: canonical(pod, drop)}})
		}
		return out, true
	}
	key := "(node)"
	for _, f := range []string{"uid", "podUID"} {
		if v, ok := payload[f].(string); ok && v != "" {
			key = podName(payload, v)
		}
	}
	if c, ok := payload["container"].(string); ok && c != "" {
		key += " container=" + c
		if p, ok := payload["probe"].(string); ok {
			key += " probe=" + p
		}
	}
	return []keyed{{key, Item{Kind: env.Kind, Op: env.Op, Payload: canonical(payload, drop)}}}, true
}

// podKey names a pod of a PodUpdate: namespace/name (uid).
func podKey(p map[string]any) string {
	md, _ := p["metadata"].(map[string]any)
	uid, _ := md["uid"].(string)
	return podName(md, uid)
}

func podName(m map[string]any, uid string) string {
	ns, _ := m["namespace"].(string)
	name, _ := m["name"].(string)
	if name == "" {
		return uid
	}
	return fmt.Sprintf("%s/%s (%s)", ns, name, uid)
}

// canonical is v as JSON with sorted keys and the dropped fields removed.
func canonical(v any, drop map[string]bool) string {
	var b strings.Builder
	writeCanonical(&b, v, drop)
	return b.String()
}

func writeCanonical(b *strings.Builder, v any, drop map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			if !drop[k] {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			writeCanonical(b, x[k], drop)
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, e, drop)
		}
		b.WriteByte(']')
	default:
		vb, _ := json.Marshal(x)
		b.Write(vb)
	}
}

// jsonForm is a binary (protobuf) message in its JSON form, so that
// recordings made in either encoding compare; nil when it is not a bus
// message.
func jsonForm(e Entry) []byte {
	env, err := bus.DecodeMsg(e.Header, e.Binary)
	if err != nil {
		return nil
	}
	if env, err = env.AsJSON(); err != nil {
		return nil
	}
	data, err := json.Marshal(env)
	if err != nil {
		return nil
	}
	return data
}
