package main

import (
	"context"
	"fmt"
	"time"

	"github.com/splitlet/splitlet/libs/testenv"
)

// realMeter is what a real case measures over its window: the agent's
// CPU (snapshots) and PSS (sampled), containerd's and its shims' CPU.
type realMeter struct {
	run     *agentRun
	atStart cpuSnapshot
	rt      *runtimeMeter
}

func startRealMeter(run *agentRun, cd *testenv.Containerd) (*realMeter, error) {
	at, err := snapshotCPU(run.pids(), run.names)
	if err != nil {
		return nil, err
	}
	rt, err := startRuntimeMeter(cd.PID(), cd.Address, 250*time.Millisecond)
	if err != nil {
		return nil, err
	}
	run.mem = sampleMemory(run.pids(), run.names, memSampleEvery)
	return &realMeter{run: run, atStart: at, rt: rt}, nil
}

// agentCPU is the agent's CPU since the window began.
func (m *realMeter) agentCPU() (float64, map[string]float64, error) {
	now, err := snapshotCPU(m.run.pids(), m.run.names)
	if err != nil {
		return 0, nil, err
	}
	sum, each := now.since(m.atStart)
	return sum, each, nil
}

// end closes the window: the agent's CPU, summed and each, containerd's
// and the shims', the agent's peak PSS, summed and each.
func (m *realMeter) end() (agent float64, each map[string]float64, containerd, shims float64, pss memoryFigures, err error) {
	if agent, each, err = m.agentCPU(); err != nil {
		return
	}
	if containerd, shims, err = m.rt.end(); err != nil {
		return
	}
	pss, _, err = m.run.mem.end()
	return
}

// runRealCase measures one agent on one variant and pod count: the pods
// created in parallel, all Ready, one DeleteCollection, all gone, every
// sandbox stopped and removed.
func runRealCase(ctx context.Context, env *benchEnv, cd *testenv.Containerd, a realAgent, o realOptions, variant string, n int) (*realCaseResult, error) {
	label := fmt.Sprintf("real-%s-%s-%d", a.name, variant, n)
	s, err := setUpReal(ctx, env, cd, a, o, label, n)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	res := &realCaseResult{Agent: a.name, Variant: variant, Pods: n}
	m, err := startRealMeter(s.run, cd)
	if err != nil {
		return nil, err
	}
	before, err := writeCounts(ctx, s.cs)
	if err != nil {
		return nil, err
	}
	beforeEach, err := writesByResource(ctx, s.cs)
	if err != nil {
		return nil, err
	}
	// With -profiles: the Splitlet processes' CPU profiles from the first
	// create, for -cpu-profile (the kubelet's needs its API's credentials).
	profiled := profileCPU(env, s.run, label)
	if err := realCreate(ctx, s, variant, n, res, m); err != nil {
		return nil, err
	}
	ready, err := writeCounts(ctx, s.cs)
	if err != nil {
		return nil, err
	}
	res.PodWritesPerPod = (ready.pods - before.pods - float64(n)) / float64(n)
	res.AllWritesPerPod = (ready.all - before.all - float64(n)) / float64(n)
	if err := <-profiled; err != nil {
		return nil, fmt.Errorf("CPU profiles: %w", err)
	}
	// The deletion's CPU profile, from the DeleteCollection (prefix
	// <label>-delete), as the sim case takes one.
	deleteProfiled := profileCPU(env, s.run, label+"-delete")
	if err := realDelete(ctx, s, n, o.teardownWait, res, m); err != nil {
		return nil, err
	}
	gone, err := writeCounts(ctx, s.cs)
	if err != nil {
		return nil, err
	}
	res.AllWritesPerPodCycle = (gone.all - before.all - float64(n) - 1) / float64(n)
	goneEach, err := writesByResource(ctx, s.cs)
	if err != nil {
		return nil, err
	}
	res.WritesPerPodEach = writesDelta(beforeEach, goneEach, float64(n))
	var pss memoryFigures
	if res.AgentCPUSec, res.AgentCPUEach, res.ContainerdCPUSec, res.ShimsCPUSec, pss, err = m.end(); err != nil {
		return nil, err
	}
	res.PeakPSSBytes, res.PeakPSSEach = pss.total, pss.each
	if err := <-deleteProfiled; err != nil {
		return nil, fmt.Errorf("CPU profiles: %w", err)
	}
	return res, nil
}

