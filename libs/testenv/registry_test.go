package testenv

import (
	"net/http"
	"testing"
)

// The registry takes only its account: an image pushed to it is there for
// that account and refused to an anonymous client and a wrong password.
func TestRegistryAuth(t *testing.T) {
	SkipShort(t, "the registry binary (make testenv)")
	r, err := StartRegistry(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	if _, err := r.PushBusybox(t.Context(), "private/busybox", "v1"); err != nil {
		t.Fatal(err)
	}
	get := func(user, pass string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodHead, "http://"+r.Host+"/v2/private/busybox/manifests/v1", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(r.User, r.Password); code != http.StatusOK {
		t.Errorf("manifest with the account: %d, want 200", code)
	}
	if code := get("", ""); code != http.StatusUnauthorized {
		t.Errorf("manifest anonymously: %d, want 401", code)
	}
	if code := get(r.User, r.Password+"x"); code != http.StatusUnauthorized {
		t.Errorf("manifest with a wrong password: %d, want 401", code)
	}
}
