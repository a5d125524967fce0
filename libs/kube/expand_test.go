package kube

import "testing"

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "B": "two"}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	for in, want := range map[string]string{
		"plain":       "plain",
		"$(A)":        "1",
		"x$(A)y$(B)z": "x1ytwoz",
		"$$(A)":       "$(A)",
		"$(C)":        "$(C)",
		"$(A":         "$(A",
		"$":           "$",
		"a$b":         "a$b",
		"$()":         "$()",
		"$$$(A)":      "$1",
	} {
		if got := Expand(in, lookup); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
}
