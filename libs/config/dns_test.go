package config_test

import (
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/splitlet/splitlet/libs/config"
)

func dnsFlags() (*pflag.FlagSet, *config.DNS) {
	d := &config.DNS{}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	fs.String(config.FileKey, "", "")
	d.RegisterFlags(fs)
	return fs, d
}

func ips(list []net.IP) []string {
	out := make([]string, len(list))
	for i, ip := range list {
		out[i] = ip.String()
	}
	return out
}

// cluster-dns, cluster-domain and resolv-conf come from a flag, the
// environment or the YAML file as typed values, with the defaults a
// kubelet's user expects.
func TestDNSKeys(t *testing.T) {
	fs, d := dnsFlags()
	if err := config.Load(fs, nil, env(nil)); err != nil {
		t.Fatal(err)
	}
	if len(d.ClusterDNS) != 0 || d.ClusterDomain != "cluster.local" || d.ResolvConf != "/etc/resolv.conf" {
		t.Errorf("defaults %+v", d)
	}
	cases := []struct {
		name string
		args []string
		env  map[string]string
		file string
		want []string
	}{
		{"flag", []string{"--cluster-dns=10.96.0.10,fd00::a", "--cluster-dns", "10.96.0.11"}, nil, "", []string{"10.96.0.10", "fd00::a", "10.96.0.11"}},
		{"env", nil, map[string]string{"SPLITLET_CLUSTER_DNS": "10.96.0.10, 10.96.0.11"}, "", []string{"10.96.0.10", "10.96.0.11"}},
		{"file list", nil, nil, "cluster-dns: [10.96.0.10, 10.96.0.11]\ncluster-domain: corp.example\nresolv-conf: \"\"\n", []string{"10.96.0.10", "10.96.0.11"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs, d := dnsFlags()
			args := c.args
			if c.file != "" {
				args = append(args, "--config", writeFile(t, c.file))
			}
			if err := config.Load(fs, args, env(c.env)); err != nil {
				t.Fatal(err)
			}
			if got := ips(d.ClusterDNS); !slices.Equal(got, c.want) {
				t.Errorf("cluster-dns %v, want %v", got, c.want)
			}
			if c.file != "" && (d.ClusterDomain != "corp.example" || d.ResolvConf != "") {
				t.Errorf("from the file: %+v", d)
			}
			if err := d.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

// A bad address or domain stops with a message naming the key, wherever it
// came from.
func TestDNSKeysRejectBadValues(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		file string
		want []string
	}{
		{"flag", []string{"--cluster-dns=10.96.0.300"}, nil, "", []string{"cluster-dns", "10.96.0.300"}},
		{"env", nil, map[string]string{"SPLITLET_CLUSTER_DNS": "dns.example"}, "", []string{"cluster-dns", "SPLITLET_CLUSTER_DNS", "dns.example"}},
		{"file", nil, nil, "cluster-dns: [10.96.0.10, nope]\n", []string{"cluster-dns", "config file", "nope"}},
		{"domain", []string{"--cluster-domain=Bad_Domain"}, nil, "", []string{"cluster-domain", "Bad_Domain"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs, d := dnsFlags()
			args := c.args
			if c.file != "" {
				args = append(args, "--config", writeFile(t, c.file))
			}
			err := config.Load(fs, args, env(c.env))
			if err == nil {
				err = d.Validate()
			}
			if err == nil {
				t.Fatalf("no error; keys %+v", d)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// Two stages in one process register the DNS keys in one flag set: one
// definition, and each value reaches both (a second registration would
// otherwise panic, or leave one stage at the defaults).
func TestDNSKeysShared(t *testing.T) {
	fs, first := dnsFlags()
	second := &config.DNS{}
	second.RegisterFlags(fs)
	if first.ClusterDomain != "cluster.local" || second.ClusterDomain != "cluster.local" || second.ResolvConf != "/etc/resolv.conf" {
		t.Errorf("defaults: %+v, %+v", first, second)
	}
	args := []string{"--cluster-dns=10.96.0.10", "--cluster-domain=corp.example"}
	if err := config.Load(fs, args, env(map[string]string{"SPLITLET_RESOLV_CONF": "/run/resolv.conf"})); err != nil {
		t.Fatal(err)
	}
	for i, d := range []*config.DNS{first, second} {
		if !slices.Equal(ips(d.ClusterDNS), []string{"10.96.0.10"}) || d.ClusterDomain != "corp.example" || d.ResolvConf != "/run/resolv.conf" {
			t.Errorf("stage %d: %+v", i, d)
		}
	}
}
