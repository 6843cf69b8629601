package api

import (
	"fmt"
	"net/http"
	"os"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/auth"
)

// AgentBinaryPath is the path a rented instance fetches the server's own
// executable from, to run berth agent on an image without it
// (docs/pools.md, "What an instance runs").
const AgentBinaryPath = "/api/v1/agent/binary"

// isAgent admits an agent's credential, bound to a host or a join token.
func isAgent(id auth.Identity) bool { return id.Role == auth.RoleAgent }

// agentBinary answers GET /api/v1/agent/binary: the server's own
// executable (os.Executable), with its size and an ETag of its size and
// modification time; logged, not audited.
func (s *Server) agentBinary(w http.ResponseWriter, r *http.Request) {
	path, err := os.Executable()
	if err != nil {
		writeError(w, r, berth.Errorf(berth.ECodeInternal, "the server's executable: %v", err))
		return
	}
	f, err := os.Open(path)
	if err != nil {
		writeError(w, r, berth.Errorf(berth.ECodeInternal, "the server's executable: %v", err))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeError(w, r, berth.Errorf(berth.ECodeInternal, "the server's executable: %v", err))
		return
	}
	requestLog(r).Info("agent binary served", "to", identity(r).Name, "remote", r.RemoteAddr, "bytes", fi.Size())
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("ETag", fmt.Sprintf(`"%x-%x"`, fi.Size(), fi.ModTime().UnixNano()))
	http.ServeContent(w, r, "berth", fi.ModTime(), f)
}
