package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/twophase/coordinator/clients/go/coordinatorclient"
)

// ctlCheckpoints is "ctl checkpoints": GET /v1/checkpoints, every page up to --limit.
func ctlCheckpoints(ctx context.Context, c *ctlRun, _ []string) (int, error) {
	var cursor *string
	if c.opts.cursor != "" {
		cursor = &c.opts.cursor
	}
	sts, _ := ctlParseStatuses(c.opts.status)
	var list ctlPage[coordinatorclient.Checkpoint]
	var err error
	if c.opts.newest {
		var params coordinatorclient.ListCheckpointsParams
		if sts != nil {
			params.Status = &sts
		}
		list, err = c.jobCheckpoints(ctx, c.opts.job, params, cursor, c.opts.limit)
	} else {
		var params coordinatorclient.ListOpenCheckpointsParams
		if sts != nil {
			params.Status = &sts
		}
		if c.opts.job != "" {
			params.Job = &c.opts.job
		}
		if c.opts.olderThan > 0 {
			ms := c.opts.olderThan.Milliseconds()
			params.OlderThanMs = &ms
		}
		list, err = c.openCheckpoints(ctx, params, cursor, c.opts.limit)
	}
	if err != nil {
		return 0, err
	}
	if c.json() {
		return ctlExitOK, c.writeJSON(ctlNewListJSON(list.raw, list.next))
	}
	if len(list.items) == 0 {
		fmt.Fprintln(c.stdout, "no checkpoints")
		return ctlExitOK, nil
	}
	now := c.now()
	tw := ctlNewTable(c.stdout, "JOB", "ID", "STATUS", "AGE", "DEADLINE", "VOTES", "ACKS", "DECIDED_BY", "CAUSE")
	for _, cp := range list.items {
		deadline := "-"
		if cp.Status == coordinatorclient.Preparing {
			deadline = ctlRelative(cp.Deadline, now)
		}
		cause := "-"
		if cp.DecisionCause != nil {
			cause = string(*cp.DecisionCause)
		}
		tw.row(cp.Job, strconv.FormatInt(cp.Id, 10), string(cp.Status), ctlAge(cp.CreatedAt, now), deadline,
			ctlVotes(cp), ctlAcks(cp), ctlOrDash(cp.DecidedBy), cause)
	}
	if err := tw.Flush(); err != nil {
		return 0, err
	}
	if list.next != nil {
		fmt.Fprintf(c.stderr, "coordinator ctl checkpoints: more checkpoints match than the %d shown: raise --limit, or go on with --cursor %s\n",
			len(list.items), *list.next)
	}
	return ctlExitOK, nil
}

// ctlCheckpoint is "ctl checkpoint JOB ID".
func ctlCheckpoint(ctx context.Context, c *ctlRun, args []string) (int, error) {
	job, id := args[0], ctlMustID(args[1])
	var cp *coordinatorclient.Checkpoint
	out, err := c.call(ctx, fmt.Sprintf("get checkpoint %s/%d", job, id), func(ctx context.Context) (ctlAnswer, error) {
		r, err := c.api.GetCheckpointWithResponse(ctx, job, id, nil)
		if err != nil {
			return ctlAnswer{}, err
		}
		cp = r.JSON200
		return ctlAnswer{r.HTTPResponse, r.Body, coordinatorclient.ProblemIn(r.HTTPResponse, r.Body), cp != nil}, nil
	})
	if err != nil {
		return 0, err
	}
	if c.json() {
		return ctlExitOK, c.writeRaw(out.body)
	}
	now := c.now()
	deadline := ctlStamp(cp.Deadline)
	if cp.Status == coordinatorclient.Preparing {
		deadline += " (" + ctlRelative(cp.Deadline, now) + ")"
	}
	cause := "-"
	if cp.DecisionCause != nil {
		cause = string(*cp.DecisionCause)
	}
	head := ctlNewTable(c.stdout)
	head.row("job:", cp.Job)
	head.row("checkpoint:", strconv.FormatInt(cp.Id, 10))
	head.row("status:", string(cp.Status))
	head.row("auto_commit:", strconv.FormatBool(cp.AutoCommit))
	head.row("created:", ctlStamp(cp.CreatedAt)+" ("+ctlAge(cp.CreatedAt, now)+" ago)")
	head.row("deadline:", deadline)
	head.row("decided_at:", ctlStampAgo(cp.DecidedAt, now))
	head.row("completed_at:", ctlStampAgo(cp.CompletedAt, now))
	head.row("decision_cause:", cause)
	head.row("decided_by:", ctlOrDash(cp.DecidedBy))
	head.row("abort_reason:", ctlOrDash(cp.AbortReason))
	head.row("votes:", ctlVotes(*cp))
	head.row("acks:", ctlAcks(*cp))
	if err := head.Flush(); err != nil {
		return 0, err
	}
	fmt.Fprintln(c.stdout)
	tw := ctlNewTable(c.stdout, "NAME", "VOTE", "EPOCH", "VOTED_AT", "ACKED_AT", "ACKED_BY", "COMMITTABLES")
	for _, p := range cp.Participants {
		vote := "-"
		if p.Vote != nil {
			vote = string(*p.Vote)
			if p.Reason != nil && *p.Reason != "" {
				vote += " (" + ctlTruncate(*p.Reason, 40) + ")"
			}
		}
		epoch := "-"
		if p.Epoch != nil {
			epoch = strconv.FormatInt(*p.Epoch, 10)
		}
		tw.row(p.Name, vote, epoch, ctlStampOrDash(p.VotedAt), ctlStampOrDash(p.AckedAt), ctlOrDash(p.AckedBy), ctlCommittables(p.Committables))
	}
	return ctlExitOK, tw.Flush()
}

