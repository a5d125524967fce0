package devices

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"go.uber.org/zap"
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
		err = writeAtomic(m.cfg.Checkpoint, data)
	}
	if err != nil {
		m.log.Error("cannot write the device checkpoint", zap.String("path", m.cfg.Checkpoint), zap.Error(err))
	}
}

func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
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
