package apistatus

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The status patch written directly from the typed statuses, byte for byte
// what statusPatchReflective (strategicpatch.CreateTwoWayMergePatch over the
// two pods' JSON) produces, without the JSON round trip of both pods and the
// reflective walk of the maps. The rules it follows are those of the two-way
// diff of the JSON maps:
//   - a member present in the new status and absent from the old one, or
//     encoded differently, is sent with its new value; a member the new
//     status drops is sent as null;
//   - a value is sent as json.Marshal writes a map[string]interface{}:
//     object keys sorted;
//   - a list with patchStrategy merge (conditions, hostIPs, podIPs) sends
//     its changed elements (the changed members and the merge key), its new
//     ones whole, {"$patch":"delete"} for its removed ones and
//     $setElementOrder when anything changed or the order did;
//   - any other list is replaced whole.
//
// What it does not reproduce with certainty it leaves to the reflective
// path (fastStatusPatch answers false): a changed object (resources,
// allocatedResources, extendedResourceClaimStatus) or resourceClaimStatuses
// list present on both sides, a merge key repeated in a list or not valid
// UTF-8, a string that is not valid UTF-8 (json.Marshal writes \ufffd for
// its bad bytes, the round trip the raw rune), a number that is not an
// int64.

// patchFields are PodStatus's JSON members the builder knows, sorted; a
// test holds it to the struct so that a member added to the API falls back
// until it is handled.
var patchFields = []string{
	"allocatedResources", "conditions", "containerStatuses", "ephemeralContainerStatuses",
	"extendedResourceClaimStatus", "hostIP", "hostIPs", "initContainerStatuses", "message",
	"nodeAllocatableResourceClaimStatuses", "nominatedNodeName", "observedGeneration", "phase",
	"podIP", "podIPs", "qosClass", "reason", "resize", "resourceClaimStatuses", "resources",
	"startTime",
}

// badByte is how encoding/json writes a byte that is not valid UTF-8 (and
// the only way it writes U+FFFD escaped).
var badByte = []byte(`\ufffd`)

// member is one member of a JSON object: its key and its encoded value.
type member struct {
	key string
	val []byte
}

// patchBuilder collects the members of the patch's status object. Values
// are encoded into arena, and the members of the list elements it diffs
// into scratch, neither written again: what was taken from them stays
// valid when they grow.
type patchBuilder struct {
	arena   []byte
	members []member
	scratch []member
	canon   canonicalizer
	failed  bool
}

// builders keeps the builders' buffers from one patch to the next.
var builders = sync.Pool{New: func() any { return new(patchBuilder) }}

