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

// auditEvent is the part of an audit.k8s.io/v1 Event that ReadAudit reads.
type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	URI       string `json:"requestURI"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// AuditRecord is one answered request of the audit log: who asked, with
// which client, for what, and the answer's code.
type AuditRecord struct {
	User, UserAgent, Verb, URI string
	Code                       int
}

// ReadAudit returns the answered requests of an audit log that a control
// plane started with Audit wrote (Dir/audit.log), oldest first.
func ReadAudit(path string) ([]AuditRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []AuditRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("audit log: %w", err)
		}
		if ev.Stage == "ResponseComplete" {
			out = append(out, AuditRecord{User: ev.User.Username, UserAgent: ev.UserAgent, Verb: ev.Verb, URI: ev.URI, Code: ev.ResponseStatus.Code})
		}
	}
	return out, sc.Err()
}

// Forbidden lists the requests of the users that the API server refused
// with 403, as "user verb URI", from the audit log (ControlPlaneOptions.Audit).
func (cp *ControlPlane) Forbidden(users ...string) ([]string, error) {
	if cp.auditLog == "" {
		return nil, fmt.Errorf("testenv: the control plane was started without Audit")
	}
	records, err := ReadAudit(cp.auditLog)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range records {
		if r.Code == 403 && slices.Contains(users, r.User) {
			out = append(out, fmt.Sprintf("%s %s %s", r.User, r.Verb, r.URI))
		}
	}
	return out, nil
}
