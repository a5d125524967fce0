package apistatus

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kjson "k8s.io/apimachinery/pkg/util/json"
)

// jsonNames are a struct's JSON member names, sorted.
func jsonNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// A member added to PodStatus (or to a merge list's element the builder
// encodes itself) must be handled before the fast path may see it.
func TestStatusPatchKnowsEveryField(t *testing.T) {
	if got := jsonNames(reflect.TypeFor[corev1.PodStatus]()); !slices.Equal(got, patchFields) {
		t.Fatalf("PodStatus members %v, the builder knows %v", got, patchFields)
	}
	full := corev1.PodCondition{Type: "T", Status: "True", ObservedGeneration: 2, Reason: "r", Message: "m",
		LastProbeTime: metav1.Unix(1, 0), LastTransitionTime: metav1.Unix(2, 0)}
	var b patchBuilder
	var keys []string
	for _, m := range conditionMembers(&b, &full) {
		keys = append(keys, m.key)
	}
	if got := jsonNames(reflect.TypeFor[corev1.PodCondition]()); !slices.Equal(got, keys) {
		t.Fatalf("PodCondition members %v, the builder writes %v", got, keys)
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[corev1.PodIP](), reflect.TypeFor[corev1.HostIP]()} {
		if got := jsonNames(typ); !slices.Equal(got, []string{"ip"}) {
			t.Fatalf("%s members %v, the builder writes [ip]", typ, got)
		}
	}
}