// fastStatusPatch builds the patch StatusPatch sends; false when the
// statuses hold something only the reflective path handles with certainty.
func fastStatusPatch(uid types.UID, old, next *corev1.PodStatus) ([]byte, bool) {
	b := builders.Get().(*patchBuilder)
	defer func() {
		clear(b.members)
		clear(b.scratch)
		*b = patchBuilder{arena: b.arena[:0], members: b.members[:0], scratch: b.scratch[:0], canon: canonicalizer{spans: b.canon.spans[:0], tmp: b.canon.tmp[:0]}}
		builders.Put(b)
	}()

	b.str("phase", string(old.Phase), string(next.Phase))
	b.str("message", old.Message, next.Message)
	b.str("reason", old.Reason, next.Reason)
	b.str("nominatedNodeName", old.NominatedNodeName, next.NominatedNodeName)
	b.str("hostIP", old.HostIP, next.HostIP)
	b.str("podIP", old.PodIP, next.PodIP)
	b.str("qosClass", string(old.QOSClass), string(next.QOSClass))
	b.str("resize", string(old.Resize), string(next.Resize))
	b.integer("observedGeneration", old.ObservedGeneration, next.ObservedGeneration)
	b.startTime(old.StartTime, next.StartTime)

	mergeList(b, "conditions", "type", old.Conditions, next.Conditions,
		func(c *corev1.PodCondition) string { return string(c.Type) }, conditionMembers)
	mergeList(b, "hostIPs", "ip", old.HostIPs, next.HostIPs,
		func(ip *corev1.HostIP) string { return ip.IP }, hostIPMembers)
	mergeList(b, "podIPs", "ip", old.PodIPs, next.PodIPs,
		func(ip *corev1.PodIP) string { return ip.IP }, podIPMembers)

	atomic(b, "initContainerStatuses", old.InitContainerStatuses, next.InitContainerStatuses, len(old.InitContainerStatuses) > 0, len(next.InitContainerStatuses) > 0)
	atomic(b, "containerStatuses", old.ContainerStatuses, next.ContainerStatuses, len(old.ContainerStatuses) > 0, len(next.ContainerStatuses) > 0)
	atomic(b, "ephemeralContainerStatuses", old.EphemeralContainerStatuses, next.EphemeralContainerStatuses, len(old.EphemeralContainerStatuses) > 0, len(next.EphemeralContainerStatuses) > 0)
	atomic(b, "nodeAllocatableResourceClaimStatuses", old.NodeAllocatableResourceClaimStatuses, next.NodeAllocatableResourceClaimStatuses,
		len(old.NodeAllocatableResourceClaimStatuses) > 0, len(next.NodeAllocatableResourceClaimStatuses) > 0)

	// Objects are diffed member by member and resourceClaimStatuses is a
	// merge list with retainKeys: only their addition and removal here.
	addOrRemove(b, "allocatedResources", old.AllocatedResources, next.AllocatedResources, len(old.AllocatedResources) > 0, len(next.AllocatedResources) > 0)
	addOrRemove(b, "resources", old.Resources, next.Resources, old.Resources != nil, next.Resources != nil)
	addOrRemove(b, "extendedResourceClaimStatus", old.ExtendedResourceClaimStatus, next.ExtendedResourceClaimStatus,
		old.ExtendedResourceClaimStatus != nil, next.ExtendedResourceClaimStatus != nil)
	addOrRemove(b, "resourceClaimStatuses", old.ResourceClaimStatuses, next.ResourceClaimStatuses, len(old.ResourceClaimStatuses) > 0, len(next.ResourceClaimStatuses) > 0)

	if b.failed {
		return nil, false
	}
	return b.patch(uid)
}

// patch writes {"metadata":{"uid":...},"status":{...}}: the old pod has no
// UID, so metadata carries the new one unless it is empty; status only
// when something changed.
func (b *patchBuilder) patch(uid types.UID) ([]byte, bool) {
	slices.SortFunc(b.members, func(x, y member) int { return strings.Compare(x.key, y.key) })
	size := 32 + len(uid)
	for _, m := range b.members {
		size += len(m.key) + len(m.val) + 4
	}
	out := make([]byte, 0, size)
	out = append(out, '{')
	if uid != "" {
		out = append(out, `"metadata":{"uid":`...)
		out = appendString(out, string(uid))
		out = append(out, '}')
	}
	if len(b.members) > 0 {
		if uid != "" {
			out = append(out, ',')
		}
		out = append(out, `"status":`...)
		out = appendObject(out, b.members)
	}
	out = append(out, '}')
	// json.Marshal writes a bad UTF-8 byte as \ufffd, the round trip
	// through a map the rune itself: the reflective path's output differs.
	if bytes.Contains(out, badByte) {
		return nil, false
	}
	return out, true
}

func (b *patchBuilder) set(key string, val []byte) {
	b.members = append(b.members, member{key, val})
}

// null sends a member the new status drops.
func (b *patchBuilder) null(key string) { b.set(key, []byte("null")) }

// mark returns the arena's end, from which val takes what was encoded since.
func (b *patchBuilder) mark() int { return len(b.arena) }

func (b *patchBuilder) val(start int) []byte { return b.arena[start:len(b.arena):len(b.arena)] }

// encString encodes a string into the arena. A string that is not valid
// UTF-8 fails the builder: its encoding, \ufffd for a bad byte, is not
// the decoded string's, the rune itself, so neither compares nor writes
// as the reflective path's.
func (b *patchBuilder) encString(s string) []byte {
	if !utf8.ValidString(s) {
		b.failed = true
	}
	at := b.mark()
	b.arena = appendString(b.arena, s)
	return b.val(at)
}

// encTime encodes a metav1.Time as its MarshalJSON does.
func (b *patchBuilder) encTime(t metav1.Time) []byte {
	at := b.mark()
	b.arena = appendTime(b.arena, t)
	return b.val(at)
}

// encInt encodes an integer into the arena.
func (b *patchBuilder) encInt(n int64) []byte {
	at := b.mark()
	b.arena = strconv.AppendInt(b.arena, n, 10)
	return b.val(at)
}

