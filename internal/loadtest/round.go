package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The parts of the answers that the checks read.
type (
	checkpointAnswer struct {
		statusAnswer
		AbortReason  *string             `json:"abort_reason"`
		Participants []participantAnswer `json:"participants"`
		// Votes is set in a minimal answer only.
		Votes *struct {
			Prepared int `json:"prepared"`
			Abort    int `json:"abort"`
			Missing  int `json:"missing"`
		} `json:"votes"`
	}
	participantAnswer struct {
		Name         string          `json:"name"`
		Vote         *string         `json:"vote"`
		Committables json.RawMessage `json:"committables"`
	}
	statusAnswer struct {
		ID     int64  `json:"id"`
		Status string `json:"status"`
	}
	jobAnswer struct {
		LastCheckpoint *int64 `json:"last_checkpoint"`
	}
	registrationAnswer struct {
		Epoch int64 `json:"epoch"`
	}
	pendingAnswer struct {
		Items []struct {
			Checkpoint int64  `json:"checkpoint"`
			Action     string `json:"action"`
		} `json:"items"`
	}
)

// benchJob is one job and its participants, driven by one worker.
type benchJob struct {
	name         string
	participants []*benchParticipant
	committables []byte
	last         int64 // the job's highest checkpoint id so far
}

type benchParticipant struct {
	name     string
	epoch    int64
	voteBody []byte
	ackBody  []byte
}

func (p *benchParticipant) setEpoch(epoch int64, committables []byte) {
	p.epoch = epoch
	p.voteBody = fmt.Appendf(nil, `{"epoch":%d,"vote":"prepared","committables":%s}`, epoch, committables)
	p.ackBody = fmt.Appendf(nil, `{"epoch":%d}`, epoch)
}

