package storetest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// memStore is the reference store, a plain in-memory implementation of the contract: the
// suite runs on it (memstore_test.go) so that a failure against a real store is the store's
// and not the suite's. It serialises every transaction on one mutex: Update works on a deep
// copy that replaces the state when it commits.
type memStore struct {
	mu    sync.Mutex
	state *memState
	// tokens by name, and their version (TokenStore).
	tokens        map[string]*coordinator.Token
	tokensVersion int64

	broker coordinator.Broker
}

type memKey struct {
	job string
	id  int64
}

type memState struct {
	jobs map[string]*coordinator.Job
	seqs map[string]int64
	// createdSeqs are each job's seq when it was created (again): its last checkpoint is
	// its seq once past it, whatever retention deleted.
	createdSeqs map[string]int64
	epochs      map[string]map[string]int64
	// registered are when each job's participants last registered.
	registered map[string]map[string]time.Time
	cps        map[string]map[int64]*coordinator.Checkpoint
	idem       map[string]map[string]coordinator.IdempotencyRecord
	global     int64
	audit      []coordinator.AuditEntry
	// events are the status changes, in order; eventTx numbers the transactions that made
	// them; horizon is the last one PruneEvents deleted.
	events  []coordinator.StatusEvent
	eventTx int64
	horizon *coordinator.EventPosition
}

var _ coordinator.Store = (*memStore)(nil)

func newMemStore() *memStore {
	return &memStore{
		state: &memState{
			jobs:        map[string]*coordinator.Job{},
			seqs:        map[string]int64{},
			createdSeqs: map[string]int64{},
			epochs:      map[string]map[string]int64{},
			registered:  map[string]map[string]time.Time{},
			cps:         map[string]map[int64]*coordinator.Checkpoint{},
			idem:        map[string]map[string]coordinator.IdempotencyRecord{},
		},
	}
}

func cloneCheckpoint(cp *coordinator.Checkpoint) *coordinator.Checkpoint {
	out := cp.Clone()
	for i := range out.Participants {
		out.Participants[i].Committables = slices.Clone(out.Participants[i].Committables)
	}
	return out
}

func (s *memState) clone() *memState {
	out := &memState{
		jobs:        map[string]*coordinator.Job{},
		seqs:        maps.Clone(s.seqs),
		createdSeqs: maps.Clone(s.createdSeqs),
		epochs:      map[string]map[string]int64{},
		registered:  map[string]map[string]time.Time{},
		cps:         map[string]map[int64]*coordinator.Checkpoint{},
		idem:        map[string]map[string]coordinator.IdempotencyRecord{},
		global:      s.global,
		audit:       slices.Clone(s.audit),
		events:      slices.Clone(s.events),
		eventTx:     s.eventTx,
		horizon:     s.horizon,
	}
	for k, j := range s.jobs {
		c := *j
		c.Config.Participants = slices.Clone(j.Config.Participants)
		out.jobs[k] = &c
	}
	for k, e := range s.epochs {
		out.epochs[k] = maps.Clone(e)
	}
	for k, r := range s.registered {
		out.registered[k] = maps.Clone(r)
	}
	for k, m := range s.cps {
		out.cps[k] = map[int64]*coordinator.Checkpoint{}
		for id, cp := range m {
			out.cps[k][id] = cloneCheckpoint(cp)
		}
	}
	for k, m := range s.idem {
		out.idem[k] = maps.Clone(m)
	}
	return out
}

// job returns a copy of the job as stored, Seq and Epochs filled.
func (s *memState) job(name string) *coordinator.Job {
	j := *s.jobs[name]
	j.Config.Participants = slices.Clone(j.Config.Participants)
	j.Seq = s.seqs[name]
	j.Epochs = maps.Clone(s.epochs[name])
	if j.Epochs == nil {
		j.Epochs = map[string]int64{}
	}
	return &j
}

