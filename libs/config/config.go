// Package config gives flags, environment variables and a YAML file one set
// of keys. A key is a flag name ("node-name", "podconfig.snapshot-period");
// its environment variable is SPLITLET_ followed by the key in upper case with
// '-' and '.' as '_' (SPLITLET_NODE_NAME); in the YAML file it is the same key,
// either flat ("podconfig.snapshot-period: 30s") or nested by its dots.
//
// Precedence: a flag given on the command line, then the environment, then
// the file, then the flag's default.
package config

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// EnvPrefix starts every environment variable that sets a key.
const EnvPrefix = "SPLITLET_"

// FileKey is the flag that names the YAML file.
const FileKey = "config"

// EnvName is the environment variable of a key.
func EnvName(key string) string {
	r := strings.NewReplacer("-", "_", ".", "_")
	return EnvPrefix + strings.ToUpper(r.Replace(key))
}

// Load parses args into fs, then fills every flag not given on the command
// line from the environment and then from the YAML file named by the
// "config" flag (or its environment variable). Errors name the key and where
// its bad value came from.
func Load(fs *pflag.FlagSet, args []string, environ func(string) (string, bool)) error {
	if environ == nil {
		environ = os.LookupEnv
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	file := map[string]string{}
	if f := fs.Lookup(FileKey); f != nil {
		path := f.Value.String()
		if !f.Changed {
			if v, ok := environ(EnvName(FileKey)); ok {
				path = v
			}
		}
		if path != "" {
			var err error
			if file, err = readFile(path); err != nil {
				return err
			}
			for k := range file {
				if fs.Lookup(k) == nil || k == FileKey {
					return fmt.Errorf("config file %s: unknown key %q", path, k)
				}
			}
		}
	}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		if v, ok := environ(EnvName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("invalid value %q for %s (from environment %s): %v", v, f.Name, EnvName(f.Name), err))
			}
			return
		}
		if v, ok := file[f.Name]; ok {
			if err := setFromFile(fs, f, v); err != nil {
				errs = append(errs, fmt.Errorf("invalid value %q for %s (from config file): %v", v, f.Name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// setFromFile sets a flag from a file value. List flags take a YAML list,
// joined with commas before it gets here, as one value.
func setFromFile(fs *pflag.FlagSet, f *pflag.Flag, v string) error {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		if v == "" {
			return sv.Replace(nil)
		}
		return sv.Replace(strings.Split(v, ","))
	}
	return fs.Set(f.Name, v)
}

func readFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	out := map[string]string{}
	if err := flatten("", doc, out); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return out, nil
}

func flatten(prefix string, doc map[string]any, out map[string]string) error {
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		switch v := doc[k].(type) {
		case map[string]any:
			if err := flatten(key, v, out); err != nil {
				return err
			}
		case []any:
			parts := make([]string, len(v))
			for i, item := range v {
				parts[i] = scalar(item)
			}
			out[key] = strings.Join(parts, ",")
		case nil:
			out[key] = ""
		default:
			out[key] = scalar(v)
		}
	}
	return nil
}

func scalar(v any) string {
	switch x := v.(type) {
	case float64:
		if x == float64(int64(x)) {
			return fmt.Sprintf("%d", int64(x))
		}
		return fmt.Sprintf("%g", x)
	case string:
		return x
	default:
		return fmt.Sprint(x)
	}
}