// str: an omitempty string member.
func (b *patchBuilder) str(key, old, next string) {
	switch {
	case old == next:
	case !utf8.ValidString(old):
		b.failed = true
	case next == "":
		b.null(key)
	default:
		b.set(key, b.encString(next))
	}
}

// integer: an omitempty integer member.
func (b *patchBuilder) integer(key string, old, next int64) {
	switch {
	case old == next:
	case next == 0:
		b.null(key)
	default:
		b.set(key, b.encInt(next))
	}
}

// startTime: an omitempty *metav1.Time, present when set, null when zero.
func (b *patchBuilder) startTime(old, next *metav1.Time) {
	switch {
	case old == nil && next == nil:
	case next == nil:
		b.null("startTime")
	case old == nil:
		b.set("startTime", b.encTime(*next))
	case *old == *next:
	default:
		var o [48]byte
		v := b.encTime(*next)
		if !bytes.Equal(appendTime(o[:0], *old), v) {
			b.set("startTime", v)
		}
	}
}

// encode marshals v and sorts its objects' keys into the arena; nil when
// the round trip through a map might write it differently.
func (b *patchBuilder) encode(v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		b.failed = true
		return nil
	}
	return b.canonical(raw)
}

// changed returns the encoding of next when it differs from old's, nil
// when they encode alike. It tries the typed comparison first: deeply
// equal values encode alike, the converse needs the encodings (nil and
// empty, sub-second times, quantities).
func (b *patchBuilder) changed(old, next any) []byte {
	if reflect.DeepEqual(old, next) {
		return nil
	}
	o, err1 := json.Marshal(old)
	n, err2 := json.Marshal(next)
	if err1 != nil || err2 != nil {
		b.failed = true
		return nil
	}
	// \ufffd: a bad byte in either, which the round trip turns into the
	// rune (encodings that differ may decode alike).
	if bytes.Contains(o, badByte) || bytes.Contains(n, badByte) {
		b.failed = true
		return nil
	}
	if bytes.Equal(o, n) {
		return nil
	}
	return n
}

// canonical puts raw, with its objects' keys sorted, into the arena.
func (b *patchBuilder) canonical(raw []byte) []byte {
	at := b.mark()
	out, ok := b.canon.append(b.arena, raw)
	if !ok {
		b.failed = true
		return nil
	}
	b.arena = out
	return b.val(at)
}

// presence handles a member present on one side only: sent whole when
// added, null when removed; true when that settled it.
func presence[T any](b *patchBuilder, key string, next T, hadOld, hasNext bool) bool {
	switch {
	case !hadOld && !hasNext:
	case !hasNext:
		b.null(key)
	case !hadOld:
		if v := b.encode(next); v != nil {
			b.set(key, v)
		}
	default:
		return false
	}
	return true
}

// atomic: a list without patch strategy is sent whole when its encoding
// changes.
func atomic[T any](b *patchBuilder, key string, old, next T, hadOld, hasNext bool) {
	if presence(b, key, next, hadOld, hasNext) {
		return
	}
	if raw := b.changed(old, next); raw != nil {
		if v := b.canonical(raw); v != nil {
			b.set(key, v)
		}
	}
}

// addOrRemove: a value the diff would walk into (an object, a merge list
// with retainKeys) is sent whole when added and null when removed; a
// change of it is left to the reflective path.
func addOrRemove[T any](b *patchBuilder, key string, old, next T, hadOld, hasNext bool) {
	if !presence(b, key, next, hadOld, hasNext) && b.changed(old, next) != nil {
		b.failed = true
	}
}

// add appends a member to scratch.
func (b *patchBuilder) add(key string, val []byte) {
	b.scratch = append(b.scratch, member{key, val})
}

// taken returns the members added to scratch since start.
func (b *patchBuilder) taken(start int) []member {
	return b.scratch[start:len(b.scratch):len(b.scratch)]
}

// conditionMembers are a condition's JSON members in key order: the times
// are never omitted (null when zero), the other omitempty members are.
func conditionMembers(b *patchBuilder, c *corev1.PodCondition) []member {
	start := len(b.scratch)
	b.add("lastProbeTime", b.encTime(c.LastProbeTime))
	b.add("lastTransitionTime", b.encTime(c.LastTransitionTime))
	if c.Message != "" {
		b.add("message", b.encString(c.Message))
	}
	if c.ObservedGeneration != 0 {
		b.add("observedGeneration", b.encInt(c.ObservedGeneration))
	}
	if c.Reason != "" {
		b.add("reason", b.encString(c.Reason))
	}
	b.add("status", b.encString(string(c.Status)))
	b.add("type", b.encString(string(c.Type)))
	return b.taken(start)
}