// ctlPending is "ctl pending JOB PARTICIPANT".
func ctlPending(ctx context.Context, c *ctlRun, args []string) (int, error) {
	job, participant := args[0], args[1]
	var pending *coordinatorclient.Pending
	out, err := c.call(ctx, "pending "+job+"/"+participant, func(ctx context.Context) (ctlAnswer, error) {
		r, err := c.api.GetPendingWithResponse(ctx, job, participant, nil)
		if err != nil {
			return ctlAnswer{}, err
		}
		pending = r.JSON200
		return ctlAnswer{r.HTTPResponse, r.Body, coordinatorclient.ProblemIn(r.HTTPResponse, r.Body), pending != nil}, nil
	})
	if err != nil {
		return 0, err
	}
	if c.json() {
		return ctlExitOK, c.writeRaw(out.body)
	}
	owed := "nothing owed"
	if n := len(pending.Items); n > 0 {
		owed = fmt.Sprintf("%d owed, oldest first", n)
	}
	fmt.Fprintf(c.stdout, "participant %s of job %s, epoch %d: %s\n", ctlClean(pending.Participant), ctlClean(pending.Job), pending.Epoch, owed)
	if len(pending.Items) == 0 {
		return ctlExitOK, nil
	}
	tw := ctlNewTable(c.stdout, "CHECKPOINT", "STATUS", "ACTION", "COMMITTABLES")
	for _, it := range pending.Items {
		tw.row(strconv.FormatInt(it.Checkpoint, 10), string(it.Status), string(it.Action), ctlCommittables(it.Committables))
	}
	return ctlExitOK, tw.Flush()
}

// stuckJSON is an item of "ctl find-stuck -o json".
type ctlStuckJSON struct {
	Job        string          `json:"job"`
	ID         int64           `json:"id"`
	Status     string          `json:"status"`
	Stuck      string          `json:"stuck"` // committing or past_deadline
	WaitingFor []string        `json:"waiting_for"`
	Checkpoint json.RawMessage `json:"checkpoint"`
}

