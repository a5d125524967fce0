package nodestatus

import (
	"bufio"
	"os"
	goruntime "runtime"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/splitlet/splitlet/libs/machine"
)

// SystemInfo gathers the host's facts for node.status.nodeInfo, best effort:
// a figure the host does not give stays empty.
func SystemInfo(kubeletVersion, runtimeName, runtimeVersion string) corev1.NodeSystemInfo {
	info := corev1.NodeSystemInfo{
		MachineID:               readTrim("/etc/machine-id"),
		SystemUUID:              readTrim("/sys/class/dmi/id/product_uuid"),
		BootID:                  readTrim("/proc/sys/kernel/random/boot_id"),
		KernelVersion:           kernelVersion(),
		OSImage:                 osImage(),
		ContainerRuntimeVersion: runtimeName + "://" + runtimeVersion,
		KubeletVersion:          kubeletVersion,
		OperatingSystem:         goruntime.GOOS,
		Architecture:            goruntime.GOARCH,
	}
	return info
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func kernelVersion() string {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return ""
	}
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

func osImage() string {
	f, err := os.Open("/etc/os-release")
	if err != nil {
		return goruntime.GOOS
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "PRETTY_NAME="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return goruntime.GOOS
}

// HostCapacity is the host's own figures (the process runtime's default):
// CPUs, memory, and the size of the file system that holds dir.
func HostCapacity(dir string) corev1.ResourceList {
	out := corev1.ResourceList{
		corev1.ResourceCPU: *resource.NewQuantity(int64(goruntime.NumCPU()), resource.DecimalSI),
	}
	if mem := machine.MemoryCapacity(); mem > 0 {
		out[corev1.ResourceMemory] = *resource.NewQuantity(mem, resource.BinarySI)
	}
	var st syscall.Statfs_t
	if dir == "" {
		dir = os.TempDir()
	}
	for d := dir; d != ""; d = parent(d) {
		if err := syscall.Statfs(d, &st); err == nil {
			out[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(st.Blocks)*int64(st.Bsize), resource.BinarySI)
			break
		}
	}
	return out
}

func parent(d string) string {
	i := strings.LastIndexByte(strings.TrimRight(d, "/"), '/')
	if i <= 0 {
		if d == "/" {
			return ""
		}
		return "/"
	}
	return d[:i]
}