func hostIPMembers(b *patchBuilder, ip *corev1.HostIP) []member {
	start := len(b.scratch)
	b.add("ip", b.encString(ip.IP))
	return b.taken(start)
}

func podIPMembers(b *patchBuilder, ip *corev1.PodIP) []member {
	start := len(b.scratch)
	b.add("ip", b.encString(ip.IP))
	return b.taken(start)
}

// mergeList: strategic merge: a list with patchStrategy merge sends its
// changed elements (changed members and the merge key) and its new ones
// whole in the new list's order, then {"$patch":"delete"} for the removed
// ones in merge key order, and $setElementOrder (every merge key of the
// new list) when it sends any or the order changed. A list added is sent
// whole, one removed as null. The elements' members must all be scalars.
func mergeList[E comparable](b *patchBuilder, key, mergeKey string, old, next []E,
	keyOf func(*E) string, members func(*patchBuilder, *E) []member) {
	switch {
	case len(old) == 0 && len(next) == 0:
		return
	case len(next) == 0:
		b.null(key)
		return
	case len(old) == 0:
		elems := make([][]member, len(next))
		for i := range next {
			elems[i] = members(b, &next[i])
		}
		at := b.mark()
		b.arena = appendArray(b.arena, len(elems), func(dst []byte, i int) []byte { return appendObject(dst, elems[i]) })
		b.set(key, b.val(at))
		return
	case slices.Equal(old, next):
		return
	}
	// The reflective diff sorts both lists by merge key and walks them in
	// step: a repeated key pairs elements in an order of its own.
	if !uniqueKeys(old, keyOf) || !uniqueKeys(next, keyOf) {
		b.failed = true
		return
	}
	patch := changedElements(b, mergeKey, old, next, keyOf, members)
	patch = deletedElements(b, mergeKey, old, next, keyOf, patch)
	if len(patch) > 0 {
		at := b.mark()
		b.arena = appendArray(b.arena, len(patch), func(dst []byte, i int) []byte { return append(dst, patch[i]...) })
		b.set(key, b.val(at))
	}
	if len(patch) > 0 || !sameKeyOrder(old, next, keyOf) {
		at := b.mark()
		b.arena = appendArray(b.arena, len(next), func(dst []byte, i int) []byte {
			dst = append(dst, '{')
			dst = appendString(dst, mergeKey)
			dst = append(dst, ':')
			dst = appendString(dst, keyOf(&next[i]))
			return append(dst, '}')
		})
		b.set("$setElementOrder/"+key, b.val(at))
	}
}

// changedElements is the patch of each element of next that is new (the
// whole element) or differs from the one of old with its key (the changed
// members and the merge key).
func changedElements[E comparable](b *patchBuilder, mergeKey string, old, next []E,
	keyOf func(*E) string, members func(*patchBuilder, *E) []member) [][]byte {
	var patch [][]byte
	for i := range next {
		k := keyOf(&next[i])
		j := indexOfKey(old, k, keyOf)
		if j < 0 {
			ms := members(b, &next[i])
			at := b.mark()
			b.arena = appendObject(b.arena, ms)
			patch = append(patch, b.val(at))
			continue
		}
		if old[j] == next[i] {
			continue
		}
		om, nm := members(b, &old[j]), members(b, &next[i])
		start := len(b.scratch)
		b.diffMembers(om, nm)
		if len(b.scratch) == start {
			continue
		}
		b.add(mergeKey, b.encString(k))
		diff := b.taken(start)
		slices.SortStableFunc(diff, func(x, y member) int { return strings.Compare(x.key, y.key) })
		at := b.mark()
		b.arena = appendObject(b.arena, diff)
		patch = append(patch, b.val(at))
	}
	return patch
}