// roundTrip is what the reflective path writes for a value: its JSON
// decoded into interface{} as strategicpatch decodes it, then marshalled.
func roundTrip(t testing.TB, v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m any
	if err := kjson.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCanonicalMatchesRoundTrip(t *testing.T) {
	g := statusGen{randChooser{rand.New(rand.NewPCG(3, 4))}}
	var c canonicalizer
	for range 2000 {
		s := g.status()
		for _, v := range []any{s.ContainerStatuses, s.Conditions, s.Resources, s.AllocatedResources, s.NodeAllocatableResourceClaimStatuses, s} {
			raw, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := c.append(nil, raw)
			if !ok {
				continue
			}
			if want := roundTrip(t, v); !bytes.Equal(got, want) && !bytes.Contains(got, []byte(`\ufffd`)) {
				t.Fatalf("canonical\n%s\nround trip\n%s", got, want)
			}
		}
	}
	for _, in := range []string{`1.5`, `1e3`, `18446744073709551615`, `{"a":1,"a":2}`, `{"\u003c":1}`, `[1,`, `{"a"}`, `nul`} {
		if out, ok := c.append(nil, []byte(in)); ok {
			t.Errorf("%s: canonical %s, want a refusal", in, out)
		}
	}
}

// checkPatch compares the fast patch with the reflective one; ok tells
// whether the fast path answered.
func checkPatch(t testing.TB, uid types.UID, old, next corev1.PodStatus) (ok bool) {
	t.Helper()
	want, err := statusPatchReflective(uid, old, next)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := fastStatusPatch(uid, &old, &next)
	if ok && !bytes.Equal(got, want) {
		o, _ := json.Marshal(old)
		n, _ := json.Marshal(next)
		t.Fatalf("uid %q\nold  %s\nnext %s\nfast       %s\nreflective %s", uid, o, n, got, want)
	}
	patch, unchanged, err := StatusPatch(uid, old, next)
	if err != nil || !bytes.Equal(patch, want) {
		t.Fatalf("StatusPatch %s, %v; want %s", patch, err, want)
	}
	if only := `{"metadata":{"uid":"` + string(uid) + `"}}`; uid == "u1" && unchanged != (string(want) == only) {
		t.Fatalf("unchanged %v for %s", unchanged, want)
	}
	return ok
}

// The fast path writes the reflective path's bytes for every pair of a
// fixed random sequence, and answers for most of them.
func TestStatusPatchMatchesReflective(t *testing.T) {
	g := statusGen{randChooser{rand.New(rand.NewPCG(1, 2))}}
	n := 20000
	if testing.Short() {
		n = 2000
	}
	fast := 0
	for range n {
		uid, old, next := g.pair()
		if checkPatch(t, uid, old, next) {
			fast++
		}
	}
	t.Logf("fast path: %d of %d pairs", fast, n)
	if fast < n*8/10 {
		t.Fatalf("fast path answered %d of %d pairs, want at least 80%%", fast, n)
	}
}

// The common transitions never fall back.
func TestStatusPatchTransitionsTakeFastPath(t *testing.T) {
	pending, running, succeeded := benchStatuses()
	noIPs := *running.DeepCopy()
	noIPs.PodIPs, noIPs.PodIP = nil, ""
	reordered := *running.DeepCopy()
	slices.Reverse(reordered.Conditions)
	fewer := *running.DeepCopy()
	fewer.Conditions = fewer.Conditions[1:]
	gate := *running.DeepCopy()
	gate.Conditions = append(gate.Conditions, corev1.PodCondition{Type: "example.com/gate", Status: corev1.ConditionTrue})
	empty := corev1.PodStatus{Conditions: []corev1.PodCondition{}, ContainerStatuses: []corev1.ContainerStatus{}}
	cases := []struct {
		name      string
		old, next corev1.PodStatus
	}{
		{"pending to running", pending, running},
		{"running to succeeded", running, succeeded},
		{"pending to succeeded", pending, succeeded},
		{"same", running, *running.DeepCopy()},
		{"from nothing", corev1.PodStatus{}, pending},
		{"to nothing", pending, corev1.PodStatus{}},
		{"empty lists", empty, corev1.PodStatus{}},
		{"pod IPs dropped", running, noIPs},
		{"pod IPs added", noIPs, running},
		{"conditions reordered", running, reordered},
		{"condition removed", running, fewer},
		{"condition added", running, gate},
	}
	for _, c := range cases {
		for _, uid := range []types.UID{"u1", ""} {
			if !checkPatch(t, uid, c.old, c.next) {
				t.Errorf("%s (uid %q): fell back", c.name, uid)
			}
		}
	}
	_, unchanged, err := StatusPatch("u1", running, *running.DeepCopy())
	if err != nil || !unchanged {
		t.Fatalf("same status: unchanged %v, %v", unchanged, err)
	}
}

func FuzzStatusPatch(f *testing.F) {
	for _, seed := range []string{"", "\x00", "\x01\x02\x03\x04\x05\x06\x07\x08", strings.Repeat("\x07\x03", 64), strings.Repeat("\xff\x10\x81", 100)} {
		f.Add([]byte(seed))
	}
	g := statusGen{randChooser{rand.New(rand.NewPCG(5, 6))}}
	for range 20 {
		seed := make([]byte, 256)
		for i := range seed {
			seed[i] = byte(g.pick(256))
		}
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g := statusGen{&byteChooser{data}}
		uid, old, next := g.pair()
		checkPatch(t, uid, old, next)
	})
}