// setupJobs creates (or updates) every job with its participants, registers them, settles
// whatever an earlier run left owed, and reads each job's last checkpoint id.
func setupJobs(ctx context.Context, c *benchClient, cfg benchConfig) ([]*benchJob, error) {
	names := make([]string, cfg.participants)
	for i := range names {
		names[i] = benchParticipantName(i)
	}
	config, err := json.Marshal(map[string]any{
		"participants":               names,
		"checkpoint_timeout_ms":      max(60000, 2*cfg.roundTimeout.Milliseconds()),
		"max_concurrent_checkpoints": 1,
		"auto_commit":                true,
	})
	if err != nil {
		return nil, err
	}
	committables := benchCommittables(cfg.committablesBytes, cfg.committablesRandom)
	jobs := make([]*benchJob, cfg.jobs)
	errs := make([]error, cfg.jobs)
	var wg sync.WaitGroup
	limit := make(chan struct{}, 32) // setup is not what is measured: do not flood the server
	for i := range jobs {
		wg.Go(func() {
			limit <- struct{}{}
			defer func() { <-limit }()
			ctx, cancel := context.WithTimeout(ctx, max(30*time.Second, cfg.roundTimeout))
			defer cancel()
			j := &benchJob{name: benchJobName(cfg.jobPrefix, i), committables: committables}
			for _, n := range names {
				j.participants = append(j.participants, &benchParticipant{name: n})
			}
			errs[i] = j.setup(ctx, c, config)
			jobs[i] = j
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return jobs, nil
}

func (j *benchJob) setup(ctx context.Context, c *benchClient, config []byte) error {
	jobPath := "/v1/jobs/" + j.name
	var job jobAnswer
	if err := retryUnavailable(ctx, func() error {
		_, err := c.do(ctx, http.MethodPut, jobPath, config, http.StatusCreated, &job)
		return err
	}); err != nil {
		var re *requestError
		if !errors.As(err, &re) || re.code != "http_200" {
			return fmt.Errorf("create job %s: %w", j.name, err)
		}
		// 200: the job existed (an earlier run, or seeded): its configuration was replaced.
	}
	return j.register(ctx, c)
}

// retryUnavailable runs do again, up to four more times with a growing pause, while it
// fails with 503 unavailable, which says that nothing was applied: creating many jobs at
// once can find a row or the table locked by the others' inserts longer than the
// coordinator's lock_timeout. The setup is not measured; the rounds never retry.
func retryUnavailable(ctx context.Context, do func() error) error {
	pause := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := do()
		var re *requestError
		if err == nil || attempt == 5 || !errors.As(err, &re) || re.code != "unavailable" {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause *= 2
	}
}

// register starts a new epoch for every participant (which aborts any checkpoint an earlier
// run left preparing), acks what each still owes, and reads the job's last checkpoint id.
func (j *benchJob) register(ctx context.Context, c *benchClient) error {
	jobPath := "/v1/jobs/" + j.name
	for _, p := range j.participants {
		var reg registrationAnswer
		if err := retryUnavailable(ctx, func() error {
			_, err := c.do(ctx, http.MethodPost, jobPath+"/participants/"+p.name+"/register", nil, http.StatusOK, &reg)
			return err
		}); err != nil {
			return fmt.Errorf("register %s/%s: %w", j.name, p.name, err)
		}
		p.setEpoch(reg.Epoch, j.committables)
	}
	for _, p := range j.participants {
		// After every registration: registering one participant may abort a checkpoint
		// another voted on, which that one then owes a rollback ack for.
		var pending pendingAnswer
		if _, err := c.do(ctx, http.MethodGet, jobPath+"/participants/"+p.name+"/pending", nil, http.StatusOK, &pending); err != nil {
			return fmt.Errorf("pending of %s/%s: %w", j.name, p.name, err)
		}
		for _, item := range pending.Items {
			if item.Action != "commit" && item.Action != "abort" {
				continue
			}
			path := jobPath + "/checkpoints/" + strconv.FormatInt(item.Checkpoint, 10) + "/acks/" + p.name
			if _, err := c.do(ctx, http.MethodPut, path, p.ackBody, http.StatusOK, nil); err != nil {
				return fmt.Errorf("settle checkpoint %d of %s/%s: %w", item.Checkpoint, j.name, p.name, err)
			}
		}
	}
	var job jobAnswer
	if _, err := c.do(ctx, http.MethodGet, jobPath, nil, http.StatusOK, &job); err != nil {
		return fmt.Errorf("read job %s: %w", j.name, err)
	}
	j.last = 0
	if job.LastCheckpoint != nil {
		j.last = *job.LastCheckpoint
	}
	return nil
}

// Kinds of latency samples.
const (
	latRound    = "round"
	latDecision = "last_vote_to_decision_seen"
	latPrepare  = "prepare"
	latVote     = "vote"
	latWait     = "long_poll"
	latAck      = "ack"
)

// latencyKinds is the order the report lists them in.
var latencyKinds = []string{latRound, latDecision, latPrepare, latVote, latWait, latAck}

type sample struct {
	kind string
	d    time.Duration
}

type checkFailure struct{ kind, detail string }

// roundResult is what one round measured and found wrong.
type roundResult struct {
	start, end           time.Time
	decision             time.Duration // last vote sent -> waiter's answer with the decision
	lastVoterSawDecision bool
	requests             int
	stateChanges         int // prepares, votes and acks answered 2xx
	samples              []sample
	errs                 []*requestError
	checks               []checkFailure
}

func (res *roundResult) fail(err error) {
	var re *requestError
	if !errors.As(err, &re) {
		re = &requestError{code: "other", detail: err.Error()}
	}
	res.errs = append(res.errs, re)
}

func (res *roundResult) check(kind, format string, args ...any) {
	res.checks = append(res.checks, checkFailure{kind: kind, detail: fmt.Sprintf(format, args...)})
}

type voteResult struct {
	sent, answered time.Time
	status         string
	id             int64
	err            error
}

type waitResult struct {
	cp     checkpointAnswer
	seenAt time.Time
	polls  []time.Duration
	err    error
}

// round runs one checkpoint of j from prepare to the last ack, checking every answer.
func (r *benchRun) round(j *benchJob) roundResult {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.roundTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	res := roundResult{start: time.Now(), samples: make([]sample, 0, 2+2*len(j.participants))}
	jobPath := "/v1/jobs/" + j.name

	var prepared statusAnswer
	_, err := r.client.do(ctx, http.MethodPost, jobPath+"/checkpoints", nil, http.StatusCreated, &prepared)
	res.requests++
	if err != nil {
		res.fail(err)
		return res
	}
	res.stateChanges++
	res.samples = append(res.samples, sample{latPrepare, time.Since(res.start)})
	if prepared.ID != j.last+1 {
		res.check("id_not_next", "job %s: prepare answered checkpoint %d, the one before was %d", j.name, prepared.ID, j.last)
	}
	if prepared.Status != "preparing" {
		res.check("prepare_not_preparing", "job %s: prepare answered checkpoint %d %q", j.name, prepared.ID, prepared.Status)
	}
	if prepared.ID <= j.last {
		// Do not vote on an id that may belong to an earlier round.
		return res
	}
	j.last = prepared.ID
	id := strconv.FormatInt(prepared.ID, 10)
	cpPath := jobPath + "/checkpoints/" + id

	// The waiter long-polls while the participants vote.
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	waited := make(chan waitResult, 1)
	go func() { waited <- r.waitDecision(waitCtx, cpPath, deadline) }()

	votes := make([]voteResult, len(j.participants))
	var wg sync.WaitGroup
	for i, p := range j.participants {
		wg.Go(func() {
			var answer statusAnswer
			v := &votes[i]
			v.sent, v.err = r.client.do(ctx, http.MethodPut, cpPath+"/votes/"+p.name, p.voteBody, http.StatusOK, &answer)
			v.answered = time.Now()
			v.status, v.id = answer.Status, answer.ID
		})
	}
	wg.Wait()
	res.requests += len(votes)
	var lastVote *voteResult
	decidedByAVote := false
	for i := range votes {
		v := &votes[i]
		if v.err != nil {
			res.fail(v.err)
			continue
		}
		res.stateChanges++
		res.samples = append(res.samples, sample{latVote, v.answered.Sub(v.sent)})
		if lastVote == nil || v.sent.After(lastVote.sent) {
			lastVote = v
		}
		switch {
		case v.id != prepared.ID:
			res.check("wrong_checkpoint", "job %s: vote on %d answered checkpoint %d", j.name, prepared.ID, v.id)
		case v.status == "committing":
			decidedByAVote = true
		case v.status != "preparing":
			res.check("wrong_vote_answer", "job %s checkpoint %d: a vote answered %q", j.name, prepared.ID, v.status)
		}
	}
	if len(res.errs) > 0 {
		stopWaiting()
		<-waited
		return res
	}
	if !decidedByAVote {
		res.check("decision_not_in_vote_answer", "job %s checkpoint %d: no vote answer carried the decision (PUT votes answers the checkpoint after the vote)", j.name, prepared.ID)
	}
	res.lastVoterSawDecision = lastVote.status == "committing"

	w := <-waited
	res.requests += len(w.polls)
	if w.err != nil {
		res.fail(w.err)
		return res
	}
	for _, d := range w.polls {
		res.samples = append(res.samples, sample{latWait, d})
	}
	switch {
	case w.cp.ID != prepared.ID:
		res.check("wrong_checkpoint", "job %s: the waiter on %d got checkpoint %d", j.name, prepared.ID, w.cp.ID)
	case w.cp.Status == "preparing":
		res.check("not_decided", "job %s checkpoint %d: still preparing %s after prepare, all votes in", j.name, prepared.ID, r.cfg.roundTimeout)
	case w.cp.Status == "aborted":
		reason := ""
		if w.cp.AbortReason != nil {
			reason = *w.cp.AbortReason
		}
		res.check("aborted", "job %s checkpoint %d: aborted (%s) although every participant voted prepared", j.name, prepared.ID, reason)
	case w.cp.Status != "committing":
		res.check("wrong_decision", "job %s checkpoint %d: the waiter saw %q before any ack, want committing", j.name, prepared.ID, w.cp.Status)
	case !w.seenAt.After(lastVote.sent):
		res.check("decided_before_last_vote", "job %s checkpoint %d: the waiter saw the decision before the last vote was sent", j.name, prepared.ID)
	}
	if len(res.checks) > 0 {
		return res
	}
	j.checkVotes(&res, &w.cp)
	res.decision = w.seenAt.Sub(lastVote.sent)

	// Phase two: every participant applies the decision and acks.
	acks := make([]voteResult, len(j.participants))
	for i, p := range j.participants {
		wg.Go(func() {
			var answer statusAnswer
			a := &acks[i]
			a.sent, a.err = r.client.do(ctx, http.MethodPut, cpPath+"/acks/"+p.name, p.ackBody, http.StatusOK, &answer)
			a.answered = time.Now()
			a.status, a.id = answer.Status, answer.ID
		})
	}
	wg.Wait()
	res.end = time.Now()
	res.requests += len(acks)
	committed := false
	for i := range acks {
		a := &acks[i]
		if a.err != nil {
			res.fail(a.err)
			continue
		}
		res.stateChanges++
		res.samples = append(res.samples, sample{latAck, a.answered.Sub(a.sent)})
		switch {
		case a.id != prepared.ID:
			res.check("wrong_checkpoint", "job %s: ack on %d answered checkpoint %d", j.name, prepared.ID, a.id)
		case a.status == "committed":
			committed = true
		case a.status != "committing":
			res.check("wrong_ack_answer", "job %s checkpoint %d: an ack answered %q", j.name, prepared.ID, a.status)
		}
	}
	if len(res.errs) == 0 && !committed {
		res.check("not_committed", "job %s checkpoint %d: no ack answer says committed after every participant acked", j.name, prepared.ID)
	}
	if len(res.errs) == 0 && len(res.checks) == 0 {
		res.samples = append(res.samples, sample{latRound, res.end.Sub(res.start)}, sample{latDecision, res.decision})
	}
	return res
}

// checkVotes checks that the decided checkpoint holds every participant's prepared vote
// with its committables as sent.
func (j *benchJob) checkVotes(res *roundResult, cp *checkpointAnswer) {
	if cp.Votes != nil {
		// A minimal view: no entry, the counts.
		if len(cp.Participants) != 0 || cp.Votes.Prepared != len(j.participants) || cp.Votes.Abort != 0 || cp.Votes.Missing != 0 {
			res.check("vote_missing", "job %s checkpoint %d: the minimal view counts %+v prepared/abort/missing with %d entries, want %d prepared and no entry",
				j.name, cp.ID, *cp.Votes, len(cp.Participants), len(j.participants))
		}
		return
	}
	if len(cp.Participants) != len(j.participants) {
		res.check("participants_mismatch", "job %s checkpoint %d: %d participants, want %d", j.name, cp.ID, len(cp.Participants), len(j.participants))
		return
	}
	for i, p := range cp.Participants {
		want := j.participants[i].name
		switch {
		case p.Name != want:
			res.check("participants_mismatch", "job %s checkpoint %d: participant %d is %q, want %q", j.name, cp.ID, i, p.Name, want)
		case p.Vote == nil || *p.Vote != "prepared":
			res.check("vote_missing", "job %s checkpoint %d: %s has no prepared vote in the decided checkpoint", j.name, cp.ID, p.Name)
		case !bytes.Equal(p.Committables, j.committables) && !jsonEqual(p.Committables, j.committables):
			res.check("committables_mismatch", "job %s checkpoint %d: %s's committables came back as %.80s", j.name, cp.ID, p.Name, p.Committables)
		}
	}
}

func jsonEqual(a, b []byte) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

// waitDecision long-polls the checkpoint until it is no longer preparing or the round's
// deadline passes, and returns the answer and when it arrived.
func (r *benchRun) waitDecision(ctx context.Context, cpPath string, deadline time.Time) waitResult {
	var w waitResult
	for {
		wait := min(r.cfg.wait, time.Until(deadline)-20*time.Millisecond)
		if wait < time.Millisecond {
			if len(w.polls) > 0 {
				return w // still preparing at the deadline: the caller reports it
			}
			wait = 0
		}
		ms := strconv.FormatInt(wait.Milliseconds(), 10)
		sentAt := time.Now()
		w.cp = checkpointAnswer{}
		_, err := r.client.do(ctx, http.MethodGet, cpPath+"?wait_ms="+ms, nil, http.StatusOK, &w.cp)
		w.seenAt = time.Now()
		w.polls = append(w.polls, w.seenAt.Sub(sentAt))
		if err != nil {
			if ctx.Err() != nil && time.Now().Before(deadline) {
				err = nil // stopped because a vote failed: that error is the one reported
			}
			w.err = err
			return w
		}
		if w.cp.Status != "preparing" {
			return w
		}
		if w.seenAt.Sub(sentAt) < wait/2 {
			// Answered long before wait_ms without a decision: do not spin.
			select {
			case <-ctx.Done():
				return w
			case <-time.After(time.Millisecond):
			}
		}
	}
}

// recoverJob brings a job whose round failed back to a known state: the last checkpoint
// aborted or acked by everyone, and its id known. Participants are registered again when a
// request was fenced or not registered.
func (r *benchRun) recoverJob(ctx context.Context, j *benchJob, failed *roundResult) {
	rctx, cancel := context.WithTimeout(context.Background(), r.cfg.roundTimeout)
	defer cancel()
	var res roundResult
	defer func() {
		r.errorsAll.Add(int64(len(res.errs)))
		r.stats.record(&res, false)
	}()
	for _, e := range failed.errs {
		if e.code == "fenced" || e.code == "not_registered" {
			if err := j.register(rctx, r.client); err != nil {
				res.fail(err)
				return
			}
			break
		}
	}
	jobPath := "/v1/jobs/" + j.name
	var job jobAnswer
	if _, err := r.client.do(rctx, http.MethodGet, jobPath, nil, http.StatusOK, &job); err != nil {
		res.fail(err)
	} else if job.LastCheckpoint != nil {
		last := *job.LastCheckpoint
		cpPath := jobPath + "/checkpoints/" + strconv.FormatInt(last, 10)
		var cp statusAnswer
		if _, err := r.client.do(rctx, http.MethodGet, cpPath, nil, http.StatusOK, &cp); err != nil {
			res.fail(err)
		} else {
			if cp.Status == "preparing" {
				if _, err := r.client.do(rctx, http.MethodPost, cpPath+"/abort", []byte(`{"reason":"bench: the round failed"}`), http.StatusOK, &cp); err != nil {
					res.fail(err)
				}
			}
			if cp.Status == "committing" || cp.Status == "aborted" {
				for _, p := range j.participants {
					if _, err := r.client.do(rctx, http.MethodPut, cpPath+"/acks/"+p.name, p.ackBody, http.StatusOK, nil); err != nil {
						res.fail(err)
					}
				}
			}
		}
		if last > j.last {
			j.last = last
		}
	}
	// A failing server is not hammered.
	select {
	case <-ctx.Done():
	case <-time.After(50 * time.Millisecond):
	}
}
