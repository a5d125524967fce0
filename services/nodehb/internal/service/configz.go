package service

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/splitlet/splitlet/libs/config"
)

// kubeletConfiguration states what nodehb knows of the node's settings in
// the kubelet's KubeletConfiguration, for /configz: its own keys, the
// common ones and the node's DNS keys (which it shares with the pod
// workers). Settings of other stages (the static pod directory, the sync
// frequency) are left out rather than guessed. The cgroup keys are the
// node's (shared with the pod workers, which lay the cgroups out):
// cgroupsPerQOS as the runtime resolves it, and with it the driver, root,
// pod pids limit and what is held to allocatable.
func (c *Config) kubeletConfiguration(common *config.Common, bind string, taints []corev1.Taint) (*kubeletv1beta1.KubeletConfiguration, error) {
	eviction, err := thresholds(c.EvictionHard)
	if err != nil {
		return nil, fmt.Errorf("invalid value for nodehb.eviction-hard: %w", err)
	}
	kc := &kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{
			Kind:       "KubeletConfiguration",
			APIVersion: schema.GroupVersion{Group: kubeletv1beta1.GroupName, Version: "v1beta1"}.String(),
		},
		Address:           bind,
		Port:              int32(c.Port),
		ReadOnlyPort:      0,
		TLSCertFile:       c.TLSCertFile,
		TLSPrivateKeyFile: c.TLSKeyFile,
		// TLS bootstrap: the serving certificate requested by CSR, the
		// client certificate renewed (in nodehb's process).
		ServerTLSBootstrap: c.RotateServerCert,
		RotateCertificates: common.RotateCertificates,
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: c.ClientCAFile},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(c.TokenWebhook)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(c.AnonymousAuth)},
		},
		Authorization:                    kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		NodeStatusUpdateFrequency:        metav1.Duration{Duration: c.StatusUpdate},
		NodeStatusReportFrequency:        metav1.Duration{Duration: c.StatusReport},
		NodeLeaseDurationSeconds:         int32(c.LeaseDuration.Seconds()),
		CgroupsPerQOS:                    ptr.To(c.Cgroups.PerQOSFor(common.Runtime)),
		CgroupDriver:                     c.Cgroups.Driver,
		CgroupRoot:                       c.Cgroups.Root,
		PodPidsLimit:                     ptr.To(c.Cgroups.PodPidsLimit),
		EnforceNodeAllocatable:           c.Cgroups.EnforceNodeAllocatable,
		RuntimeRequestTimeout:            metav1.Duration{Duration: c.RequestTimeout},
		MaxPods:                          int32(common.PodCapacity()),
		EvictionHard:                     eviction,
		EvictionMaxPodGracePeriod:        int32(c.Eviction.MaxPodGrace),
		EvictionPressureTransitionPeriod: metav1.Duration{Duration: c.Eviction.Transition},
		KubeReserved:                     pairs(c.KubeReserved),
		SystemReserved:                   pairs(c.SystemReserved),
		RegisterNode:                     ptr.To(true),
		RegisterWithTaints:               taints,
		ClusterDomain:                    c.DNS.ClusterDomain,
		ResolverConfig:                   ptr.To(c.DNS.ResolvConf),
	}
	if soft, err := thresholds(c.Eviction.Soft); err == nil && len(soft) > 0 {
		kc.EvictionSoft = soft
	}
	if len(c.Eviction.SoftGrace) > 0 {
		kc.EvictionSoftGracePeriod = c.Eviction.SoftGrace
	}
	if len(c.Eviction.MinReclaim) > 0 {
		kc.EvictionMinimumReclaim = c.Eviction.MinReclaim
	}
	for _, ip := range c.DNS.ClusterDNS {
		kc.ClusterDNS = append(kc.ClusterDNS, ip.String())
	}
	if !*kc.CgroupsPerQOS {
		// nothing is held to allocatable without the QoS cgroups (the
		// process runtime).
		kc.EnforceNodeAllocatable = []string{"none"}
	}
	if c.AuthzMode == AuthzAlwaysAllow {
		kc.Authorization.Mode = kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow
	}
	return kc, nil
}

// thresholds splits an eviction-hard value (signal<quantity,...) into the
// kubelet configuration's map form.
func thresholds(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, t := range strings.Split(s, ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		signal, value, ok := strings.Cut(t, "<")
		if !ok {
			return nil, fmt.Errorf("threshold %q: want signal<quantity", t)
		}
		out[strings.TrimSpace(signal)] = strings.TrimSpace(value)
	}
	return out, nil
}

// pairs splits a name=value[,name=value] list; nil when empty.
func pairs(s string) map[string]string {
	var out map[string]string
	for _, p := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok {
			if out == nil {
				out = map[string]string{}
			}
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// withStaticPodPath is kc with the static pod path podconfig announced
// (its file source is podconfig's setting, not nodehb's), a copy.
func withStaticPodPath(kc *kubeletv1beta1.KubeletConfiguration, path string) *kubeletv1beta1.KubeletConfiguration {
	out := *kc
	out.StaticPodPath = path
	return &out
}