// ctlFindStuck is "ctl find-stuck": checkpoints committing for longer than
// --committing-for, and checkpoints preparing past their deadline.
func ctlFindStuck(ctx context.Context, c *ctlRun, _ []string) (int, error) {
	var job *string
	if c.opts.job != "" {
		job = &c.opts.job
	}
	committing := []coordinatorclient.CheckpointStatus{coordinatorclient.Committing}
	olderMs := c.opts.committingFor.Milliseconds()
	slow, err := c.openCheckpoints(ctx, coordinatorclient.ListOpenCheckpointsParams{Status: &committing, Job: job, OlderThanMs: &olderMs}, nil, 0)
	if err != nil {
		return 0, err
	}
	// A checkpoint past its deadline by the grace is at least that old.
	preparing := []coordinatorclient.CheckpointStatus{coordinatorclient.Preparing}
	graceMs := c.opts.grace.Milliseconds()
	open, err := c.openCheckpoints(ctx, coordinatorclient.ListOpenCheckpointsParams{Status: &preparing, Job: job, OlderThanMs: &graceMs}, nil, 0)
	if err != nil {
		return 0, err
	}
	now := c.now()
	var stuck []ctlStuckJSON
	var cps []coordinatorclient.Checkpoint
	for i, cp := range slow.items {
		var waiting []string
		for _, p := range cp.Participants {
			if p.AckedAt == nil {
				waiting = append(waiting, p.Name)
			}
		}
		stuck = append(stuck, ctlStuckJSON{cp.Job, cp.Id, string(cp.Status), "committing", waiting, slow.raw[i]})
		cps = append(cps, cp)
	}
	for i, cp := range open.items {
		if !now.After(cp.Deadline.Add(c.opts.grace)) {
			continue
		}
		var waiting []string
		for _, p := range cp.Participants {
			if p.Vote == nil {
				waiting = append(waiting, p.Name)
			}
		}
		stuck = append(stuck, ctlStuckJSON{cp.Job, cp.Id, string(cp.Status), "past_deadline", waiting, open.raw[i]})
		cps = append(cps, cp)
	}
	code := ctlExitOK
	if len(stuck) > 0 {
		code = ctlExitFound
	}
	if c.json() {
		if stuck == nil {
			stuck = []ctlStuckJSON{}
		}
		for i := range stuck {
			if stuck[i].WaitingFor == nil {
				stuck[i].WaitingFor = []string{}
			}
		}
		return code, c.writeJSON(struct {
			Items []ctlStuckJSON `json:"items"`
		}{stuck})
	}
	if len(stuck) == 0 {
		fmt.Fprintf(c.stdout, "nothing stuck: no checkpoint committing for over %s, none preparing past its deadline\n", ctlShort(c.opts.committingFor))
		return code, nil
	}
	tw := ctlNewTable(c.stdout, "JOB", "ID", "STATUS", "AGE", "STUCK", "WAITING_FOR")
	var unacked, deadlines bool
	for i, s := range stuck {
		cp := cps[i]
		var why, waiting string
		if s.Stuck == "committing" {
			unacked = true
			why = "committing, opened over " + ctlShort(c.opts.committingFor) + " ago"
			if cp.DecidedAt != nil {
				why = "committing, decided " + ctlAge(*cp.DecidedAt, now) + " ago"
			}
			waiting = "acks of " + strings.Join(s.WaitingFor, ", ")
			if len(s.WaitingFor) == 0 {
				waiting = "-"
			}
		} else {
			deadlines = true
			why = "preparing, deadline passed " + ctlAge(cp.Deadline, now) + " ago"
			switch {
			case len(s.WaitingFor) > 0:
				waiting = "votes of " + strings.Join(s.WaitingFor, ", ")
			case !cp.AutoCommit:
				waiting = "a commit request (auto_commit off)"
			default:
				waiting = "-"
			}
		}
		tw.row(s.Job, strconv.FormatInt(s.ID, 10), s.Status, ctlAge(cp.CreatedAt, now), why, waiting)
	}
	if err := tw.Flush(); err != nil {
		return 0, err
	}
	if unacked {
		fmt.Fprint(c.stdout, "\nA participant applies a commit, then acks: see what it owes with 'coordinator ctl pending JOB PARTICIPANT'.\n"+
			"One gone for good never will: once its output is dealt with, settle its acks with\n"+
			"'coordinator ctl complete JOB ID --reason ...'.\n")
	}
	if deadlines {
		fmt.Fprint(c.stdout, "\nA coordinator aborts an expired checkpoint within a second: is one running on this database?\n"+
			"'coordinator ctl abort JOB ID --reason ...' aborts it by hand.\n")
	}
	return code, nil
}

// ctlDecide is "ctl abort|commit|complete JOB ID [--reason R]".
func ctlDecide(action string) func(ctx context.Context, c *ctlRun, args []string) (int, error) {
	return func(ctx context.Context, c *ctlRun, args []string) (int, error) {
		job, id := args[0], ctlMustID(args[1])
		var reason *string
		if c.opts.reason != "" {
			reason = &c.opts.reason
		}
		var cp *coordinatorclient.Checkpoint
		out, err := c.call(ctx, fmt.Sprintf("%s %s/%d", action, job, id), func(ctx context.Context) (ctlAnswer, error) {
			switch action {
			case "abort":
				r, err := c.api.AbortCheckpointWithResponse(ctx, job, id, coordinatorclient.AbortRequest{Reason: reason})
				if err != nil {
					return ctlAnswer{}, err
				}
				cp = r.JSON200
				return ctlAnswer{r.HTTPResponse, r.Body, coordinatorclient.ProblemIn(r.HTTPResponse, r.Body), cp != nil}, nil
			case "commit":
				r, err := c.api.CommitCheckpointWithResponse(ctx, job, id, coordinatorclient.CommitRequest{Reason: reason})
				if err != nil {
					return ctlAnswer{}, err
				}
				cp = r.JSON200
				return ctlAnswer{r.HTTPResponse, r.Body, coordinatorclient.ProblemIn(r.HTTPResponse, r.Body), cp != nil}, nil
			default:
				r, err := c.api.CompleteCheckpointWithResponse(ctx, job, id, coordinatorclient.CompleteRequest{Reason: reason})
				if err != nil {
					return ctlAnswer{}, err
				}
				cp = r.JSON200
				return ctlAnswer{r.HTTPResponse, r.Body, coordinatorclient.ProblemIn(r.HTTPResponse, r.Body), cp != nil}, nil
			}
		})
		if err != nil {
			return 0, err
		}
		if c.json() {
			return ctlExitOK, c.writeRaw(out.body)
		}
		fmt.Fprintln(c.stdout, ctlSummary(*cp))
		return ctlExitOK, nil
	}
}

