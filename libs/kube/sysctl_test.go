package kube

import (
	"slices"
	"testing"
)

func TestNormalizeSysctl(t *testing.T) {
	for in, want := range map[string]string{
		"kernel.shm_rmid_forced":           "kernel.shm_rmid_forced",
		"kernel/shm_rmid_forced":           "kernel.shm_rmid_forced",
		"net/ipv4/conf/eno2.100/rp_filter": "net.ipv4.conf.eno2/100.rp_filter",
		"net.ipv4.conf.eno2/100.rp_filter": "net.ipv4.conf.eno2/100.rp_filter",
		"nodots":                           "nodots",
	} {
		if got := NormalizeSysctl(in); got != want {
			t.Errorf("NormalizeSysctl(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSafeSysctlsFollowTheKernel(t *testing.T) {
	old := SafeSysctls("4.4.0-generic")
	if slices.Contains(old, "net.ipv4.tcp_keepalive_time") || !slices.Contains(old, "net.ipv4.ip_local_reserved_ports") {
		t.Errorf("4.4: %v", old)
	}
	if got := SafeSysctls("6.18.44-fc"); len(got) != len(safeSysctls) {
		t.Errorf("6.18: %d of %d safe sysctls", len(got), len(safeSysctls))
	}
	if got := SafeSysctls(""); !slices.Contains(got, "kernel.shm_rmid_forced") || slices.Contains(got, "net.ipv4.tcp_rmem") {
		t.Errorf("unknown kernel: %v", got)
	}
}

func TestSysctlAllowlist(t *testing.T) {
	w, err := NewSysctlAllowlist(SafeSysctls("6.1.0"), []string{"kernel.msg*", "net.core.somaxconn"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name             string
		hostNet, hostIPC bool
		want             string
	}{
		{name: "kernel.shm_rmid_forced"},
		{name: "kernel/shm_rmid_forced"},
		{name: "kernel.msgmax"},
		{name: "net.core.somaxconn"},
		{name: "net.ipv4.tcp_syncookies"},
		{name: "kernel.sem", want: `"kernel.sem" not allowlisted`},
		{name: "vm.swappiness", want: `"vm.swappiness" not allowlisted`},
		{name: "net.core.somaxconn", hostNet: true, want: `"net.core.somaxconn" not allowed with host net enabled`},
		{name: "kernel.msgmax", hostIPC: true, want: `"kernel.msgmax" not allowed with host ipc enabled`},
	} {
		err := w.Check(c.name, c.hostNet, c.hostIPC)
		if got := ""; err != nil {
			got = err.Error()
			if got != c.want {
				t.Errorf("%s (hostNet %v, hostIPC %v): %q, want %q", c.name, c.hostNet, c.hostIPC, got, c.want)
			}
		} else if c.want != "" {
			t.Errorf("%s (hostNet %v, hostIPC %v): allowed, want %q", c.name, c.hostNet, c.hostIPC, c.want)
		}
	}
	if _, err := NewSysctlAllowlist(nil, []string{"vm.swappiness"}); err == nil {
		t.Error("a node-wide sysctl was accepted as allowed")
	}
}
