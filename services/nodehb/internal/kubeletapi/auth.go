package kubeletapi

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// User is an authenticated caller.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Anonymous is the user of a request without credentials when anonymous
// requests are allowed.
var Anonymous = User{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}}

// Authenticator finds who made a request: ok false means no valid
// credentials (401).
type Authenticator interface {
	Authenticate(r *http.Request) (User, bool, error)
}

// Authorizer decides whether a user may do what a request asks.
type Authorizer interface {
	Authorize(ctx context.Context, u User, a Attributes) (allowed bool, reason string, err error)
}

// Attributes are what a request asks, as the kubelet maps it onto the Node
// resource.
type Attributes struct {
	Verb        string
	Subresource string
	Name        string
	Path        string
}

// attributesFor maps a request to the attribute sets to check, in order;
// any one allowed admits the request (kubelet: nodeAuthorizerAttributesGetter,
// with fine-grained authz: /pods and /healthz first ask nodes/pods and
// nodes/healthz, then nodes/proxy).
func attributesFor(node string, r *http.Request) []Attributes {
	verb := ""
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		verb = "get"
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	}
	p := r.URL.Path
	var subs []string
	switch {
	case subpath(p, "/pods"), subpath(p, "/runningpods"):
		subs = append(subs, "pods")
	case subpath(p, "/healthz"):
		subs = append(subs, "healthz")
	}
	switch {
	case subpath(p, "/stats"):
		subs = append(subs, "stats")
	case subpath(p, "/metrics"):
		subs = append(subs, "metrics")
	case subpath(p, "/logs"):
		subs = append(subs, "log")
	default:
		subs = append(subs, "proxy")
	}
	out := make([]Attributes, len(subs))
	for i, s := range subs {
		out[i] = Attributes{Verb: verb, Subresource: s, Name: node, Path: p}
	}
	return out
}

func subpath(p, prefix string) bool {
	return p == prefix || strings.HasPrefix(p, strings.TrimSuffix(prefix, "/")+"/")
}

// ClientCertAuthenticator takes a client certificate chain that verifies
// against the client CA: the user is the subject's CN, the groups its O.
type ClientCertAuthenticator struct {
	Roots *x509.CertPool
}

// Authenticate implements Authenticator.
func (a *ClientCertAuthenticator) Authenticate(r *http.Request) (User, bool, error) {
	if a == nil || a.Roots == nil || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return User{}, false, nil
	}
	certs := r.TLS.PeerCertificates
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{
		Roots: a.Roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return User{}, false, fmt.Errorf("client certificate: %w", err)
	}
	subj := certs[0].Subject
	if subj.CommonName == "" {
		return User{}, false, fmt.Errorf("client certificate: empty common name")
	}
	return User{Name: subj.CommonName, Groups: append([]string(nil), subj.Organization...)}, true, nil
}

// ttlCache remembers answers for a while: one TTL for positive answers,
// another for negative ones.
type ttlCache[V any] struct {
	mu      sync.Mutex
	entries map[string]ttlEntry[V]
}

type ttlEntry[V any] struct {
	v   V
	exp time.Time
}

func (c *ttlCache[V]) get(k string, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || now.After(e.exp) {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *ttlCache[V]) put(k string, v V, ttl time.Duration, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]ttlEntry[V]{}
	}
	if len(c.entries) > 4096 {
		for key, e := range c.entries {
			if now.After(e.exp) {
				delete(c.entries, key)
			}
		}
	}
	c.entries[k] = ttlEntry[V]{v, now.Add(ttl)}
}

// TokenReviewAuthenticator checks bearer tokens with the API server's
// TokenReview (kubelet: --authentication-token-webhook), caching answers
// (2 min for authenticated tokens, 30 s for rejected ones; kubelet defaults).
type TokenReviewAuthenticator struct {
	Client    kubernetes.Interface
	Audiences []string
	cache     ttlCache[tokenAnswer]
}

type tokenAnswer struct {
	user User
	ok   bool
}

// Authenticate implements Authenticator.
func (a *TokenReviewAuthenticator) Authenticate(r *http.Request) (User, bool, error) {
	h := r.Header.Get("Authorization")
	scheme, token, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "bearer") {
		return User{}, false, nil
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return User{}, false, nil
	}
	now := time.Now()
	// Keyed by a digest, so that tokens are not kept in memory.
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	if ans, ok := a.cache.get(key, now); ok {
		return ans.user, ans.ok, nil
	}
	tr, err := a.Client.AuthenticationV1().TokenReviews().Create(r.Context(), &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return User{}, false, fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated {
		a.cache.put(key, tokenAnswer{}, 30*time.Second, now)
		return User{}, false, nil
	}
	u := User{Name: tr.Status.User.Username, UID: tr.Status.User.UID, Groups: tr.Status.User.Groups}
	if len(tr.Status.User.Extra) > 0 {
		u.Extra = map[string][]string{}
		for k, v := range tr.Status.User.Extra {
			u.Extra[k] = v
		}
	}
	a.cache.put(key, tokenAnswer{u, true}, 2*time.Minute, now)
	return u, true, nil
}

// Union tries authenticators in order; the first that recognises the
// request wins. Errors are kept only when none succeeds.
type Union []Authenticator

// Authenticate implements Authenticator.
func (u Union) Authenticate(r *http.Request) (User, bool, error) {
	var firstErr error
	for _, a := range u {
		user, ok, err := a.Authenticate(r)
		if ok {
			return user, true, nil
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return User{}, false, firstErr
}

// SubjectAccessReviewAuthorizer asks the API server (kubelet:
// --authorization-mode=Webhook), caching answers 5 min when allowed and
// 30 s when denied (kubelet defaults).
type SubjectAccessReviewAuthorizer struct {
	Client kubernetes.Interface
	cache  ttlCache[sarAnswer]
}

type sarAnswer struct {
	allowed bool
	reason  string
}

// Authorize implements Authorizer.
func (z *SubjectAccessReviewAuthorizer) Authorize(ctx context.Context, u User, a Attributes) (bool, string, error) {
	key := fmt.Sprintf("%s\x00%s\x00%s\x00%v\x00%s\x00%s\x00%s", u.Name, u.UID, strings.Join(u.Groups, ","), u.Extra, a.Verb, a.Subresource, a.Name)
	now := time.Now()
	if ans, ok := z.cache.get(key, now); ok {
		return ans.allowed, ans.reason, nil
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = v
	}
	sar, err := z.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: u.Name, UID: u.UID, Groups: u.Groups, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.Verb, Version: "v1", Resource: "nodes", Subresource: a.Subresource, Name: a.Name,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("subject access review: %w", err)
	}
	ans := sarAnswer{sar.Status.Allowed && !sar.Status.Denied, sar.Status.Reason}
	ttl := 30 * time.Second
	if ans.allowed {
		ttl = 5 * time.Minute
	}
	z.cache.put(key, ans, ttl, now)
	return ans.allowed, ans.reason, nil
}

// AlwaysAllow admits every authenticated request (kubelet:
// --authorization-mode=AlwaysAllow).
type AlwaysAllow struct{}

// Authorize implements Authorizer.
func (AlwaysAllow) Authorize(context.Context, User, Attributes) (bool, string, error) {
	return true, "", nil
}
