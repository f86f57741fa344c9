package httpapi

import (
	"mime"
	"net/http"
	"path"
)

// files is GET /v1/sessions/{id}/files: the session's workspace, listed.
func (a *API) files(w http.ResponseWriter, r *http.Request, owner string) {
	id, ok := a.sessionID(w, r)
	if !ok {
		return
	}
	files, more, err := a.cfg.Sessions.Files(r.Context(), owner, id)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"files": files, "truncated": more})
}

// file is GET /v1/sessions/{id}/files/{path}: one file of the workspace, as a download.
// It is whatever the session's tools wrote, so it is never served as something a
// browser would render or run on chatd's origin: always an attachment, of type
// application/octet-stream, with nosniff and a sandboxing CSP.
func (a *API) file(w http.ResponseWriter, r *http.Request, owner string) {
	id, ok := a.sessionID(w, r)
	if !ok {
		return
	}
	name := r.PathValue("path")
	f, info, err := a.cfg.Sessions.OpenFile(r.Context(), owner, id, name)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(name)}))
	http.ServeContent(w, r, "", info.ModTime(), f)
}
