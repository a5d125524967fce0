// Package merge is podconfig's pod storage: the per-source desired state and
// the rules that turn a source's report into the minimal PodUpdate operations
// (kubelet pkg/kubelet/config: podStorage.Merge and checkAndUpdatePod).
//
// The machine, per source:
//
//	unseen --(first SET, or Seen marker)--> seen
//
// State: for each source, the pods it holds by UID (each with its bus
// partition). An Update from a source is one of
//
//	ADD, UPDATE, DELETE  pods the source reports (new or changed): merged one by one
//	REMOVE               pods gone from the source
//	SET                  the whole content of the source: what it no longer
//	                     holds is removed; marks the source seen
//	Seen                 marks the source seen without changing its pods (an
//	                     incremental source, such as an informer, whose
//	                     initial list has been fully reported)
//
// Merge classifies each reported pod against the stored one (checkAndUpdatePod):
// a new UID is an ADD; a change of spec, labels, non-local annotations or
// deletion fields is an UPDATE, or a DELETE when deletionTimestamp is set; a
// change of status alone is a RECONCILE; anything else (resourceVersion,
// managed fields, ...) produces nothing. A RECONCILE, and a DELETE that only
// shortens the grace period of a pod already terminating, are for the
// partition's owner alone (Message.OwnerOnly).
//
// Invariants:
//   - the output of one Merge is ordered as the kubelet delivers it: REMOVE,
//     ADD, UPDATE, DELETE, RECONCILE (incremental mode); in the snapshot modes
//     SETs replace the operations the mode folds into snapshots.
//   - a pod's partition is computed once from its UID and never changes.
//   - output pods are copies: later merges never change what was returned.
//   - a source is never un-seen: a restart starts from empty state, so its
//     first view only ever adds (no REMOVE for pods not yet seen).
package merge

import (
	"reflect"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/kube"
)

// Annotations the agent itself manages on pods (kubelet kubetypes).
const (
	AnnotationSource = kube.AnnotationConfigSource
	AnnotationSeen   = bus.AnnotationSeen
	AnnotationHash   = "kubernetes.io/config.hash"
	AnnotationMirror = "kubernetes.io/config.mirror"
)

// The pod sources, named as the kubelet names them.
const (
	SourceAPI  = kube.SourceAPI
	SourceFile = "file"
	SourceHTTP = "http"
)

// OpSeen is an input-only operation: the source has reported everything it
// had at start (an informer has synced); it marks the source seen.
const OpSeen bus.Op = "SEEN"

// Mode is how changes are notified (kubelet PodConfigNotificationMode).
type Mode int

const (
	// Incremental sends ADD, UPDATE, DELETE, REMOVE and RECONCILE (default).
	Incremental Mode = iota
	// Snapshot sends a SET of each changed partition for any change.
	Snapshot
	// SnapshotAndUpdates sends a SET of each changed partition for additions
	// and removals, and UPDATE/DELETE for changes.
	SnapshotAndUpdates
)

// ParseMode reads a mode's key value.
func ParseMode(s string) (Mode, bool) {
	switch s {
	case "incremental", "":
		return Incremental, true
	case "snapshot":
		return Snapshot, true
	case "snapshot-and-updates":
		return SnapshotAndUpdates, true
	}
	return 0, false
}

// Update is what a source reports.
type Update struct {
	Source string
	Op     bus.Op
	Pods   []*corev1.Pod
}

// Message is one PodUpdate to publish: pods of one source in one partition,
// shared with the storage and so read-only.
type Message struct {
	Source    string
	Op        bus.Op
	Partition int
	Pods      []*corev1.Pod
	// OwnerOnly: only the partition's owner (the pod workers) has a use for
	// the message, so it goes to the owner's subject of the partition (a
	// RECONCILE, and a DELETE that only shortens a terminating pod's grace
	// period: docs/bus.md, "PodUpdate operations").
	OwnerOnly bool
}

// Result is the outcome of one Merge.
type Result struct {
	// Messages in publishing order.
	Messages []Message
	// FirstSeen: this update made the source seen.
	FirstSeen bool
}

// Recorder receives Warning events about rejected pods.
type Recorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

type entry struct {
	pod  *corev1.Pod
	part int
}

// Storage holds the desired pods of every source. Safe for concurrent use.
type Storage struct {
	mu         sync.Mutex
	mode       Mode
	partitions int
	recorder   Recorder
	now        func() time.Time
	pods       map[string]map[types.UID]*entry
	seen       map[string]bool
}

