package kube

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

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

func TestExpandCommandStatic(t *testing.T) {
	env := []corev1.EnvVar{{Name: "FILE", Value: "/tmp/ok"}, {Name: "FROM", ValueFrom: &corev1.EnvVarSource{}}}
	got := ExpandCommandStatic([]string{"cat", "$(FILE)", "$(FROM)", "$$(FILE)", "$(NOPE)", "a$(FILE)b", "$(", "$x"}, env)
	want := []string{"cat", "/tmp/ok", "$(FROM)", "$(FILE)", "$(NOPE)", "a/tmp/okb", "$(", "$x"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
