package kubeletapi

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
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
// with fine-grained authz: /pods, /healthz and /configz first ask
// nodes/pods, nodes/healthz and nodes/configz, then nodes/proxy).
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
	case subpath(p, "/configz"):
		subs = append(subs, "configz")
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

// Review cache figures: the kubelet's webhook TTLs (authentication cacheTTL
// 2 min, a rejected token 30 s; authorization 5 min allowed, 30 s denied),
// and at most ReviewCacheSize answers of each kind kept.
const (
	AuthenticatedTTL   = 2 * time.Minute
	UnauthenticatedTTL = 30 * time.Second
	AuthorizedTTL      = 5 * time.Minute
	UnauthorizedTTL    = 30 * time.Second
	ReviewCacheSize    = 4096
)

// reviewCache remembers review answers in two bounded LRUs, positive ones
// apart from negative ones, each kind with its TTL: a flood of rejected
// tokens evicts only other rejected tokens, never a good token's answer.
type reviewCache[V any] struct {
	pos, neg       *cache.LRUExpireCache
	posTTL, negTTL time.Duration
}

func newReviewCache[V any](size int, posTTL, negTTL time.Duration, clk cache.Clock) *reviewCache[V] {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &reviewCache[V]{
		pos: cache.NewLRUExpireCacheWithClock(size, clk), neg: cache.NewLRUExpireCacheWithClock(size, clk),
		posTTL: posTTL, negTTL: negTTL,
	}
}

func (c *reviewCache[V]) get(k [sha256.Size]byte) (V, bool) {
	if v, ok := c.pos.Get(k); ok {
		return v.(V), true
	}
	if v, ok := c.neg.Get(k); ok {
		return v.(V), true
	}
	var zero V
	return zero, false
}

func (c *reviewCache[V]) put(k [sha256.Size]byte, v V, positive bool) {
	if positive {
		c.neg.Remove(k)
		c.pos.Add(k, v, c.posTTL)
		return
	}
	c.pos.Remove(k)
	c.neg.Add(k, v, c.negTTL)
}

// len is the number of unexpired answers kept.
func (c *reviewCache[V]) len() int { return len(c.pos.Keys()) + len(c.neg.Keys()) }

// TokenReviewAuthenticator checks bearer tokens with the API server's
// TokenReview (kubelet: --authentication-token-webhook), caching answers
// (reviewCache). Tokens are kept only as an HMAC under a key of the
// process, never as they are.
type TokenReviewAuthenticator struct {
	client    kubernetes.Interface
	audiences []string
	failures  *FailureLimiter
	cache     *reviewCache[tokenAnswer]
	key       []byte
}

// NewTokenReviewAuthenticator reviews tokens with client; failures, if not
// nil, limits per source the reviews that do not authenticate.
func NewTokenReviewAuthenticator(client kubernetes.Interface, audiences []string, failures *FailureLimiter) (*TokenReviewAuthenticator, error) {
	key := make([]byte, sha256.Size)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("token cache key: %w", err)
	}
	return &TokenReviewAuthenticator{
		client: client, audiences: audiences, failures: failures, key: key,
		cache: newReviewCache[tokenAnswer](ReviewCacheSize, AuthenticatedTTL, UnauthenticatedTTL, nil),
	}, nil
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
	key := a.cacheKey(token)
	if ans, ok := a.cache.get(key); ok {
		return ans.user, ans.ok, nil
	}
	ticket, err := a.failures.Admit(r)
	if err != nil {
		return User{}, false, err
	}
	ans, err := a.review(r.Context(), token)
	ticket.Done(err != nil || !ans.ok)
	if err != nil {
		return User{}, false, err
	}
	a.cache.put(key, ans, ans.ok)
	return ans.user, ans.ok, nil
}

func (a *TokenReviewAuthenticator) cacheKey(token string) [sha256.Size]byte {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(token))
	var k [sha256.Size]byte
	m.Sum(k[:0])
	return k
}

func (a *TokenReviewAuthenticator) review(ctx context.Context, token string) (tokenAnswer, error) {
	tr, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return tokenAnswer{}, fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated {
		return tokenAnswer{}, nil
	}
	u := User{Name: tr.Status.User.Username, UID: tr.Status.User.UID, Groups: tr.Status.User.Groups}
	if len(tr.Status.User.Extra) > 0 {
		u.Extra = map[string][]string{}
		for k, v := range tr.Status.User.Extra {
			u.Extra[k] = v
		}
	}
	return tokenAnswer{u, true}, nil
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
// --authorization-mode=Webhook), caching answers (reviewCache).
type SubjectAccessReviewAuthorizer struct {
	client kubernetes.Interface
	cache  *reviewCache[sarAnswer]
}

// NewSubjectAccessReviewAuthorizer reviews with client.
func NewSubjectAccessReviewAuthorizer(client kubernetes.Interface) *SubjectAccessReviewAuthorizer {
	return &SubjectAccessReviewAuthorizer{client: client, cache: newReviewCache[sarAnswer](ReviewCacheSize, AuthorizedTTL, UnauthorizedTTL, nil)}
}

type sarAnswer struct {
	allowed bool
	reason  string
}

// Authorize implements Authorizer.
func (z *SubjectAccessReviewAuthorizer) Authorize(ctx context.Context, u User, a Attributes) (bool, string, error) {
	key, err := sarKey(u, a)
	if err != nil {
		return false, "", err
	}
	if ans, ok := z.cache.get(key); ok {
		return ans.allowed, ans.reason, nil
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = v
	}
	sar, err := z.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
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
	z.cache.put(key, ans, ans.allowed)
	return ans.allowed, ans.reason, nil
}

// sarKey is a digest of what a review asks: the user (every field, encoded
// without ambiguity) and the attributes checked.
func sarKey(u User, a Attributes) ([sha256.Size]byte, error) {
	b, err := json.Marshal(struct {
		User                        User
		Verb, Subresource, NodeName string
	}{u, a.Verb, a.Subresource, a.Name})
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("subject access review key: %w", err)
	}
	return sha256.Sum256(b), nil
}

// AlwaysAllow admits every authenticated request (kubelet:
// --authorization-mode=AlwaysAllow).
type AlwaysAllow struct{}

// Authorize implements Authorizer.
func (AlwaysAllow) Authorize(context.Context, User, Attributes) (bool, string, error) {
	return true, "", nil
}