// summary is a checkpoint in one line: its status, how it was decided, and what is owed.
func ctlSummary(cp coordinatorclient.Checkpoint) string {
	var b strings.Builder
	fmt.Fprintf(&b, "checkpoint %d of job %s: %s", cp.Id, ctlClean(cp.Job), cp.Status)
	var how []string
	if cp.DecisionCause != nil {
		how = append(how, "cause "+string(*cp.DecisionCause))
	}
	if cp.DecidedBy != nil {
		how = append(how, "decided by "+ctlClean(*cp.DecidedBy))
	}
	if cp.AbortReason != nil && *cp.AbortReason != "" {
		how = append(how, "reason: "+ctlTruncate(*cp.AbortReason, 80))
	}
	if len(how) > 0 {
		b.WriteString(" (" + strings.Join(how, ", ") + ")")
	}
	var unacked, settled []string
	settledBy := ""
	for _, p := range cp.Participants {
		switch {
		case p.AckedAt == nil && cp.Status == coordinatorclient.Committing:
			unacked = append(unacked, p.Name)
		case p.AckedBy != nil && *p.AckedBy != p.Name:
			settled = append(settled, p.Name)
			settledBy = *p.AckedBy
		}
	}
	if len(settled) > 0 {
		fmt.Fprintf(&b, "; acks settled by %s for %s", ctlClean(settledBy), ctlClean(strings.Join(settled, ", ")))
	}
	if len(unacked) > 0 {
		b.WriteString("; waiting for the acks of " + ctlClean(strings.Join(unacked, ", ")))
	}
	return b.String()
}

// ctlAudit is "ctl audit": GET /v1/audit, newest first, up to --limit.
func ctlAudit(ctx context.Context, c *ctlRun, _ []string) (int, error) {
	list, err := ctlCollect(ctx, c.opts.limit, func(ctx context.Context, cursor *string, limit int) (ctlPage[coordinatorclient.AuditEntry], error) {
		params := coordinatorclient.ListAuditParams{Cursor: cursor, Limit: &limit}
		if c.opts.job != "" {
			params.Job = &c.opts.job
		}
		var l *coordinatorclient.AuditList
		out, err := c.call(ctx, "list audit", func(ctx context.Context) (ctlAnswer, error) {
			r, err := c.api.ListAuditWithResponse(ctx, &params)
			if err != nil {
				return ctlAnswer{}, err
			}
			l = r.JSON200
			return ctlAnswer{r.HTTPResponse, r.Body, coordinatorclient.ProblemIn(r.HTTPResponse, r.Body), l != nil}, nil
		})
		if err != nil {
			return ctlPage[coordinatorclient.AuditEntry]{}, err
		}
		raw, err := ctlRawItems(out.body)
		if err != nil {
			return ctlPage[coordinatorclient.AuditEntry]{}, ctlNoAnswer{op: "list audit", err: err}
		}
		return ctlPage[coordinatorclient.AuditEntry]{items: l.Items, raw: raw, next: l.NextCursor}, nil
	})
	if err != nil {
		return 0, err
	}
	if c.json() {
		return ctlExitOK, c.writeJSON(ctlNewListJSON(list.raw, list.next))
	}
	if len(list.items) == 0 {
		fmt.Fprintln(c.stdout, "no audit entries")
		return ctlExitOK, nil
	}
	tw := ctlNewTable(c.stdout, "AT", "ACTION", "JOB", "CHECKPOINT", "TOKEN", "SUBJECT", "REASON", "REQUEST_ID")
	for _, e := range list.items {
		cp := "-"
		if e.Checkpoint != nil {
			cp = strconv.FormatInt(*e.Checkpoint, 10)
		}
		reason := "-"
		if e.Reason != nil && *e.Reason != "" {
			reason = ctlTruncate(*e.Reason, 60)
		}
		tw.row(ctlStamp(e.At), string(e.Action), ctlOrDash(e.Job), cp, ctlOrDash(e.Token), ctlOrDash(e.Subject), reason, ctlOrDash(e.RequestId))
	}
	if err := tw.Flush(); err != nil {
		return 0, err
	}
	if list.next != nil {
		fmt.Fprintf(c.stderr, "coordinator ctl audit: more entries than the %d shown: raise --limit\n", len(list.items))
	}
	return ctlExitOK, nil
}