func (s *memState) shown(name string) *coordinator.Job {
	j := s.job(name)
	if j.Seq > s.createdSeqs[name] {
		last := j.Seq
		j.LastCheckpoint = &last
	}
	for id, cp := range s.cps[name] {
		if (cp.Status == coordinator.StatusCommitting || cp.Status == coordinator.StatusCommitted) && (j.LastCommitted == nil || id > *j.LastCommitted) {
			j.LastCommitted = &id
		}
	}
	return j
}

func (s *memState) sorted(job string) []*coordinator.Checkpoint {
	var out []*coordinator.Checkpoint
	for _, cp := range s.cps[job] {
		out = append(out, cp)
	}
	slices.SortFunc(out, func(a, b *coordinator.Checkpoint) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

var errReadOnly = errors.New("write in a read-only transaction")

type memTx struct {
	state    *memState
	name     string
	now      time.Time
	readOnly bool
	decided  []*coordinator.Checkpoint
	eventTx  int64 // the number of the transaction's status changes, 0 until it has one
	// announced: a checkpoint opened, an epoch changed or the job deleted; the job's
	// waiters are told once applied.
	announced bool
}

func (s *memStore) Update(ctx context.Context, job string, _ int64, fn func(tx coordinator.JobTx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state.jobs[job] == nil {
		return coordinator.ErrNotFound
	}
	tx := &memTx{state: s.state.clone(), name: job, now: time.Now()}
	err := fn(tx)
	if err != nil && !coordinator.IsRejection(err) {
		return err
	}
	s.state = tx.state
	if tx.announced {
		s.broker.NotifyJob(job)
	}
	for _, cp := range tx.decided {
		s.broker.Publish(cp)
	}
	return err
}

func (s *memStore) GetCheckpoint(ctx context.Context, job string, id int64) (*coordinator.Checkpoint, error) {
	var cp *coordinator.Checkpoint
	err := s.View(ctx, job, func(tx coordinator.JobTx) error {
		var err error
		cp, err = tx.Checkpoint(ctx, id)
		if err == coordinator.ErrNotFound {
			cp, err = nil, nil
			if coordinator.Gone(id, tx.Job().Seq) {
				err = coordinator.ErrGone
			}
		}
		return err
	})
	return cp, err
}

func (s *memStore) View(ctx context.Context, job string, fn func(tx coordinator.JobTx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state.jobs[job] == nil {
		return coordinator.ErrNotFound
	}
	return fn(&memTx{state: s.state.clone(), name: job, now: time.Now(), readOnly: true})
}

func (s *memStore) Owing(ctx context.Context, job, participant string) (*coordinator.Job, time.Time, []*coordinator.Checkpoint, error) {
	return coordinator.OwingByView(ctx, s, job, participant)
}

func (s *memStore) PutJob(ctx context.Context, name string, cfg coordinator.JobConfig, audit *coordinator.AuditEntry) (*coordinator.Job, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	cfg.Participants = slices.Clone(cfg.Participants)
	j, ok := s.state.jobs[name]
	if !ok {
		j = &coordinator.Job{Name: name, CreatedAt: now}
		s.state.jobs[name] = j
		s.state.createdSeqs[name] = s.state.seqs[name]
	}
	j.Config, j.UpdatedAt = cfg, now
	if audit != nil {
		a := *audit
		a.Action = coordinator.AuditJobUpdated
		if !ok {
			a.Action = coordinator.AuditJobCreated
		}
		s.state.record(a)
	}
	s.broker.NotifyJob(name) // its long-polls on pending look at it again
	// The job as GetJob shows it, last checkpoints included, as the real stores answer
	// (and PUT /v1/jobs/{job} with them).
	return s.state.shown(name), !ok, nil
}

func (s *memStore) GetJob(ctx context.Context, name string) (*coordinator.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state.jobs[name] == nil {
		return nil, coordinator.ErrNotFound
	}
	return s.state.shown(name), nil
}

// Participants implements coordinator.Store from the checkpoints kept: the reference the
// real stores' queries are compared with.
func (s *memStore) Participants(ctx context.Context, job string, names []string) ([]coordinator.ParticipantActivity, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.Sorted(maps.Keys(s.state.cps[job]))
	slices.Reverse(ids)
	out := make([]coordinator.ParticipantActivity, 0, len(names))
	for _, name := range names {
		p := coordinator.ParticipantActivity{Name: name, Epoch: s.state.epochs[job][name]}
		if at, ok := s.state.registered[job][name]; ok {
			p.RegisteredAt = &at
		}
		for _, id := range ids {
			cp := s.state.cps[job][id]
			for _, e := range cp.Participants {
				if e.Name != name {
					continue
				}
				if p.LastVoteAt == nil && e.VotedAt != nil {
					at, d := *e.VotedAt, e.VotedAt.Sub(cp.CreatedAt).Truncate(time.Millisecond)
					p.LastVoteAt, p.LastVote = &at, &d
				}
				if p.LastAckAt == nil && e.AckedAt != nil {
					at := *e.AckedAt
					p.LastAckAt = &at
				}
				if e.AckedAt == nil && ((cp.Status == coordinator.StatusPreparing && e.Vote == "") || cp.Status == coordinator.StatusCommitting ||
					(cp.Status == coordinator.StatusAborted && e.Vote == coordinator.VotePrepared)) {
					p.Owed++
				}
			}
		}
		out = append(out, p)
	}
	return out, nil
}

func (s *memStore) ListJobs(ctx context.Context, pattern coordinator.JobPattern, after string, limit int) ([]*coordinator.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := slices.Sorted(maps.Keys(s.state.jobs))
	var out []*coordinator.Job
	for _, n := range names {
		if n > after && len(out) < limit && (pattern == "" || pattern.Matches(n)) {
			out = append(out, s.state.shown(n))
		}
	}
	return out, nil
}

func (s *memStore) ListCheckpoints(ctx context.Context, q coordinator.CheckpointQuery) ([]*coordinator.Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*coordinator.Checkpoint
	if q.Job != "" {
		all = s.state.sorted(q.Job)
		slices.Reverse(all)
	} else {
		for job := range s.state.cps {
			all = append(all, s.state.sorted(job)...)
		}
		slices.SortFunc(all, func(a, b *coordinator.Checkpoint) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	var out []*coordinator.Checkpoint
	for _, cp := range all {
		pos := cp.Seq
		if q.Job != "" {
			pos = cp.ID
		}
		if q.After != 0 && ((q.Job != "" && pos >= q.After) || (q.Job == "" && pos <= q.After)) {
			continue
		}
		if len(q.Statuses) > 0 && !slices.Contains(q.Statuses, cp.Status) {
			continue
		}
		if q.Job == "" && q.Jobs != "" && !q.Jobs.Matches(cp.Job) {
			continue
		}
		if q.Job == "" && q.OlderThan > 0 && !cp.CreatedAt.Before(time.Now().Add(-q.OlderThan)) {
			continue
		}
		if len(out) < q.Limit {
			out = append(out, cloneCheckpoint(cp))
		}
	}
	return out, nil
}

func (s *memStore) ExpiredJobs(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []string
	for job := range s.state.cps {
		for _, cp := range s.state.cps[job] {
			if cp.Status == coordinator.StatusPreparing && !now.Before(cp.Deadline) {
				out = append(out, job)
				break
			}
		}
	}
	return out, nil
}

func (s *memStore) Subscribe(job string, id int64) *coordinator.Subscription {
	return s.broker.Subscribe(job, id)
}

func (s *memStore) Ready(ctx context.Context) error { return nil }

func (s *memStore) Close() {}

func (tx *memTx) Now() time.Time        { return tx.now }
func (tx *memTx) Job() *coordinator.Job { return tx.state.job(tx.name) }

func (tx *memTx) Preparing(ctx context.Context) ([]*coordinator.Checkpoint, error) {
	var out []*coordinator.Checkpoint
	for _, cp := range tx.state.sorted(tx.name) {
		if cp.Status == coordinator.StatusPreparing {
			out = append(out, cloneCheckpoint(cp))
		}
	}
	return out, nil
}

func (tx *memTx) Checkpoint(ctx context.Context, id int64) (*coordinator.Checkpoint, error) {
	cp := tx.state.cps[tx.name][id]
	if cp == nil {
		return nil, coordinator.ErrNotFound
	}
	return cloneCheckpoint(cp), nil
}

func (tx *memTx) Owing(ctx context.Context, participant string) ([]*coordinator.Checkpoint, error) {
	var out []*coordinator.Checkpoint
	for _, cp := range tx.state.sorted(tx.name) {
		if coordinator.MayOwe(cp, participant) {
			out = append(out, cloneCheckpoint(cp))
		}
	}
	return out, nil
}

func (tx *memTx) Idempotency(ctx context.Context, key string) (coordinator.IdempotencyRecord, bool, error) {
	rec, ok := tx.state.idem[tx.name][key]
	return rec, ok, nil
}

// Apply writes what the rules decided with coordinator.Mutation.Apply, as the real stores'
// caches do; what a real store writes in SQL must read back the same.
// recordEvents records m's status changes, all with the transaction's number, in the order
// of the stores: by checkpoint, then rank.
func (tx *memTx) recordEvents(m *coordinator.Mutation) {
	var add []coordinator.StatusEvent
	if m.Opened != nil {
		add = append(add, coordinator.StatusEvent{Status: m.Opened.Status, At: m.Opened.CreatedAt,
			EventPosition: coordinator.EventPosition{Job: tx.name, Checkpoint: m.Opened.ID, Rank: coordinator.StatusRank(m.Opened.Status)}})
	}
	for _, cp := range m.Statuses {
		at := cp.CreatedAt
		if cp.CompletedAt != nil {
			at = *cp.CompletedAt
		} else if cp.DecidedAt != nil {
			at = *cp.DecidedAt
		}
		add = append(add, coordinator.StatusEvent{Status: cp.Status, At: at,
			EventPosition: coordinator.EventPosition{Job: tx.name, Checkpoint: cp.ID, Rank: coordinator.StatusRank(cp.Status)}})
	}
	if len(add) == 0 {
		return
	}
	if tx.eventTx == 0 {
		tx.state.eventTx++
		tx.eventTx = tx.state.eventTx
	}
	for i := range add {
		add[i].Tx = tx.eventTx
	}
	tx.state.events = append(tx.state.events, add...)
	slices.SortStableFunc(tx.state.events, func(a, b coordinator.StatusEvent) int {
		switch {
		case a.EventPosition.Less(b.EventPosition):
			return -1
		case b.EventPosition.Less(a.EventPosition):
			return 1
		}
		return 0
	})
}

func (tx *memTx) Apply(ctx context.Context, m *coordinator.Mutation) error {
	if tx.readOnly {
		return errReadOnly
	}
	if tx.state.cps[tx.name] == nil {
		tx.state.cps[tx.name] = map[int64]*coordinator.Checkpoint{}
	}
	cps := tx.state.cps[tx.name]
	if m.Opened != nil && cps[m.Opened.ID] != nil {
		return errors.New("duplicate checkpoint id")
	}
	job := tx.state.job(tx.name)
	if !m.Apply(job, cps) {
		return coordinator.ErrNotFound
	}
	tx.state.seqs[tx.name], tx.state.epochs[tx.name] = job.Seq, job.Epochs
	for _, e := range m.Epochs {
		if tx.state.registered[tx.name] == nil {
			tx.state.registered[tx.name] = map[string]time.Time{}
		}
		tx.state.registered[tx.name][e.Participant] = tx.Now()
	}
	if m.Opened != nil {
		tx.state.global++
		m.Opened.Seq = tx.state.global
		cps[m.Opened.ID].Seq = tx.state.global
	}
	if rec := m.Idempotency; rec != nil {
		if tx.state.idem[tx.name] == nil {
			tx.state.idem[tx.name] = map[string]coordinator.IdempotencyRecord{}
		}
		tx.state.idem[tx.name][rec.Key] = *rec
	}
	for _, cp := range m.Statuses {
		tx.decided = append(tx.decided, cp.Clone())
	}
	tx.recordEvents(m)
	tx.announced = tx.announced || m.Opened != nil || len(m.Epochs) > 0 || m.JobDeleted
	if m.JobDeleted {
		delete(tx.state.jobs, tx.name)
		delete(tx.state.cps, tx.name)
		delete(tx.state.idem, tx.name)
	}
	for _, a := range m.Audit {
		tx.state.record(a)
	}
	return nil
}

// record appends an audit entry, with the next id and, if it has none, the time.
func (s *memState) record(a coordinator.AuditEntry) {
	a.ID = int64(len(s.audit)) + 1
	if a.At.IsZero() {
		a.At = time.Now().UTC()
	}
	s.audit = append(s.audit, a)
}

func (s *memStore) ListAudit(ctx context.Context, q coordinator.AuditQuery) ([]*coordinator.AuditEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*coordinator.AuditEntry
	for i := len(s.state.audit) - 1; i >= 0 && len(out) < q.Limit; i-- {
		a := s.state.audit[i]
		if q.Before != 0 && a.ID >= q.Before {
			continue
		}
		if a.Job == "" && !q.WithTokens || a.Job != "" && q.Jobs != "" && !q.Jobs.Matches(a.Job) {
			continue
		}
		out = append(out, &a)
	}
	return out, nil
}

// The reference store keeps tokens too, so that the contract holds of it.

var _ coordinator.TokenStore = (*memStore)(nil)

func (s *memStore) CreateToken(ctx context.Context, t *coordinator.Token, audit *coordinator.AuditEntry) (*coordinator.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tokens[t.Name] != nil {
		return nil, &coordinator.Error{Code: coordinator.CodeTokenExists, Message: "a token named " + t.Name + " exists already"}
	}
	for _, other := range s.tokens {
		if bytes.Equal(other.Digest, t.Digest) {
			return nil, errors.New("digest taken")
		}
	}
	if s.tokens == nil {
		s.tokens = map[string]*coordinator.Token{}
	}
	out := *t
	out.CreatedAt = time.Now().UTC().Truncate(time.Microsecond)
	s.tokens[t.Name] = &out
	s.tokensVersion++
	if audit != nil {
		s.state.record(*audit)
	}
	cp := out
	return &cp, nil
}

func (s *memStore) GetToken(ctx context.Context, name string) (*coordinator.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tokens[name]
	if t == nil {
		return nil, coordinator.ErrNotFound
	}
	cp := *t
	return &cp, nil
}

func (s *memStore) ListTokens(ctx context.Context, after string, limit int) ([]*coordinator.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*coordinator.Token
	for _, name := range slices.Sorted(maps.Keys(s.tokens)) {
		if name > after && (limit <= 0 || len(out) < limit) {
			cp := *s.tokens[name]
			out = append(out, &cp)
		}
	}
	return out, nil
}

func (s *memStore) DeleteToken(ctx context.Context, name string, audit *coordinator.AuditEntry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tokens[name] == nil {
		return coordinator.ErrNotFound
	}
	delete(s.tokens, name)
	s.tokensVersion++
	if audit != nil {
		s.state.record(*audit)
	}
	return nil
}

func (s *memStore) TokensVersion(ctx context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokensVersion, nil
}

func (s *memStore) Stats(ctx context.Context, lastCommitted bool) (*coordinator.Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &coordinator.Stats{LastCommitted: map[string]int64{}}
	for _, job := range slices.Sorted(maps.Keys(s.state.jobs)) {
		open := map[coordinator.Status]*coordinator.OpenCheckpoints{}
		for _, cp := range s.state.sorted(job) {
			switch cp.Status {
			case coordinator.StatusPreparing, coordinator.StatusCommitting:
				o := open[cp.Status]
				if o == nil {
					o = &coordinator.OpenCheckpoints{Job: job, Status: cp.Status, Oldest: cp.CreatedAt}
					open[cp.Status] = o
				}
				o.Count++
				if cp.CreatedAt.Before(o.Oldest) {
					o.Oldest = cp.CreatedAt
				}
			}
			if lastCommitted && (cp.Status == coordinator.StatusCommitting || cp.Status == coordinator.StatusCommitted) {
				out.LastCommitted[job] = max(out.LastCommitted[job], cp.ID)
			}
		}
		for _, st := range []coordinator.Status{coordinator.StatusPreparing, coordinator.StatusCommitting} {
			if o := open[st]; o != nil {
				out.Open = append(out.Open, *o)
			}
		}
	}
	return out, nil
}

func (s *memStore) DeleteExpired(ctx context.Context, jobs []string, limit int) (int, string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	deleted := 0
	for _, job := range jobs {
		expired := s.expired(job)
		if len(expired) > limit-deleted {
			expired = expired[:limit-deleted]
		}
		for _, cp := range expired {
			delete(s.state.cps[job], cp.ID)
			for key, rec := range s.state.idem[job] {
				if rec.Checkpoint == cp.ID {
					delete(s.state.idem[job], key)
				}
			}
		}
		deleted += len(expired)
		if deleted >= limit {
			return deleted, job, false, nil
		}
	}
	return deleted, "", false, nil
}

func (s *memStore) JobsToPrune(ctx context.Context, after string, limit int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for job := range s.state.jobs {
		if job > after && len(s.expired(job)) > 0 {
			out = append(out, job)
		}
	}
	slices.Sort(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// expired returns, oldest completion first, the checkpoints of job that retention deletes now.
func (s *memStore) expired(job string) []*coordinator.Checkpoint {
	j := s.state.jobs[job]
	if j == nil || j.Config.Retention <= 0 {
		return nil
	}
	var last int64
	for _, cp := range s.state.cps[job] {
		if cp.Status == coordinator.StatusCommitting || cp.Status == coordinator.StatusCommitted {
			last = max(last, cp.ID)
		}
	}
	now := time.Now()
	var expired []*coordinator.Checkpoint
	for _, cp := range s.state.cps[job] {
		if coordinator.Deletable(cp, now, j.Config.Retention, last) {
			expired = append(expired, cp)
		}
	}
	slices.SortFunc(expired, func(a, b *coordinator.Checkpoint) int { return a.CompletedAt.Compare(*b.CompletedAt) })
	return expired
}

var _ coordinator.EventStore = (*memStore)(nil)

func (s *memStore) Events(ctx context.Context, job string, after coordinator.EventPosition, limit int) (coordinator.EventPage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var page coordinator.EventPage
	if job != "" {
		after.Job = job
	}
	for _, e := range s.state.events {
		if len(page.Events) == limit {
			break
		}
		if (job == "" || e.Job == job) && after.Less(e.EventPosition) {
			page.Events = append(page.Events, e)
		}
	}
	page.Reset = s.state.horizon != nil && after.Less(*s.state.horizon)
	return page, nil
}

func (s *memStore) EventHead(ctx context.Context) (coordinator.EventPosition, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return coordinator.EventPosition{Tx: s.state.eventTx + 1}, nil
}

func (s *memStore) PruneEvents(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for n < len(s.state.events) && n < limit && s.state.events[n].At.Before(cutoff) {
		n++
	}
	if n > 0 {
		last := s.state.events[n-1].EventPosition
		s.state.horizon = &last
		s.state.events = slices.Clone(s.state.events[n:])
	}
	return n, nil
}

func (s *memStore) SubscribeEverything() *coordinator.Subscription {
	return s.broker.SubscribeEverything()
}
