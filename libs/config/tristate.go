package config

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Switch is an on/off key whose default, auto, the process decides (the
// zero value is auto). It is a flag value: on, off or auto.
type Switch int

// The values of a Switch.
const (
	SwitchAuto Switch = iota
	SwitchOn
	SwitchOff
)

var switchWords = [...]string{SwitchAuto: "auto", SwitchOn: "on", SwitchOff: "off"}

// On tells whether the switch is on, auto taking the value given.
func (s Switch) On(auto bool) bool {
	switch s {
	case SwitchOn:
		return true
	case SwitchOff:
		return false
	}
	return auto
}

func (s *Switch) String() string { return switchWords[*s] }
func (s *Switch) Type() string   { return "string" }
func (s *Switch) Set(v string) error {
	for w, word := range switchWords {
		if v == word {
			*s = Switch(w)
			return nil
		}
	}
	return fmt.Errorf("must be on, off or auto")
}

// MemoryLimitMode says how memory-limit sets the Go runtime's soft memory
// limit.
type MemoryLimitMode int

// The modes of memory-limit.
const (
	// MemoryLimitAuto: from the cgroup's limit, else the stages' budget.
	MemoryLimitAuto MemoryLimitMode = iota
	// MemoryLimitNone: no limit.
	MemoryLimitNone
	// MemoryLimitBytes: the limit given, in Bytes.
	MemoryLimitBytes
)

// MemoryLimit is the memory-limit key: auto (the zero value), none, or a
// positive quantity. It is a flag value.
type MemoryLimit struct {
	Mode  MemoryLimitMode
	Bytes int64
}

func (m *MemoryLimit) String() string {
	switch m.Mode {
	case MemoryLimitNone:
		return "none"
	case MemoryLimitBytes:
		return resource.NewQuantity(m.Bytes, resource.BinarySI).String()
	}
	return "auto"
}

func (m *MemoryLimit) Type() string { return "string" }

func (m *MemoryLimit) Set(v string) error {
	switch v {
	case "auto":
		*m = MemoryLimit{Mode: MemoryLimitAuto}
	case "none":
		*m = MemoryLimit{Mode: MemoryLimitNone}
	default:
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() <= 0 {
			return fmt.Errorf("must be a positive quantity (512Mi), auto or none")
		}
		*m = MemoryLimit{Mode: MemoryLimitBytes, Bytes: q.Value()}
	}
	return nil
}
