package config_test

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/splitlet/splitlet/libs/config"
)

// TestMemoryLimitParsedOnce: memory-limit's three spellings parse from a
// flag, the environment and the file into the typed value, auto by
// default; a bad value is refused by Load, naming the key.
func TestMemoryLimitParsedOnce(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		file string
		want config.MemoryLimit
	}{
		{"default", nil, nil, "", config.MemoryLimit{Mode: config.MemoryLimitAuto}},
		{"flag none", []string{"--memory-limit=none"}, nil, "", config.MemoryLimit{Mode: config.MemoryLimitNone}},
		{"env quantity", nil, map[string]string{"SPLITLET_MEMORY_LIMIT": "512Mi"}, "", config.MemoryLimit{Mode: config.MemoryLimitBytes, Bytes: 512 << 20}},
		{"file auto", nil, nil, "memory-limit: auto\n", config.MemoryLimit{Mode: config.MemoryLimitAuto}},
		{"file quantity", nil, nil, "memory-limit: 1G\n", config.MemoryLimit{Mode: config.MemoryLimitBytes, Bytes: 1e9}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, k := newFlags()
			args := c.args
			if c.file != "" {
				args = append(args, "--config", writeFile(t, c.file))
			}
			if err := config.Load(fs, args, env(c.env)); err != nil {
				t.Fatal(err)
			}
			if k.common.MemoryLimit != c.want {
				t.Errorf("memory-limit %+v, want %+v", k.common.MemoryLimit, c.want)
			}
		})
	}
	for _, bad := range []string{"lots", "0", "-1Gi", "Auto", ""} {
		fs, _ := newFlags()
		fs.SetOutput(new(strings.Builder))
		err := config.Load(fs, nil, env(map[string]string{"SPLITLET_MEMORY_LIMIT": bad}))
		if err == nil || !strings.Contains(err.Error(), "memory-limit") || !strings.Contains(err.Error(), "auto or none") {
			t.Errorf("memory-limit %q: %v, want an error naming the key and its spellings", bad, err)
		}
	}
	if got := (&config.MemoryLimit{Mode: config.MemoryLimitBytes, Bytes: 512 << 20}).String(); got != "512Mi" {
		t.Errorf("String of 512Mi: %q", got)
	}
}

// TestSwitch: on, off and auto (the zero value, which takes the caller's
// default); any other word is refused.
func TestSwitch(t *testing.T) {
	var s config.Switch
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	fs.Var(&s, "x.events", "")
	if f := fs.Lookup("x.events"); f.DefValue != "auto" {
		t.Errorf("default %q, want auto", f.DefValue)
	}
	if !s.On(true) || s.On(false) {
		t.Errorf("auto does not follow its default")
	}
	for word, want := range map[string]bool{"on": true, "off": false} {
		if err := config.Load(fs, []string{"--x.events=" + word}, env(nil)); err != nil {
			t.Fatal(err)
		}
		if s.On(!want) != want || s.String() != word {
			t.Errorf("%s: On %v, String %q", word, s.On(!want), s.String())
		}
	}
	if err := s.Set("yes"); err == nil || !strings.Contains(err.Error(), "on, off or auto") {
		t.Errorf("yes: %v", err)
	}
}
