package kube

import "testing"

func TestIsExtendedResourceName(t *testing.T) {
	for name, want := range map[string]bool{
		"example.com/dongle":                     true,
		"test.device/device-plugin":              true,
		"cpu":                                    false,
		"hugepages-2Mi":                          false,
		"kubernetes.io/batteries":                false,
		"foo.kubernetes.io/x":                    false,
		"requests.example.com/dev":               false,
		"example.com/bad name":                   false,
		"example.com/" + string(make([]byte, 0)): false,
	} {
		if got := IsExtendedResourceName(name); got != want {
			t.Errorf("IsExtendedResourceName(%q) = %v, want %v", name, got, want)
		}
	}
}
