package app

import "testing"

// A process that runs one stage connects as that stage's bus identity (its
// inboxes are the stage's); a replacement stage as the role it names; a
// process of several stages, or of a service that is no stage, as none.
func TestBusIdentity(t *testing.T) {
	for _, c := range []struct {
		run  []Service
		want BusIdentity
	}{
		{[]Service{{Name: "prober"}}, "prober"},
		{[]Service{{Name: "tcpprober", Identity: "prober"}}, "prober"},
		{[]Service{{Name: "podworkers"}, {Name: "prober"}}, ""},
		{[]Service{{Name: "something"}}, ""},
	} {
		if got := busIdentity(c.run, false); got != c.want {
			t.Errorf("%+v: identity %q, want %q", c.run, got, c.want)
		}
	}
}
