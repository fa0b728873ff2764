package api

import "net/http"

// boundOperations serves the operations whose body the input check decodes (bodySpec.bound)
// from what it decoded, and every other operation as the generated strict handler does.
// A vote's body is the one that can be large (its committables, up to megabytes): the
// input check reads it once, and the generated code would read it twice more (its
// json.Decoder finds where the value ends, then decodes it). An ack's is small, but there
// is one per participant per round: decoding it once spares the generated decoder's
// allocations on the hot path. Each method here does what
// the generated one does after decoding: call the strict server, write its answer, and
// pass errors to the same writer.
type boundOperations struct {
	ServerInterface // the generated strict handler
	ssi             StrictServerInterface
	pw              *problemWriter
}

// boundBody returns what the input check decoded of r's body, if it is a *T.
func boundBody[T any](r *http.Request) (*T, bool) {
	cb, ok := r.Body.(*checkedBody)
	if !ok {
		return nil, false
	}
	v, ok := cb.bound.(*T)
	return v, ok
}

func (b boundOperations) PutVote(w http.ResponseWriter, r *http.Request, job JobName, id CheckpointID, participant ParticipantName, params PutVoteParams) {
	body, ok := boundBody[VoteRequest](r)
	if !ok {
		b.ServerInterface.PutVote(w, r, job, id, participant, params)
		return
	}
	response, err := b.ssi.PutVote(r.Context(), PutVoteRequestObject{Job: job, Id: id, Participant: participant, Params: params, Body: body})
	switch {
	case err != nil:
		b.pw.write(w, r, err)
	case response != nil:
		if err := response.VisitPutVoteResponse(w); err != nil {
			b.pw.write(w, r, err)
		}
	}
}

func (b boundOperations) PutAck(w http.ResponseWriter, r *http.Request, job JobName, id CheckpointID, participant ParticipantName, params PutAckParams) {
	body, ok := boundBody[AckRequest](r)
	if !ok {
		b.ServerInterface.PutAck(w, r, job, id, participant, params)
		return
	}
	response, err := b.ssi.PutAck(r.Context(), PutAckRequestObject{Job: job, Id: id, Participant: participant, Params: params, Body: body})
	switch {
	case err != nil:
		b.pw.write(w, r, err)
	case response != nil:
		if err := response.VisitPutAckResponse(w); err != nil {
			b.pw.write(w, r, err)
		}
	}
}