// benchStatuses are one pod's statuses when it is created, when its
// container runs and when it has exited, as statussync writes them.
func benchStatuses() (pending, running, succeeded corev1.PodStatus) {
	t0 := metav1.Unix(1700000000, 0)
	t1 := metav1.Unix(1700000003, 0)
	t2 := metav1.Unix(1700000060, 0)
	conds := func(ready corev1.ConditionStatus, at metav1.Time, reason string) []corev1.PodCondition {
		c := []corev1.PodCondition{
			{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: t1},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: t0},
			{Type: corev1.PodReady, Status: ready, LastTransitionTime: at, Reason: reason},
			{Type: corev1.ContainersReady, Status: ready, LastTransitionTime: at, Reason: reason},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t0},
		}
		if reason != "" {
			c[2].Message = "containers with unready status: [app]"
			c[3].Message = c[2].Message
		}
		return c
	}
	image, imageID := "registry.k8s.io/pause:3.10", "registry.k8s.io/pause@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a"
	no, yes := false, true
	pending = corev1.PodStatus{
		Phase:      corev1.PodPending,
		Conditions: conds(corev1.ConditionFalse, t0, ReasonContainersNotReady),
		HostIP:     "10.1.0.4",
		HostIPs:    []corev1.HostIP{{IP: "10.1.0.4"}},
		StartTime:  &t0,
		QOSClass:   corev1.PodQOSBestEffort,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name:    "app",
			State:   corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: ReasonContainerCreating}},
			Image:   image,
			Started: &no,
		}},
	}
	pending.Conditions[0].Status = corev1.ConditionFalse
	running = *pending.DeepCopy()
	running.Phase = corev1.PodRunning
	running.Conditions = conds(corev1.ConditionTrue, t1, "")
	running.PodIP = "10.244.1.17"
	running.PodIPs = []corev1.PodIP{{IP: "10.244.1.17"}}
	running.ContainerStatuses = []corev1.ContainerStatus{{
		Name:        "app",
		State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t1}},
		Ready:       true,
		Image:       image,
		ImageID:     imageID,
		ContainerID: "containerd://4f1b0d6c9e7a",
		Started:     &yes,
	}}
	succeeded = *running.DeepCopy()
	succeeded.Phase = corev1.PodSucceeded
	succeeded.Conditions = conds(corev1.ConditionFalse, t2, ReasonPodCompleted)
	succeeded.Conditions[0].Status, succeeded.Conditions[0].LastTransitionTime = corev1.ConditionFalse, t2
	succeeded.ContainerStatuses[0].Ready = false
	succeeded.ContainerStatuses[0].Started = &no
	succeeded.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		Reason: "Completed", StartedAt: t1, FinishedAt: t2, ContainerID: "containerd://4f1b0d6c9e7a",
	}}
	return pending, running, succeeded
}

func BenchmarkStatusPatch(b *testing.B) {
	pending, running, succeeded := benchStatuses()
	for _, tr := range []struct {
		name      string
		old, next corev1.PodStatus
	}{{"PendingToRunning", pending, running}, {"RunningToSucceeded", running, succeeded}} {
		b.Run(tr.name+"/reflective", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := statusPatchReflective("2d0b3c6e-5d6f-4d7e-9a4b-1f2e3d4c5b6a", tr.old, tr.next); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tr.name+"/fast", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := fastStatusPatch("2d0b3c6e-5d6f-4d7e-9a4b-1f2e3d4c5b6a", &tr.old, &tr.next); !ok {
					b.Fatal("fell back")
				}
			}
		})
	}
}

// chooser drives statusGen: a choice among n.
type chooser interface{ intn(n int) int }

type randChooser struct{ r *rand.Rand }

func (c randChooser) intn(n int) int { return c.r.IntN(n) }

// byteChooser takes a fuzz input's bytes one a choice, then zeros.
type byteChooser struct{ data []byte }

func (c *byteChooser) intn(n int) int {
	if len(c.data) == 0 {
		return 0
	}
	b := c.data[0]
	c.data = c.data[1:]
	return int(b) % n
}

// statusGen makes statuses and pairs of them: random ones, and ones
// derived from another by the changes statussync makes (and some it does
// not), with the JSON corners: nil and empty, zero times, sub-second times
// and other zones, HTML characters, bad UTF-8, repeated merge keys.
type statusGen struct{ c chooser }

func (g statusGen) pick(n int) int { return g.c.intn(n) }

func (g statusGen) chance(percent int) bool { return g.pick(100) < percent }

func oneOf[T any](g statusGen, list ...T) T { return list[g.pick(len(list))] }

var genBase = time.Unix(1700000000, 0)

