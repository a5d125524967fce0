package runtime

// DeviceOptions are what the device plugins answered for a container's
// devices (kubelet: the device manager's DeviceRunContainerOptions): the
// runtime creates the container with them.
type DeviceOptions struct {
	// Devices are device files the container gets.
	Devices []Device
	// Mounts are host paths mounted into the container, before its volumes.
	Mounts []Mount
	// Envs are environment variables, before the container's own (which
	// win on a clash).
	Envs map[string]string
	// Annotations go on the container (CRI ContainerConfig annotations).
	Annotations map[string]string
}

// Device is a device file on the host and where the container sees it.
type Device struct {
	ContainerPath string
	HostPath      string
	// Permissions are the cgroup device permissions: r, w, m.
	Permissions string
}

// DeviceRuntime is implemented by a runtime that gives containers the
// devices of StartOptions.Devices; another refuses a container with
// devices.
type DeviceRuntime interface {
	SupportsDevices() bool
}
