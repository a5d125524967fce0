package devices

import (
	"encoding/json"
	"errors"
	"os"

	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/atomicfile"
)

// checkpoint is what survives a restart (kubelet: the device manager's
// checkpoint): the registered resources and their devices, and every
// container's allocation with the plugin's answer.
type checkpoint struct {
	Registered map[string][]string `json:"registered"`
	Pods       podAllocations      `json:"pods"`
}

// saveLocked writes the checkpoint (atomically: a file beside it, synced,
// renamed). Called with m.mu held.
func (m *Manager) saveLocked() {
	if m.cfg.Checkpoint == "" {
		return
	}
	cp := checkpoint{Registered: map[string][]string{}, Pods: m.pods}
	for name, r := range m.res {
		ids := []string{}
		for id := range r.devices {
			ids = append(ids, id)
		}
		cp.Registered[name] = ids
	}
	data, err := json.Marshal(cp)
	if err == nil {
		err = atomicfile.Write(m.cfg.Checkpoint, data)
	}
	if err != nil {
		m.log.Error("cannot write the device checkpoint", zap.String("path", m.cfg.Checkpoint), zap.Error(err))
	}
}

// load reads the checkpoint: the allocations as they were, and each
// registered resource with no devices and its plugin gone as of now, so
// that it keeps its place for the grace period while its plugin registers
// again (kubelet: readCheckpoint).
func (m *Manager) load() {
	if m.cfg.Checkpoint == "" {
		return
	}
	data, err := os.ReadFile(m.cfg.Checkpoint)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var cp checkpoint
	if err == nil {
		err = json.Unmarshal(data, &cp)
	}
	if err != nil {
		m.log.Error("cannot read the device checkpoint, starting without it", zap.String("path", m.cfg.Checkpoint), zap.Error(err))
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cp.Pods != nil {
		m.pods = cp.Pods
	}
	for name := range cp.Registered {
		m.res[name] = &resourceState{devices: map[string]bool{}, listed: true, stopped: m.now()}
	}
	m.log.Info("device checkpoint read", zap.Int("resources", len(cp.Registered)), zap.Int("pods", len(m.pods)))
}