// writeRaw prints a JSON document as the API sent it, indented.
func (c *ctlRun) writeRaw(body []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(body), "", "  "); err != nil {
		return ctlNoAnswer{op: "print", err: err}
	}
	buf.WriteByte('\n')
	_, err := c.stdout.Write(buf.Bytes())
	return err
}

func ctlMustID(s string) int64 {
	id, _ := strconv.ParseInt(s, 10, 64) // checked by checkCtlArg
	return id
}

// table is a tabwriter whose cells are cleaned of control characters.
type ctlTable struct{ *tabwriter.Writer }

func ctlNewTable(w io.Writer, header ...string) ctlTable {
	t := ctlTable{tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t ctlTable) row(cells ...string) {
	for i, c := range cells {
		if c == "" {
			c = "-"
		}
		cells[i] = ctlClean(c)
	}
	fmt.Fprintln(t, strings.Join(cells, "\t"))
}

// clean makes text from the API safe to print on a terminal, in one line: spaces for
// tabs and line breaks, '?' for other control and formatting characters (escape
// sequences, bidirectional overrides).
func ctlClean(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			return ' '
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError:
			return '?'
		}
		return r
	}, s)
}

// truncate shortens s to at most n runes, with an ellipsis when it cut.
func ctlTruncate(s string, n int) string {
	s = ctlClean(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// committables is a participant's committables in short: compact JSON, truncated.
func ctlCommittables(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "-"
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) == nil {
		raw = buf.Bytes()
	}
	if string(raw) == "[]" {
		return "-"
	}
	return ctlTruncate(string(raw), 48)
}

func ctlOrDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

// stamp is a timestamp of the API, in UTC to the second.
func ctlStamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func ctlStampOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return ctlStamp(*t)
}

func ctlStampAgo(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return ctlStamp(*t) + " (" + ctlAge(*t, now) + " ago)"
}

// age is how long ago t was, in short (0s when t is ahead: the clocks differ).
func ctlAge(t, now time.Time) string { return ctlShort(now.Sub(t)) }

// relative is a time to come or gone, from now: "in 45s", "12s ago".
func ctlRelative(t, now time.Time) string {
	if d := t.Sub(now); d > 0 {
		return "in " + ctlShort(d)
	}
	return ctlShort(now.Sub(t)) + " ago"
}

// short is a duration in at most two units: 45s, 12m5s, 3h, 2d3h.
func ctlShort(d time.Duration) string {
	s := int64(max(d, 0) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return ctlUnits(s/60, "m", s%60, "s")
	case s < 86400:
		return ctlUnits(s/3600, "h", s%3600/60, "m")
	}
	return ctlUnits(s/86400, "d", s%86400/3600, "h")
}

func ctlUnits(a int64, ua string, b int64, ub string) string {
	if b == 0 {
		return fmt.Sprintf("%d%s", a, ua)
	}
	return fmt.Sprintf("%d%s%d%s", a, ua, b, ub)
}

// votes is how many participants voted prepared, of all: "2/3", "1/3, 1 abort".
func ctlVotes(cp coordinatorclient.Checkpoint) string {
	prepared, aborts := 0, 0
	for _, p := range cp.Participants {
		if p.Vote == nil {
			continue
		}
		switch *p.Vote {
		case coordinatorclient.VoteKindPrepared:
			prepared++
		case coordinatorclient.VoteKindAbort:
			aborts++
		}
	}
	s := fmt.Sprintf("%d/%d", prepared, len(cp.Participants))
	if aborts > 0 {
		s += fmt.Sprintf(", %d abort", aborts)
	}
	return s
}

// acks is how many participants acked, of those that owe one: all of them once commit is
// decided, those that voted prepared on an aborted checkpoint; "-" while preparing.
func ctlAcks(cp coordinatorclient.Checkpoint) string {
	owe, acked := 0, 0
	for _, p := range cp.Participants {
		switch cp.Status {
		case coordinatorclient.Committing, coordinatorclient.Committed:
		case coordinatorclient.Aborted:
			if p.Vote == nil || *p.Vote != coordinatorclient.VoteKindPrepared {
				continue
			}
		default:
			return "-"
		}
		owe++
		if p.AckedAt != nil {
			acked++
		}
	}
	if owe == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", acked, owe)
}
