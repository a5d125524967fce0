package containerenv

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The env file format is the kubelet's: single-quoted literal values
// (multi-line, a comment after), comments and blank lines skipped, the
// first assignment of a key wins, a blank after '=' an empty value; other
// forms are errors.
func TestEnvFileValue(t *testing.T) {
	file := "# settings\n\n  A='one'\nB='two # not a comment' # a comment\nM='line1\nline2'\nE= 'ignored'\nA='again'\n"
	for key, want := range map[string]string{"A": "one", "B": "two # not a comment", "M": "line1\nline2", "E": "", "missing": ""} {
		got, err := envFileValue(strings.NewReader(file), key)
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", key, got, err, want)
		}
	}
	for _, bad := range []string{"A=one\n", "A ='one'\n", "=''\n", "A\n", "A='one' tail\n", "A='open\n"} {
		if got, err := envFileValue(strings.NewReader(bad), "A"); err == nil {
			t.Errorf("%q read as %q, want an error", bad, got)
		}
	}
}

// fileKeyRef reads a key of an env file in one of the pod's volumes, as an
// init container wrote it; a key missing fails unless optional; a volume
// unknown, a file missing, and a link that leads out of the volume fail.
func TestFileKeyRef(t *testing.T) {
	vol := t.TempDir()
	if err := os.WriteFile(filepath.Join(vol, "config.env"), []byte("CONFIG_1='value1'\nCONFIG_2='value2'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "secret.env")
	if err := os.WriteFile(outside, []byte("CONFIG_1='leaked'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(vol, "escape.env")); err != nil {
		t.Fatal(err)
	}
	ref := func(name, volume, path, key string, optional bool) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{
			VolumeName: volume, Path: path, Key: key, Optional: &optional}}}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	o := Options{VolumePaths: map[string]string{"config": vol}}
	build := func(env ...corev1.EnvVar) ([]string, error) {
		return Build(t.Context(), pod, &corev1.Container{Name: "c", Env: env}, o)
	}
	env, err := build(ref("CONFIG_1", "config", "config.env", "CONFIG_1", false), ref("TWO", "config", "config.env", "CONFIG_2", false),
		ref("OPT", "config", "config.env", "NONE", true))
	if err != nil || !slices.Equal(env, []string{"CONFIG_1=value1", "TWO=value2"}) {
		t.Errorf("env %q, %v", env, err)
	}
	for what, e := range map[string]corev1.EnvVar{
		"a missing key":            ref("X", "config", "config.env", "NONE", false),
		"an unknown volume":        ref("X", "other", "config.env", "CONFIG_1", false),
		"a missing file":           ref("X", "config", "nope.env", "CONFIG_1", false),
		"a link out of the volume": ref("X", "config", "escape.env", "CONFIG_1", false),
		"a path out of the volume": ref("X", "config", "../"+filepath.Base(filepath.Dir(outside))+"/secret.env", "CONFIG_1", false),
	} {
		if env, err := build(e); err == nil {
			t.Errorf("%s: env %q, want an error", what, env)
		}
	}
}
