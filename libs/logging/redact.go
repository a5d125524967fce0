package logging

import (
	"errors"
	"net/url"
	"strings"
)

// Redacted stands in for a secret in what a process shows.
const Redacted = "REDACTED"

// RedactURL is raw as it may be shown in a log line, an Event or an error:
// the password of its user info (or a user info with no password: a NATS
// token) and every query value are replaced by REDACTED (a manifest URL may carry a token in its query, a NATS URL a
// password). Comma-separated lists of URLs (as NATS takes them) are redacted
// one by one. What does not parse as a URL is not shown at all.
func RedactURL(raw string) string {
	if strings.Contains(raw, ",") {
		parts := strings.Split(raw, ",")
		for i, p := range parts {
			parts[i] = RedactURL(strings.TrimSpace(p))
		}
		return strings.Join(parts, ",")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), Redacted)
		} else {
			// a user with no password is a token (NATS token auth)
			u.User = url.User(Redacted)
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{Redacted}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// RedactURLError returns err with the URL of a *url.Error in it (what an
// HTTP client returns) redacted as RedactURL does.
func RedactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		c := *ue
		c.URL = RedactURL(ue.URL)
		return &c
	}
	return err
}