// realCreate creates the pods, waits for every one Ready and fills in the
// latencies and the agent's CPU until then.
func realCreate(ctx context.Context, s *realSetup, variant string, n int, res *realCaseResult, m *realMeter) error {
	created := make([]time.Time, n)
	start := time.Now()
	if err := s.createPods(ctx, variant, n, created); err != nil {
		return err
	}
	if err := s.waitReady(ctx, n); err != nil {
		return err
	}
	var err error
	if res.CPUToReadySec, _, err = m.agentCPU(); err != nil {
		return err
	}
	if res.PSSPartsAtReady, err = pssParts(s.run.pids(), s.run.names); err != nil {
		return err
	}
	// With -profiles: the Splitlet processes' heap profiles, all Ready.
	if err := saveHeapProfiles(s.e.bench, s.run, s.label); err != nil {
		return err
	}
	lat, last := s.tr.latencies(s.label, created, start)
	res.AllReadySec = last.Sub(start).Seconds()
	res.P50Ms, res.P99Ms, res.MaxMs = pct(lat, 50), pct(lat, 99), lat[len(lat)-1]
	return nil
}

// realDelete deletes the pods in one DeleteCollection and waits until
// they are gone from the API and their sandboxes from containerd.
func realDelete(ctx context.Context, s *realSetup, n int, wait time.Duration, res *realCaseResult, m *realMeter) error {
	tr, label := s.tr, s.label
	uids, err := podUIDs(ctx, s.cs, label)
	if err != nil {
		return err
	}
	delStart := time.Now()
	if err := deleteCollection(ctx, s.cs, "bench-run="+label); err != nil {
		return err
	}
	if err := waitFor(ctx, 10*time.Minute, s.run, fmt.Sprintf("%d pods gone", n), func() bool { return tr.gone.Load() >= int64(n) }); err != nil {
		return fmt.Errorf("%w: %d of %d gone (logs in %s)", err, tr.gone.Load(), n, s.run.dir)
	}
	tr.mu.Lock()
	lastGone := delStart
	for _, at := range tr.goneAt {
		lastGone = later(lastGone, at)
	}
	tr.mu.Unlock()
	res.AllGoneSec = lastGone.Sub(delStart).Seconds()
	res.SandboxesStoppedSec, res.SandboxesRemovedSec, err = teardownTimes(ctx, s.e.cd.Endpoint, uids, delStart, wait, func() (err error) {
		res.CPUToStoppedSec, _, err = m.agentCPU()
		return err
	})
	return err
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// runRealIdle runs o.idlePods pods on the agent, all Ready, and measures
// it for o.idleDuration with nothing changing.
func runRealIdle(ctx context.Context, env *benchEnv, cd *testenv.Containerd, a realAgent, o realOptions) (*realIdleResult, error) {
	label := "real-" + a.name + "-idle"
	s, err := setUpReal(ctx, env, cd, a, o, label, o.idlePods)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	n := o.idlePods
	if err := s.createPods(ctx, variantPlain, n, make([]time.Time, n)); err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx, n); err != nil {
		return nil, err
	}
	// What follows the starts (status writes, the last probes) settles
	// before the idle window opens.
	if err := sleepCtx(ctx, o.settle); err != nil {
		return nil, err
	}
	return measureIdle(ctx, s, cd, a.name, n, o.idleDuration)
}

// measureIdle measures the agent over d with its pods running.
func measureIdle(ctx context.Context, s *realSetup, cd *testenv.Containerd, agent string, n int, d time.Duration) (*realIdleResult, error) {
	before, err := writesByResource(ctx, s.cs)
	if err != nil {
		return nil, err
	}
	m, err := startRealMeter(s.run, cd)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := waitFor(ctx, d+time.Minute, s.run, "the idle window", func() bool { return time.Since(start) >= d }); err != nil {
		return nil, err
	}
	parts, err := pssParts(s.run.pids(), s.run.names)
	if err != nil {
		return nil, err
	}
	agentCPU, each, containerd, shims, pss, err := m.end()
	if err != nil {
		return nil, err
	}
	minutes := time.Since(start).Minutes()
	after, err := writesByResource(ctx, s.cs)
	if err != nil {
		return nil, err
	}
	res := &realIdleResult{Agent: agent, Pods: n, Minutes: minutes,
		AgentCPUPerMin: agentCPU / minutes, AgentCPUEach: each, RuntimeCPUPerMin: (containerd + shims) / minutes,
		PeakPSSBytes: pss.total, PSSParts: parts, WritesPerMinEach: writesDelta(before, after, minutes)}
	for _, v := range res.WritesPerMinEach {
		res.WritesPerMin += v
	}
	return res, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
