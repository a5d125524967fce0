package testenv

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// auditPolicy records every request at the Metadata level: who asked for
// what, and the answer's code.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

func (cp *ControlPlane) auditArgs() ([]string, error) {
	policy := filepath.Join(cp.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, err
	}
	cp.auditLog = filepath.Join(cp.Dir, "audit.log")
	return []string{
		"--audit-policy-file=" + policy,
		"--audit-log-path=" + cp.auditLog,
		"--audit-log-format=json",
		// written before the answer goes out: a test that reads the log
		// after a request sees it.
		"--audit-log-mode=blocking",
	}, nil
}

// auditEvent is the part of an audit.k8s.io/v1 Event that Forbidden reads.
type auditEvent struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	URI   string `json:"requestURI"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// Forbidden lists the requests of the users that the API server refused
// with 403, as "user verb URI", from the audit log (ControlPlaneOptions.Audit).
func (cp *ControlPlane) Forbidden(users ...string) ([]string, error) {
	if cp.auditLog == "" {
		return nil, fmt.Errorf("testenv: the control plane was started without Audit")
	}
	f, err := os.Open(cp.auditLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("audit log: %w", err)
		}
		if ev.Stage == "ResponseComplete" && ev.ResponseStatus.Code == 403 && slices.Contains(users, ev.User.Username) {
			out = append(out, fmt.Sprintf("%s %s %s", ev.User.Username, ev.Verb, ev.URI))
		}
	}
	return out, sc.Err()
}