// Option configures a Storage.
type Option func(*Storage)

// WithMode sets the notification mode.
func WithMode(m Mode) Option { return func(s *Storage) { s.mode = m } }

// WithRecorder sets where events about rejected pods go.
func WithRecorder(r Recorder) Option { return func(s *Storage) { s.recorder = r } }

// WithClock sets the clock of the config.seen annotation.
func WithClock(now func() time.Time) Option { return func(s *Storage) { s.now = now } }

// New returns empty storage for the given partition count.
func New(partitions int, opts ...Option) *Storage {
	s := &Storage{partitions: partitions, now: time.Now,
		pods: map[string]map[types.UID]*entry{}, seen: map[string]bool{}}
	for _, o := range opts {
		o(s)
	}
	if s.partitions < 1 {
		s.partitions = 1
	}
	return s
}

// Partitions is the partition count.
func (s *Storage) Partitions() int { return s.partitions }

// Seen reports whether the source has been seen in full.
func (s *Storage) Seen(source string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[source]
}

// SeenSources lists the sources seen in full, sorted.
func (s *Storage) SeenSources() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.seen))
	for k := range s.seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Partition is the bus partition of a UID.
func (s *Storage) Partition(uid types.UID) int { return bus.Partition(string(uid), s.partitions) }

// Snapshot returns a source's pods grouped by partition (one slice per
// partition, empty ones included). The pods are the storage's, shared:
// read-only (the storage never changes a pod in place).
func (s *Storage) Snapshot(source string) [][]*corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked(source, nil)
}

// Pods returns copies of every pod of the given sources.
func (s *Storage) Pods(sources ...string) []*corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*corev1.Pod
	for _, src := range sources {
		for _, e := range s.pods[src] {
			out = append(out, e.pod.DeepCopy())
		}
	}
	return out
}

func (s *Storage) snapshotLocked(source string, only map[int]bool) [][]*corev1.Pod {
	parts := make([][]*corev1.Pod, s.partitions)
	for _, e := range s.pods[source] {
		if only != nil && !only[e.part] {
			continue
		}
		parts[e.part] = append(parts[e.part], e.pod)
	}
	for _, p := range parts {
		sort.Slice(p, func(i, j int) bool { return p[i].UID < p[j].UID })
	}
	return parts
}

// Merge applies a source's update and returns what to publish. The pods of
// u are taken over by the storage (callers pass copies).
func (s *Storage) Merge(u Update) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	wasSeen := s.seen[u.Source]
	var ch changes
	s.pods[u.Source] = s.applyOp(u, &ch)
	res := Result{FirstSeen: !wasSeen && s.seen[u.Source]}
	s.messages(u.Source, &res, &ch)
	return res
}

// changes are the entries an update touched, by what happened to them.
type changes struct {
	adds, updates, deletes, shortened, removes, reconciles []*entry
}

// applyOp applies u to its source's pods and returns them.
func (s *Storage) applyOp(u Update, ch *changes) map[types.UID]*entry {
	pods := s.pods[u.Source]
	if pods == nil {
		pods = map[types.UID]*entry{}
	}
	switch u.Op {
	case bus.OpAdd, bus.OpUpdate, bus.OpDelete:
		s.apply(u.Source, u.Pods, pods, pods, ch)
	case bus.OpRemove:
		for _, p := range u.Pods {
			if existing, ok := pods[p.UID]; ok {
				delete(pods, p.UID)
				ch.removes = append(ch.removes, existing)
			}
		}
	case bus.OpSet:
		s.seen[u.Source] = true
		old := pods
		pods = make(map[types.UID]*entry, len(u.Pods))
		s.apply(u.Source, u.Pods, old, pods, ch)
		for uid, existing := range old {
			if _, ok := pods[uid]; !ok {
				ch.removes = append(ch.removes, existing)
			}
		}
		sort.Slice(ch.removes, func(i, j int) bool { return ch.removes[i].pod.UID < ch.removes[j].pod.UID })
	case OpSeen:
		s.seen[u.Source] = true
	}
	return pods
}

