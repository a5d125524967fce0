package logging

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"nats://splitlet:s3cret@127.0.0.1:4222", "nats://splitlet:REDACTED@127.0.0.1:4222"},
		{"nats://a:p1@h1:4222, nats://b:p2@h2:4222", "nats://a:REDACTED@h1:4222,nats://b:REDACTED@h2:4222"},
		{"nats://s3cret-token@127.0.0.1:4222", "nats://REDACTED@127.0.0.1:4222"},
		{"https://example.test/pods.yaml?token=abc&x=1", "https://example.test/pods.yaml?token=REDACTED&x=REDACTED"},
		{"http://127.0.0.1:8080/pods", "http://127.0.0.1:8080/pods"},
		{"http://[::1", "<unparsable URL>"},
	} {
		if got := RedactURL(c.in); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestRedactURLError: the error of a real HTTP request to a URL with a
// token shows the URL without the token.
func TestRedactURLError(t *testing.T) {
	// Port 1 on loopback: nothing listens there, the request fails at once.
	_, err := http.Get("http://user:pw@127.0.0.1:1/pods?token=s3cret")
	if err == nil {
		t.Fatal("want an error")
	}
	got := RedactURLError(err).Error()
	if strings.Contains(got, "s3cret") || strings.Contains(got, "pw@") {
		t.Errorf("secret left in %q", got)
	}
	if !strings.Contains(got, "127.0.0.1:1/pods") {
		t.Errorf("the URL's place is gone from %q", got)
	}
	plain := errors.New("x")
	if RedactURLError(plain) != plain {
		t.Error("an error with no URL changed")
	}
}
