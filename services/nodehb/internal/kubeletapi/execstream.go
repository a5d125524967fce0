package kubeletapi

import "net/http"

// handleExec serves /exec/{namespace}/{pod}[/{uid}]/{container}.
func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) {
	http.Error(w, "exec streaming is not implemented by this agent; use /run", http.StatusNotImplemented)
}