// deletedElements appends a $patch delete, in key order, for each element
// of old that next no longer has.
func deletedElements[E any](b *patchBuilder, mergeKey string, old, next []E, keyOf func(*E) string, patch [][]byte) [][]byte {
	var removed []string
	for i := range old {
		k := keyOf(&old[i])
		if indexOfKey(next, k, keyOf) < 0 {
			removed = append(removed, k)
		}
	}
	slices.Sort(removed)
	for _, k := range removed {
		ms := sortedPair("$patch", []byte(`"delete"`), mergeKey, b.encString(k))
		at := b.mark()
		b.arena = appendObject(b.arena, ms)
		patch = append(patch, b.val(at))
	}
	return patch
}

// sameKeyOrder: old and next hold the same keys in the same order.
func sameKeyOrder[E any](old, next []E, keyOf func(*E) string) bool {
	if len(old) != len(next) {
		return false
	}
	for i := range old {
		if keyOf(&old[i]) != keyOf(&next[i]) {
			return false
		}
	}
	return true
}

// appendArray appends a JSON array of n elements, each appended by elem.
func appendArray(dst []byte, n int, elem func(dst []byte, i int) []byte) []byte {
	dst = append(dst, '[')
	for i := range n {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = elem(dst, i)
	}
	return append(dst, ']')
}

func indexOfKey[E any](list []E, k string, keyOf func(*E) string) int {
	for i := range list {
		if keyOf(&list[i]) == k {
			return i
		}
	}
	return -1
}

// uniqueKeys reports whether no merge key repeats in the list and each is
// valid UTF-8 (the diff compares and sorts the decoded keys).
func uniqueKeys[E any](list []E, keyOf func(*E) string) bool {
	for i := range list {
		k := keyOf(&list[i])
		if !utf8.ValidString(k) {
			return false
		}
		for j := i + 1; j < len(list); j++ {
			if keyOf(&list[j]) == k {
				return false
			}
		}
	}
	return true
}

func sortedPair(k1 string, v1 []byte, k2 string, v2 []byte) []member {
	if k2 < k1 {
		k1, v1, k2, v2 = k2, v2, k1, v1
	}
	return []member{{k1, v1}, {k2, v2}}
}

// diffMembers adds to scratch the diff of two objects of scalar members,
// both in key order: a member added or encoded differently with its new
// value, one dropped as null.
func (b *patchBuilder) diffMembers(old, next []member) {
	i, j := 0, 0
	for i < len(old) || j < len(next) {
		switch {
		case j == len(next) || (i < len(old) && old[i].key < next[j].key):
			b.add(old[i].key, []byte("null"))
			i++
		case i == len(old) || next[j].key < old[i].key:
			b.add(next[j].key, next[j].val)
			j++
		default:
			if !bytes.Equal(old[i].val, next[j].val) {
				b.add(next[j].key, next[j].val)
			}
			i++
			j++
		}
	}
}

// appendObject writes members, already in key order, as a JSON object.
func appendObject(dst []byte, ms []member) []byte {
	dst = append(dst, '{')
	for i, m := range ms {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, m.key)
		dst = append(dst, ':')
		dst = append(dst, m.val...)
	}
	return append(dst, '}')
}