// apply merges reported pods into into, comparing with old (the kubelet's
// updatePodsFunc); old and into may be the same map.
func (s *Storage) apply(source string, reported []*corev1.Pod, old, into map[types.UID]*entry, ch *changes) {
	for _, ref := range s.filterDuplicates(source, reported) {
		if ref.Annotations == nil {
			ref.Annotations = map[string]string{}
		}
		// the source annotation is set before any comparison, as the kubelet does.
		ref.Annotations[AnnotationSource] = source
		existing, ok := old[ref.UID]
		if !ok {
			ref.Annotations[AnnotationSeen] = s.now().UTC().Format(time.RFC3339Nano)
			e := &entry{pod: ref, part: s.Partition(ref.UID)}
			into[ref.UID] = e
			ch.adds = append(ch.adds, e)
			continue
		}
		into[ref.UID] = existing
		var kind change
		existing.pod, kind = checkAndUpdatePod(existing.pod, ref, source)
		switch kind {
		case changeUpdate:
			ch.updates = append(ch.updates, existing)
		case changeReconcile:
			ch.reconciles = append(ch.reconciles, existing)
		case changeGraceShortened:
			ch.shortened = append(ch.shortened, existing)
		case changeDelete:
			ch.deletes = append(ch.deletes, existing)
		}
	}
}

// messages fills res with what the storage's mode publishes for ch.
func (s *Storage) messages(source string, res *Result, ch *changes) {
	emit := func(op bus.Op, es []*entry, ownerOnly bool) {
		res.Messages = append(res.Messages, group(source, op, es, s.partitions, ownerOnly)...)
	}
	switch s.mode {
	case Snapshot:
		s.snapshotsOf(source, res, ch.adds, ch.updates, ch.deletes, ch.shortened, ch.removes)
	case SnapshotAndUpdates:
		s.snapshotsOf(source, res, ch.adds, ch.removes)
		emit(bus.OpUpdate, ch.updates, false)
		emit(bus.OpDelete, append(ch.deletes, ch.shortened...), false)
	default:
		// the kubelet's order: removes, adds, updates, deletes, (the
		// first-seen marker), reconciles.
		emit(bus.OpRemove, ch.removes, false)
		emit(bus.OpAdd, ch.adds, false)
		emit(bus.OpUpdate, ch.updates, false)
		emit(bus.OpDelete, ch.deletes, false)
		emit(bus.OpDelete, ch.shortened, true)
		emit(bus.OpReconcile, ch.reconciles, true)
	}
}

// snapshotsOf appends a SET of each partition an entry of changed lives in
// (of every partition, empty ones too, when the source is first seen).
func (s *Storage) snapshotsOf(source string, res *Result, changed ...[]*entry) {
	only := map[int]bool{}
	for _, es := range changed {
		for _, e := range es {
			only[e.part] = true
		}
	}
	if res.FirstSeen {
		only = nil
	} else if len(only) == 0 {
		return
	}
	for p, pods := range s.snapshotLocked(source, only) {
		if only == nil || only[p] {
			res.Messages = append(res.Messages, Message{Source: source, Op: bus.OpSet, Partition: p, Pods: nonNil(pods)})
		}
	}
}

func nonNil(p []*corev1.Pod) []*corev1.Pod {
	if p == nil {
		return []*corev1.Pod{}
	}
	return p
}

// group splits one operation's pods by partition, in partition order, keeping
// the order of pods within a partition.
func group(source string, op bus.Op, es []*entry, partitions int, ownerOnly bool) []Message {
	if len(es) == 0 {
		return nil
	}
	byPart := map[int][]*corev1.Pod{}
	for _, e := range es {
		byPart[e.part] = append(byPart[e.part], e.pod)
	}
	out := make([]Message, 0, len(byPart))
	for p := 0; p < partitions && len(out) < len(byPart); p++ {
		if pods, ok := byPart[p]; ok {
			out = append(out, Message{Source: source, Op: op, Partition: p, Pods: pods, OwnerOnly: ownerOnly})
		}
	}
	return out
}

// filterDuplicates drops pods whose namespace/name was already reported in
// the same update (kubelet: filterInvalidPods).
func (s *Storage) filterDuplicates(source string, pods []*corev1.Pod) []*corev1.Pod {
	if len(pods) < 2 {
		return pods
	}
	names := make(map[string]bool, len(pods))
	out := pods[:0:0]
	for _, p := range pods {
		full := p.Namespace + "/" + p.Name
		if names[full] {
			if s.recorder != nil {
				s.recorder.Eventf(p, corev1.EventTypeWarning, "FailedValidation",
					"Error validating pod %s from %s due to duplicate pod name %q, ignoring", full, source, p.Name)
			}
			continue
		}
		names[full] = true
		out = append(out, p)
	}
	return out
}

// isLocalAnnotation: annotations the agent sets itself take no part in
// comparisons (kubelet: localAnnotations).
func isLocalAnnotation(k string) bool {
	return k == AnnotationSource || k == AnnotationMirror || k == AnnotationSeen
}