func (g statusGen) text() string {
	if g.chance(2) {
		return oneOf(g, "bad \xff utf-8", "\xfe", "a\u2028b", "\ufffd")
	}
	return oneOf(g, "", "", "a", "Ready", "ContainersNotReady", "x <y> & z", `quote " and \`, "line\nbreak\ttab",
		"ünïcödé", "containers with unready status: [app]", strings.Repeat("long ", 20))
}

func (g statusGen) time() metav1.Time {
	switch g.pick(10) {
	case 0:
		return metav1.Time{}
	case 1:
		return metav1.NewTime(genBase.Add(time.Duration(g.pick(4))*time.Second + time.Duration(g.pick(1e9))))
	case 2:
		return metav1.NewTime(genBase.Add(time.Duration(g.pick(4)) * time.Second).In(time.FixedZone("X", 3600)))
	case 3:
		return metav1.NewTime(time.Time{}.In(time.FixedZone("Y", -7200)))
	}
	return metav1.NewTime(genBase.Add(time.Duration(g.pick(4)) * time.Second))
}

func (g statusGen) timePtr() *metav1.Time {
	if g.chance(25) {
		return nil
	}
	t := g.time()
	return &t
}

var genConditionTypes = []corev1.PodConditionType{
	corev1.PodScheduled, corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady,
	corev1.PodReady, corev1.DisruptionTarget, "example.com/gate", "",
}

func (g statusGen) condition(t corev1.PodConditionType) corev1.PodCondition {
	c := corev1.PodCondition{
		Type:               t,
		Status:             oneOf(g, corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown, ""),
		LastTransitionTime: g.time(),
		Reason:             g.text(),
		Message:            g.text(),
		ObservedGeneration: oneOf(g, int64(0), 0, 1, 2, 1<<60, -3),
	}
	if g.chance(30) {
		c.LastProbeTime = g.time()
	}
	return c
}

func (g statusGen) conditions() []corev1.PodCondition {
	switch g.pick(8) {
	case 0:
		return nil
	case 1:
		return []corev1.PodCondition{}
	}
	var out []corev1.PodCondition
	for _, t := range genConditionTypes {
		if g.chance(55) {
			out = append(out, g.condition(t))
		}
	}
	g.shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	if len(out) > 0 && g.chance(3) {
		out = append(out, g.condition(out[0].Type))
	}
	return out
}

func (g statusGen) shuffle(n int, swap func(i, j int)) {
	for i := n - 1; i > 0; i-- {
		swap(i, g.pick(i+1))
	}
}

var genIPs = []string{"10.0.0.1", "10.0.0.2", "fd00::1", "fd00::2"}

func (g statusGen) ips() []string {
	switch g.pick(6) {
	case 0:
		return nil
	case 1:
		return []string{}
	}
	var out []string
	for _, ip := range genIPs {
		if g.chance(40) {
			out = append(out, ip)
		}
	}
	g.shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	if len(out) > 0 && g.chance(3) {
		out = append(out, out[0])
	}
	if len(out) > 0 && g.chance(1) {
		out[0] = "\xff"
	}
	return out
}

func podIPs(ips []string) []corev1.PodIP {
	if ips == nil {
		return nil
	}
	out := make([]corev1.PodIP, 0, len(ips))
	for _, ip := range ips {
		out = append(out, corev1.PodIP{IP: ip})
	}
	return out
}

func hostIPs(ips []string) []corev1.HostIP {
	if ips == nil {
		return nil
	}
	out := make([]corev1.HostIP, 0, len(ips))
	for _, ip := range ips {
		out = append(out, corev1.HostIP{IP: ip})
	}
	return out
}

func (g statusGen) resources() corev1.ResourceList {
	switch g.pick(4) {
	case 0:
		return nil
	case 1:
		return corev1.ResourceList{}
	}
	r := corev1.ResourceList{}
	if g.chance(70) {
		r[corev1.ResourceCPU] = resource.MustParse(oneOf(g, "100m", "1", "1000m", "2"))
	}
	if g.chance(50) {
		r[corev1.ResourceMemory] = resource.MustParse(oneOf(g, "64Mi", "1Gi", "1073741824"))
	}
	return r
}

func (g statusGen) requirements() *corev1.ResourceRequirements {
	if g.chance(70) {
		return nil
	}
	r := &corev1.ResourceRequirements{Limits: g.resources(), Requests: g.resources()}
	if g.chance(20) {
		r.Claims = []corev1.ResourceClaim{{Name: "gpu", Request: oneOf(g, "", "r")}}
	}
	return r
}

func (g statusGen) state() corev1.ContainerState {
	switch g.pick(5) {
	case 0:
		return corev1.ContainerState{}
	case 1:
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: oneOf(g, "", ReasonContainerCreating, ReasonPodInitializing), Message: g.text()}}
	case 2, 3:
		return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: g.time()}}
	}
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: oneOf(g, int32(0), 1, 137, -1), Signal: oneOf(g, int32(0), 9), Reason: oneOf(g, "", "Completed", "Error", "OOMKilled"),
		Message: g.text(), StartedAt: g.time(), FinishedAt: g.time(), ContainerID: oneOf(g, "", "containerd://1"),
	}}
}

func (g statusGen) containerStatus(name string) corev1.ContainerStatus {
	s := corev1.ContainerStatus{
		Name:         name,
		State:        g.state(),
		Ready:        g.chance(50),
		RestartCount: oneOf(g, int32(0), 0, 1, 5),
		Image:        oneOf(g, "", "busybox", "registry.k8s.io/pause:3.10"),
		ImageID:      oneOf(g, "", "sha256:abc"),
		ContainerID:  oneOf(g, "", "containerd://1", "containerd://2"),
	}
	if g.chance(30) {
		s.LastTerminationState = g.state()
	}
	if g.chance(60) {
		started := g.chance(50)
		s.Started = &started
	}
	if g.chance(15) {
		s.AllocatedResources = g.resources()
		s.Resources = g.requirements()
	}
	if g.chance(10) {
		s.VolumeMounts = []corev1.VolumeMountStatus{{Name: "v", MountPath: "/data", ReadOnly: g.chance(50)}}
	}
	if g.chance(10) {
		s.User = &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: 1000, GID: 1000, SupplementalGroups: []int64{oneOf(g, int64(1), 1<<40)}}}
	}
	if g.chance(5) {
		sig := corev1.SIGTERM
		s.StopSignal = &sig
	}
	return s
}

func (g statusGen) containerStatuses(names ...string) []corev1.ContainerStatus {
	switch g.pick(6) {
	case 0:
		return nil
	case 1:
		return []corev1.ContainerStatus{}
	}
	var out []corev1.ContainerStatus
	for _, n := range names {
		if g.chance(70) {
			out = append(out, g.containerStatus(n))
		}
	}
	return out
}

func (g statusGen) status() corev1.PodStatus {
	s := corev1.PodStatus{
		Phase:      oneOf(g, corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown, ""),
		Conditions: g.conditions(),
		Message:    g.text(),
		Reason:     oneOf(g, "", "", "Evicted", "NodeLost", "UnexpectedAdmissionError"),
		HostIP:     oneOf(g, append([]string{"", ""}, genIPs...)...),
		HostIPs:    hostIPs(g.ips()),
		PodIP:      oneOf(g, append([]string{"", ""}, genIPs...)...),
		PodIPs:     podIPs(g.ips()),
		StartTime:  g.timePtr(),
		QOSClass:   oneOf(g, corev1.PodQOSBestEffort, corev1.PodQOSBurstable, corev1.PodQOSGuaranteed, ""),

		InitContainerStatuses: g.containerStatuses("init"),
		ContainerStatuses:     g.containerStatuses("a", "b", "c"),
	}
	if g.chance(10) {
		s.NominatedNodeName = oneOf(g, "", "node-1")
	}
	if g.chance(20) {
		s.ObservedGeneration = oneOf(g, int64(0), 1, 2, 1<<62)
	}
	if g.chance(10) {
		s.EphemeralContainerStatuses = g.containerStatuses("debug")
	}
	if g.chance(10) {
		s.Resize = oneOf(g, corev1.PodResizeStatusDeferred, corev1.PodResizeStatusInProgress, "")
	}
	if g.chance(10) {
		s.ResourceClaimStatuses = g.claimStatuses()
	}
	if g.chance(5) {
		s.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{
			ResourceClaimName: oneOf(g, "", "claim"),
			RequestMappings:   []corev1.ContainerExtendedResourceRequest{{ContainerName: "a", ResourceName: "example.com/gpu", RequestName: "r"}},
		}
	}
	if g.chance(10) {
		s.AllocatedResources = g.resources()
	}
	if g.chance(10) {
		s.Resources = g.requirements()
	}
	if g.chance(5) {
		s.NodeAllocatableResourceClaimStatuses = []corev1.NodeAllocatableResourceClaimStatus{{
			ResourceClaimName: "claim", Containers: []string{"a"}, Resources: g.resources(),
		}}
	}
	return s
}

func (g statusGen) claimStatuses() []corev1.PodResourceClaimStatus {
	if g.chance(20) {
		return []corev1.PodResourceClaimStatus{}
	}
	name := oneOf(g, "", "claim-1", "claim-2")
	out := []corev1.PodResourceClaimStatus{{Name: "c1", ResourceClaimName: &name}}
	if g.chance(50) {
		out = append(out, corev1.PodResourceClaimStatus{Name: "c2"})
	}
	return out
}

// mutate makes a few changes to a copy of s.
func (g statusGen) mutate(s corev1.PodStatus) corev1.PodStatus {
	s = *s.DeepCopy()
	for range 1 + g.pick(4) {
		switch g.pick(25) {
		case 0:
			s.Phase = oneOf(g, corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, "")
		case 1, 2, 3:
			if len(s.Conditions) > 0 {
				c := &s.Conditions[g.pick(len(s.Conditions))]
				c.Status = oneOf(g, corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown)
				c.LastTransitionTime = g.time()
				if g.chance(50) {
					c.Reason, c.Message = g.text(), g.text()
				}
				if g.chance(20) {
					c.LastProbeTime = g.time()
				}
				if g.chance(20) {
					c.ObservedGeneration++
				}
			}
		case 4:
			s.Conditions = append(s.Conditions, g.condition(oneOf(g, genConditionTypes...)))
		case 5:
			if i := len(s.Conditions); i > 0 {
				j := g.pick(i)
				s.Conditions = append(s.Conditions[:j:j], s.Conditions[j+1:]...)
			}
		case 6:
			g.shuffle(len(s.Conditions), func(i, j int) { s.Conditions[i], s.Conditions[j] = s.Conditions[j], s.Conditions[i] })
		case 7:
			s.Conditions = oneOf(g, []corev1.PodCondition(nil), []corev1.PodCondition{}, g.conditions())
		case 8:
			s.PodIPs = podIPs(g.ips())
			if len(s.PodIPs) > 0 {
				s.PodIP = s.PodIPs[0].IP
			}
		case 9:
			s.HostIPs = hostIPs(g.ips())
			s.HostIP = oneOf(g, "", "10.1.0.4")
		case 10:
			g.shuffle(len(s.PodIPs), func(i, j int) { s.PodIPs[i], s.PodIPs[j] = s.PodIPs[j], s.PodIPs[i] })
			g.shuffle(len(s.HostIPs), func(i, j int) { s.HostIPs[i], s.HostIPs[j] = s.HostIPs[j], s.HostIPs[i] })
		case 11, 12, 13:
			if len(s.ContainerStatuses) > 0 {
				c := &s.ContainerStatuses[g.pick(len(s.ContainerStatuses))]
				switch g.pick(5) {
				case 0:
					c.State = g.state()
				case 1:
					c.Ready = !c.Ready
				case 2:
					c.RestartCount++
					c.LastTerminationState = c.State
				case 3:
					c.ContainerID = oneOf(g, "", "containerd://3")
				case 4:
					if c.State.Running != nil {
						c.State.Running.StartedAt = g.time()
					}
				}
			} else {
				s.ContainerStatuses = g.containerStatuses("a", "b")
			}
		case 14:
			s.InitContainerStatuses = g.containerStatuses("init", "init2")
		case 15:
			s.StartTime = g.timePtr()
		case 16:
			s.Message, s.Reason = g.text(), oneOf(g, "", "Evicted")
		case 17:
			s.QOSClass = oneOf(g, corev1.PodQOSBestEffort, corev1.PodQOSBurstable, "")
			s.ObservedGeneration = oneOf(g, int64(0), 1, 3)
		case 18:
			// nil and empty: the same JSON
			if s.ContainerStatuses == nil {
				s.ContainerStatuses = []corev1.ContainerStatus{}
			} else if len(s.ContainerStatuses) == 0 {
				s.ContainerStatuses = nil
			}
			if s.Conditions == nil {
				s.Conditions = []corev1.PodCondition{}
			}
			if len(s.PodIPs) == 0 {
				s.PodIPs = oneOf(g, []corev1.PodIP(nil), []corev1.PodIP{})
			}
		case 19:
			// the same second: the same JSON
			for i := range s.Conditions {
				c := &s.Conditions[i]
				if !c.LastTransitionTime.IsZero() {
					c.LastTransitionTime = metav1.NewTime(c.LastTransitionTime.Truncate(time.Second).Add(time.Duration(g.pick(1e9))).In(time.FixedZone("Z", 60)))
				}
			}
			if s.StartTime != nil && !s.StartTime.IsZero() && g.chance(50) {
				t := metav1.NewTime(s.StartTime.Truncate(time.Second).Add(time.Duration(g.pick(1e9))))
				s.StartTime = &t
			}
		case 20:
			s.AllocatedResources = g.resources()
			s.Resources = g.requirements()
		case 21:
			s.ResourceClaimStatuses = oneOf(g, []corev1.PodResourceClaimStatus(nil), g.claimStatuses())
		case 22:
			s.EphemeralContainerStatuses = g.containerStatuses("debug")
			s.NominatedNodeName = oneOf(g, "", "node-2")
			s.Resize = oneOf(g, corev1.PodResizeStatusInfeasible, "")
		case 23:
			if s.ExtendedResourceClaimStatus != nil {
				s.ExtendedResourceClaimStatus = nil
			} else {
				s.NodeAllocatableResourceClaimStatuses = nil
			}
		case 24:
			// a bad byte and the rune JSON writes for it: the same after
			// the round trip
			swap := func(s string) string {
				if utf8.ValidString(s) {
					return strings.ReplaceAll(s, "\ufffd", "\xff")
				}
				return strings.ToValidUTF8(s, "\ufffd")
			}
			s.Message = swap(s.Message)
			for i := range s.Conditions {
				s.Conditions[i].Message = swap(s.Conditions[i].Message)
			}
			for i := range s.ContainerStatuses {
				if w := s.ContainerStatuses[i].State.Waiting; w != nil {
					w.Message = swap(w.Message)
				}
			}
		}
	}
	return s
}

// pair is a UID and two statuses: mostly the second derived from the
// first, sometimes two unrelated ones.
func (g statusGen) pair() (types.UID, corev1.PodStatus, corev1.PodStatus) {
	uid := oneOf[types.UID](g, "u1", "u1", "u1", "", `a"b<c>`)
	old := g.status()
	if g.chance(15) {
		return uid, old, g.status()
	}
	return uid, old, g.mutate(old)
}