// appendString writes s as encoding/json does: printable ASCII but the
// quote, backslash and HTML characters as they are, anything else by
// json.Marshal itself.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			enc, _ := json.Marshal(s)
			return append(dst, enc...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// appendTime writes t as metav1.Time's MarshalJSON does: null when zero,
// else RFC 3339 in UTC to the second.
func appendTime(dst []byte, t metav1.Time) []byte {
	if t.IsZero() {
		return append(dst, "null"...)
	}
	dst = append(dst, '"')
	dst = t.UTC().AppendFormat(dst, time.RFC3339)
	return append(dst, '"')
}

// canonicalizer rewrites encoding/json output as json.Marshal writes it
// back from a map[string]interface{}: every object's keys sorted, every
// token as it was. It refuses what the round trip could write differently:
// an escaped key (sorted by its decoded form), a repeated key, a number
// that is not an int64 (a float64 after the round trip).
type canonicalizer struct {
	src   []byte
	spans []memberSpan // members of the objects being written, innermost last
	tmp   []byte
}

// memberSpan is an object member: its key's characters in src, and the
// member ("key":value) in the output from the object's first member.
type memberSpan struct {
	k0, k1 int
	m0, m1 int
}

// append writes the canonical form of the JSON value src after dst.
func (c *canonicalizer) append(dst, src []byte) ([]byte, bool) {
	c.src = src
	c.spans = c.spans[:0]
	dst, i, ok := c.value(dst, 0)
	c.src = nil
	return dst, ok && i == len(src)
}

func (c *canonicalizer) value(dst []byte, i int) ([]byte, int, bool) {
	if i >= len(c.src) {
		return dst, i, false
	}
	switch ch := c.src[i]; {
	case ch == '{':
		return c.object(dst, i)
	case ch == '[':
		return c.array(dst, i)
	case ch == '"':
		end, _, ok := c.str(i)
		if !ok {
			return dst, i, false
		}
		return append(dst, c.src[i:end]...), end, true
	case ch == '-' || ch >= '0' && ch <= '9':
		return c.number(dst, i)
	}
	for _, lit := range []string{"null", "true", "false"} {
		if bytes.HasPrefix(c.src[i:], []byte(lit)) {
			return append(dst, lit...), i + len(lit), true
		}
	}
	return dst, i, false
}

// str returns the end of the string token at i and whether it holds an
// escape.
func (c *canonicalizer) str(i int) (end int, escaped, ok bool) {
	for j := i + 1; j < len(c.src); j++ {
		switch c.src[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped, true
		}
	}
	return 0, false, false
}

func (c *canonicalizer) number(dst []byte, i int) ([]byte, int, bool) {
	j := i
	if c.src[j] == '-' {
		j++
	}
	digits := j
	for j < len(c.src) && c.src[j] >= '0' && c.src[j] <= '9' {
		j++
	}
	if j == digits || j < len(c.src) && (c.src[j] == '.' || c.src[j] == 'e' || c.src[j] == 'E') {
		return dst, i, false
	}
	if j-digits > 18 {
		if _, err := strconv.ParseInt(string(c.src[i:j]), 10, 64); err != nil {
			return dst, i, false
		}
	}
	return append(dst, c.src[i:j]...), j, true
}

func (c *canonicalizer) array(dst []byte, i int) ([]byte, int, bool) {
	dst = append(dst, '[')
	i++
	if i < len(c.src) && c.src[i] == ']' {
		return append(dst, ']'), i + 1, true
	}
	for {
		var ok bool
		if dst, i, ok = c.value(dst, i); !ok || i >= len(c.src) {
			return dst, i, false
		}
		switch c.src[i] {
		case ',':
			dst = append(dst, ',')
			i++
		case ']':
			return append(dst, ']'), i + 1, true
		default:
			return dst, i, false
		}
	}
}

func (c *canonicalizer) object(dst []byte, i int) ([]byte, int, bool) {
	dst = append(dst, '{')
	i++
	if i < len(c.src) && c.src[i] == '}' {
		return append(dst, '}'), i + 1, true
	}
	body, base := len(dst), len(c.spans)
	for {
		if i >= len(c.src) || c.src[i] != '"' {
			return dst, i, false
		}
		end, escaped, ok := c.str(i)
		if !ok || escaped || end >= len(c.src) || c.src[end] != ':' {
			return dst, i, false
		}
		s := memberSpan{k0: i + 1, k1: end - 1, m0: len(dst) - body}
		dst = append(dst, c.src[i:end+1]...)
		if dst, i, ok = c.value(dst, end+1); !ok || i >= len(c.src) {
			return dst, i, false
		}
		s.m1 = len(dst) - body
		c.spans = append(c.spans, s)
		if c.src[i] == ',' {
			dst = append(dst, ',')
			i++
			continue
		}
		if c.src[i] != '}' {
			return dst, i, false
		}
		break
	}
	members := c.spans[base:]
	key := func(s memberSpan) []byte { return c.src[s.k0:s.k1] }
	sorted := true
	for n := 1; n < len(members); n++ {
		switch bytes.Compare(key(members[n-1]), key(members[n])) {
		case 0:
			return dst, i, false
		case 1:
			sorted = false
		}
	}
	if !sorted {
		slices.SortFunc(members, func(x, y memberSpan) int { return bytes.Compare(key(x), key(y)) })
		for n := 1; n < len(members); n++ {
			if bytes.Equal(key(members[n-1]), key(members[n])) {
				return dst, i, false
			}
		}
		c.tmp = append(c.tmp[:0], dst[body:]...)
		dst = dst[:body]
		for n, s := range members {
			if n > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, c.tmp[s.m0:s.m1]...)
		}
	}
	c.spans = c.spans[:base]
	return append(dst, '}'), i + 1, true
}