func annotationsEqual(existing, candidate map[string]string) bool {
	for k, v := range candidate {
		if isLocalAnnotation(k) {
			continue
		}
		if ev, ok := existing[k]; !ok || ev != v {
			return false
		}
	}
	for k := range existing {
		if isLocalAnnotation(k) {
			continue
		}
		if _, ok := candidate[k]; !ok {
			return false
		}
	}
	return true
}

// change is what a reported pod is against the stored one.
type change int

const (
	changeNone      change = iota
	changeUpdate           // spec, labels, annotations or deletion fields: UPDATE
	changeDelete           // the same with deletionTimestamp set: DELETE
	changeReconcile        // the status alone: RECONCILE
	// changeGraceShortened: only the deletion fields of a pod that was
	// already terminating changed, which is what a delete with a shorter
	// grace period does (such as the node agent's own grace-0 delete of a
	// pod that has finished). A DELETE for the owner alone: of the stages,
	// only the pod workers read the grace period (it bounds the kill); the
	// prober and statussync look only at whether deletionTimestamp is set,
	// and the first DELETE told them.
	changeGraceShortened
)

// contentEqual: the spec, labels and (non-local) annotations are the same;
// with the deletion fields, what the kubelet's podsDifferSemantically
// compares.
func contentEqual(existing, ref *corev1.Pod, source string) bool {
	return specEqual(existing, ref, source) &&
		reflect.DeepEqual(existing.Labels, ref.Labels) &&
		annotationsEqual(existing.Annotations, ref.Annotations)
}

// specEqual compares the specs. The API server raises a pod's generation
// whenever its spec changes (on every update, the ephemeral containers and
// resize subresources included; only binding, which sets the node before
// the pod is this node's, leaves it), so an API pod whose generation is
// the one held has the spec held. A file or URL manifest's generation is
// whatever its author wrote, and says nothing.
func specEqual(existing, ref *corev1.Pod, source string) bool {
	if source == SourceAPI && existing.Generation > 0 && existing.Generation == ref.Generation {
		return true
	}
	return reflect.DeepEqual(existing.Spec, ref.Spec)
}

func deletionEqual(existing, ref *corev1.Pod) bool {
	return reflect.DeepEqual(existing.DeletionTimestamp, ref.DeletionTimestamp) &&
		reflect.DeepEqual(existing.DeletionGracePeriodSeconds, ref.DeletionGracePeriodSeconds)
}

// checkAndUpdatePod folds ref into existing, returning the pod to store,
// and says what kind of change it was (kubelet: checkAndUpdatePod).
func checkAndUpdatePod(existing, ref *corev1.Pod, source string) (*corev1.Pod, change) {
	// existing is never changed in place: messages and snapshots already
	// handed out share it, so a change is a new object (a shallow copy whose
	// changed fields are replaced whole).
	sameContent := contentEqual(existing, ref, source)
	if sameContent && deletionEqual(existing, ref) {
		// kubelet: a status-only change is a reconcile, anything else is ignored.
		if !reflect.DeepEqual(existing.Status, ref.Status) {
			cp := *existing
			cp.Status = ref.Status
			return &cp, changeReconcile
		}
		return existing, changeNone
	}
	kind := changeUpdate
	switch {
	case ref.DeletionTimestamp != nil && sameContent && existing.DeletionTimestamp != nil:
		kind = changeGraceShortened
	case ref.DeletionTimestamp != nil:
		kind = changeDelete
	}
	// kubelet: the first-seen time stays the one recorded at the ADD.
	ref.Annotations[AnnotationSeen] = existing.Annotations[AnnotationSeen]

	cp := *existing
	cp.Spec = ref.Spec
	cp.Labels = ref.Labels
	cp.DeletionTimestamp = ref.DeletionTimestamp
	cp.DeletionGracePeriodSeconds = ref.DeletionGracePeriodSeconds
	cp.Generation = ref.Generation
	cp.Status = ref.Status
	cp.ResourceVersion = ref.ResourceVersion
	annotations := make(map[string]string, len(ref.Annotations)+3)
	for k, v := range ref.Annotations {
		annotations[k] = v
	}
	for _, k := range []string{AnnotationSource, AnnotationMirror, AnnotationSeen} {
		if v, ok := existing.Annotations[k]; ok {
			annotations[k] = v
		}
	}
	cp.Annotations = annotations
	return &cp, kind
}
