package main

import "testing"

// A -c script that names nc as a word goes to bash; others stay busybox's.
func TestNamesOwn(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"-c", "echo hostName | nc -w 1 -u 10.0.0.1 8081 | grep -v '^\\s*$'"}, true},
		{[]string{"-c", "nc -l"}, true},
		{[]string{"-c", "(nc -u x 1)"}, true},
		{[]string{"-c", "echo nc"}, true},
		{[]string{"-c", "ncat -u x; sync"}, false},
		{[]string{"-c", "cat /etc/nc.conf"}, false},
		{[]string{"nc"}, false},
		{[]string{"-c"}, false},
	} {
		if got := namesOwn(c.args); got != c.want {
			t.Errorf("%q: %v, want %v", c.args, got, c.want)
		}
	}
}
