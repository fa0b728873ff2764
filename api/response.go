package api

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// writeJSON encodes body and writes it with status. HTML escaping is off: encoding/json
// would otherwise rewrite '<', '>' and '&' inside committables (json.RawMessage) as \u003c
// and so on, and committables are returned byte for byte as they were stored.
func writeJSON(w http.ResponseWriter, contentType string, status int, body any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(body); err != nil {
		return err
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_, err := buf.WriteTo(w)
	return err
}

// jsonResponse is the success answer of every operation: a body of the generated models,
// written by writeJSON rather than by the generated Visit methods (which escape HTML, see
// writeJSON). It implements every operation's response interface.
type jsonResponse struct {
	status   int
	body     any
	location string
	// minimal says the answer applied Prefer: return=minimal.
	minimal bool
}

func (r jsonResponse) visit(w http.ResponseWriter) error {
	if r.location != "" {
		w.Header().Set("Location", r.location)
	}
	if r.minimal {
		w.Header().Set("Preference-Applied", "return=minimal")
	}
	if r.body == nil {
		w.WriteHeader(r.status)
		return nil
	}
	return writeJSON(w, "application/json", r.status, r.body)
}

func ok(body any) jsonResponse { return jsonResponse{status: http.StatusOK, body: body} }

func (r jsonResponse) VisitGetHealthzResponse(w http.ResponseWriter) error { return r.visit(w) }
func (r jsonResponse) VisitGetReadyzResponse(w http.ResponseWriter) error  { return r.visit(w) }
func (r jsonResponse) VisitGetInfoResponse(w http.ResponseWriter) error    { return r.visit(w) }
func (r jsonResponse) VisitListOpenCheckpointsResponse(w http.ResponseWriter) error {
	return r.visit(w)
}
func (r jsonResponse) VisitListJobsResponse(w http.ResponseWriter) error  { return r.visit(w) }
func (r jsonResponse) VisitDeleteJobResponse(w http.ResponseWriter) error { return r.visit(w) }
func (r jsonResponse) VisitGetJobResponse(w http.ResponseWriter) error    { return r.visit(w) }
func (r jsonResponse) VisitPutJobResponse(w http.ResponseWriter) error    { return r.visit(w) }
func (r jsonResponse) VisitListCheckpointsResponse(w http.ResponseWriter) error {
	return r.visit(w)
}
func (r jsonResponse) VisitPrepareCheckpointResponse(w http.ResponseWriter) error {
	return r.visit(w)
}
func (r jsonResponse) VisitGetCheckpointResponse(w http.ResponseWriter) error { return r.visit(w) }
func (r jsonResponse) VisitAbortCheckpointResponse(w http.ResponseWriter) error {
	return r.visit(w)
}
func (r jsonResponse) VisitPutAckResponse(w http.ResponseWriter) error { return r.visit(w) }
func (r jsonResponse) VisitCommitCheckpointResponse(w http.ResponseWriter) error {
	return r.visit(w)
}
func (r jsonResponse) VisitPutVoteResponse(w http.ResponseWriter) error    { return r.visit(w) }
func (r jsonResponse) VisitGetPendingResponse(w http.ResponseWriter) error { return r.visit(w) }
func (r jsonResponse) VisitRegisterParticipantResponse(w http.ResponseWriter) error {
	return r.visit(w)
}
func (r jsonResponse) VisitCreateTokenResponse(w http.ResponseWriter) error        { return r.visit(w) }
func (r jsonResponse) VisitListTokensResponse(w http.ResponseWriter) error         { return r.visit(w) }
func (r jsonResponse) VisitGetTokenResponse(w http.ResponseWriter) error           { return r.visit(w) }
func (r jsonResponse) VisitDeleteTokenResponse(w http.ResponseWriter) error        { return r.visit(w) }
func (r jsonResponse) VisitCompleteCheckpointResponse(w http.ResponseWriter) error { return r.visit(w) }
func (r jsonResponse) VisitListAuditResponse(w http.ResponseWriter) error          { return r.visit(w) }
