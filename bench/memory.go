package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// memSampler samples the proportional (PSS) and resident (RSS) set sizes
// of an agent's processes from /proc/<pid>/smaps_rollup while a case runs.
// PSS shares each page among the processes that map it, so five stages
// linking the same libraries count their text once: its sum is the honest
// footprint of a set of processes, where summed RSS counts shared pages
// once per process.
type memSampler struct {
	pids  []int
	names []string
	every time.Duration

	mu               sync.Mutex
	pss, rss         memoryFigures // the peaks of the sums, and each process's own peak
	samples, skipped int

	stop func()
	done chan struct{}
}

// sampleMemory starts sampling pids (named names) every interval.
func sampleMemory(pids []int, names []string, every time.Duration) *memSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &memSampler{pids: pids, names: names, every: every, stop: cancel, done: make(chan struct{}),
		pss: memoryFigures{each: map[string]int64{}}, rss: memoryFigures{each: map[string]int64{}}}
	go s.run(ctx)
	return s
}

func (s *memSampler) run(ctx context.Context) {
	defer close(s.done)
	wait.NonSlidingUntilWithContext(ctx, func(context.Context) { s.sample() }, s.every)
}

// sample reads every process once; a sum counts only when every process
// answered, so that a process exiting does not lower a peak.
func (s *memSampler) sample() {
	var pss, rss int64
	each := make([][2]int64, len(s.pids))
	for i, pid := range s.pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			s.mu.Lock()
			s.skipped++
			s.mu.Unlock()
			return
		}
		kib, err := statusKiB(string(data), "Pss", "Rss")
		if err != nil {
			s.mu.Lock()
			s.skipped++
			s.mu.Unlock()
			return
		}
		each[i] = [2]int64{kib["Pss"] * 1024, kib["Rss"] * 1024}
		pss += each[i][0]
		rss += each[i][1]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	s.pss.total = max(s.pss.total, pss)
	s.rss.total = max(s.rss.total, rss)
	for i, name := range s.names {
		s.pss.each[name] = max(s.pss.each[name], each[i][0])
		s.rss.each[name] = max(s.rss.each[name], each[i][1])
	}
}

// end stops the sampling, takes a last sample and returns the peaks: of
// the summed PSS and RSS, and each process's own.
func (s *memSampler) end() (pss, rss memoryFigures, err error) {
	s.stop()
	<-s.done
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.samples == 0 {
		return pss, rss, fmt.Errorf("no memory sample of the agent's processes (%d failed)", s.skipped)
	}
	return s.pss, s.rss, nil
}
