package e2e_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"iter"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/twophase/coordinator/e2e/harness"
)

// Checked histories: every request a fault test sends through a history is recorded with
// its answer and the monotonic times it was sent and answered, and afterwards each job's
// history is checked with Porcupine against historyModel, a sequential specification of
// the protocol's rules for one job. The check passes only if the answers can be put in one
// order, each between its request and its answer, in which every answer follows from the
// ones before: ids handed out one by one, epochs that only grow, fencing, votes that stay
// recorded, commits only on unanimity and in checkpoint order, decisions never reversed,
// nothing owed missing from pending. A request whose answer was lost (a timeout, a cut
// connection, a killed coordinator, a 503) may or may not have been applied: it is recorded
// as returning after everything, and the model accepts both.

// opKind is the kind of request an operation is.
type opKind uint8

const (
	opOpen opKind = iota + 1
	opRegister
	opVote
	opAck
	opCommit
	opAbort
	opRead    // GET one checkpoint
	opList    // GET a page of checkpoints
	opPending // GET a participant's pending list
)

var opNames = map[opKind]string{opOpen: "open", opRegister: "register", opVote: "vote", opAck: "ack",
	opCommit: "commit", opAbort: "abort", opRead: "read", opList: "list", opPending: "pending"}

// histJob is what the model needs to know of a job's configuration.
type histJob struct {
	participants  []string // sorted
	autoCommit    bool
	maxConcurrent int
}

// hIn is an operation's input: the request.
type hIn struct {
	kind      opKind
	job       string
	id        int64    // checkpoint
	p         string   // participant
	epoch     int64    // vote, ack
	vote      byte     // 'p' prepared, 'a' abort
	chash     uint64   // hash of a prepared vote's committables
	key       string   // open's Idempotency-Key
	preparing bool     // list: only preparing checkpoints
	cfg       *histJob // the job's configuration, which the model needs
}

// hPart is one participant's part of a checkpoint: its vote (0: none), the epoch it voted
// with, its committables' hash, whether it acked.
type hPart struct {
	vote  byte
	epoch int64
	chash uint64
	acked bool
}

// hView is a checkpoint as an answer showed it. Status is 'P' preparing, 'C' committing,
// 'D' committed, 'A' aborted; parts are in the order of names, which are sorted.
type hView struct {
	id     int64
	status byte
	names  []string
	parts  []hPart
}

// hItem is one item of a pending list: action 'v' vote, 'c' commit, 'a' abort.
type hItem struct {
	id     int64
	action byte
	chash  uint64
}

// hOut is an operation's output: the answer, or unknown.
type hOut struct {
	unknown bool
	status  int
	code    string  // a problem's code
	cp      *hView  // the checkpoint answered, or the one a problem carries
	list    []hView // a page of checkpoints, lowest id first
	epoch   int64   // register, pending
	items   []hItem // pending
	raw     string  // the answer as received, for the visualization
	// For a lost answer: the coordinator the request went to (its base URL), and the last
	// time a connection to it was taken for the request (0: none was), which bound says
	// when the request may have taken effect.
	via    string
	connAt int64
}

// history records the operations of a test's requests.
type history struct {
	start time.Time
	mu    sync.Mutex
	jobs  map[string]*histJob
	ops   []porcupine.Operation
	ids   map[string]int // client name -> ClientId
	// ends holds, by coordinator (base URL), the times by which one of its processes had
	// been killed and every database session of it had ended (ended).
	ends map[string][]int64
	// timeout bounds the check of each job's history; 0 means checkTimeout.
	timeout time.Duration
	// unmodeled lists the requests to a recorded job that may change it but that the
	// model does not know (a job's change, complete): check refuses to call such a
	// history checked.
	unmodeled []string
}

func newHistory() *history {
	return &history{start: time.Now(), jobs: map[string]*histJob{}, ids: map[string]int{}, ends: map[string][]int64{}}
}

// now is the history's monotonic clock.
func (h *history) now() int64 { return time.Since(h.start).Nanoseconds() }

// addJob tells the history a job's configuration; requests to other jobs are not recorded.
func (h *history) addJob(name string, participants []string, autoCommit bool, maxConcurrent int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ps := slices.Clone(participants)
	slices.Sort(ps)
	h.jobs[name] = &histJob{participants: ps, autoCommit: autoCommit, maxConcurrent: maxConcurrent}
}

// ended tells the history that the process serving base has been killed and that every
// database session of it has ended (harness.Coordinator.KillSettled): a request whose
// answer was lost, sent to that process, did whatever it did before now.
func (h *history) ended(base string) {
	at := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ends[base] = append(h.ends[base], at)
}

// send sends r through a and records it; the answer is returned as a.send's.
func (h *history) send(ctx context.Context, a *api, r request) (reply, error) {
	var connAt atomic.Int64
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		// The transport may try again on another connection: the last one counts.
		GotConn: func(httptrace.GotConnInfo) { connAt.Store(h.now()) },
	})
	call := h.now()
	rep, err := a.send(ctx, r)
	h.recordVia(r, call, rep, err, h.now(), a.base, connAt.Load())
	return rep, err
}

// record adds r, sent at call, answered with rep (or err) at ret. A transport error or a
// 5xx means the outcome is unknown. After a transport error (a timeout, a cut connection,
// a killed coordinator) the request may still take effect at any later time, so it stays
// open to the end of the history. A 5xx (a 503 whose detail says the request may or may
// not have been applied) was answered once the coordinator had given up on it: whatever
// it did, it did before that answer.
func (h *history) record(r request, call int64, rep reply, err error, ret int64) {
	h.recordVia(r, call, rep, err, ret, "", 0)
}

// recordVia is record of a request sent to the coordinator at via, which took a
// connection last at connAt (0: never).
func (h *history) recordVia(r request, call int64, rep reply, err error, ret int64, via string, connAt int64) {
	in, ok := h.input(r)
	if !ok {
		h.noteUnmodeled(r)
		return
	}
	out := hOut{unknown: true}
	if err == nil {
		out.status, out.raw = rep.status, string(bytes.TrimSpace(rep.body))
		if rep.status < 500 {
			out = parseOutput(in, rep)
		}
	}
	client := in.job + "/" + in.p
	if in.p == "" || in.kind == opRegister {
		client = in.job + "/driver"
	}
	if err != nil {
		// A row of its own in the visualization, so that the client's later requests do
		// not overlap it.
		client += " (lost)"
		ret = math.MaxInt64
		out.via, out.connAt = via, connAt
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	id, ok := h.ids[client]
	if !ok {
		id = len(h.ids)
		h.ids[client] = id
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret})
}

// noteUnmodeled notes r if it is a write to a recorded job that the model does not know;
// creating the job, before any of its requests was recorded, is none.
func (h *history) noteUnmodeled(r request) {
	path, _, _ := strings.Cut(r.path, "?")
	seg := strings.Split(path, "/")
	if r.method == "GET" || len(seg) < 4 || seg[1] != "v1" || seg[2] != "jobs" {
		return
	}
	job, _ := url.PathUnescape(seg[3])
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.jobs[job] == nil {
		return
	}
	if len(seg) == 4 && r.method == "PUT" && !slices.ContainsFunc(h.ops, func(op porcupine.Operation) bool { return op.Input.(hIn).job == job }) {
		return
	}
	h.unmodeled = append(h.unmodeled, r.method+" "+r.path)
}

// input parses a request into an operation's input; false for requests the model does not
// know (job changes, probes).
func (h *history) input(r request) (hIn, bool) {
	path, query, _ := strings.Cut(r.path, "?")
	seg := strings.Split(path, "/")
	if len(seg) < 5 || seg[1] != "v1" || seg[2] != "jobs" {
		return hIn{}, false
	}
	job, err := url.PathUnescape(seg[3])
	if err != nil {
		return hIn{}, false
	}
	h.mu.Lock()
	cfg := h.jobs[job]
	h.mu.Unlock()
	if cfg == nil {
		return hIn{}, false
	}
	in := hIn{job: job, cfg: cfg}
	if len(seg) >= 6 {
		in.id, _ = strconv.ParseInt(seg[5], 10, 64)
	}
	var body struct {
		Epoch        int64           `json:"epoch"`
		Vote         string          `json:"vote"`
		Committables json.RawMessage `json:"committables"`
	}
	_ = json.Unmarshal([]byte(r.body), &body)
	switch {
	case len(seg) == 5 && seg[4] == "checkpoints" && r.method == "POST":
		in.kind, in.key = opOpen, r.header["Idempotency-Key"]
	case len(seg) == 5 && seg[4] == "checkpoints" && r.method == "GET":
		q, _ := url.ParseQuery(query)
		in.kind, in.preparing = opList, q.Get("status") == "preparing"
		if s := q.Get("status"); s != "" && s != "preparing" {
			return hIn{}, false
		}
	case len(seg) == 6 && seg[4] == "checkpoints" && r.method == "GET":
		in.kind = opRead
	case len(seg) == 7 && seg[4] == "checkpoints" && seg[6] == "commit":
		in.kind = opCommit
	case len(seg) == 7 && seg[4] == "checkpoints" && seg[6] == "abort":
		in.kind = opAbort
	case len(seg) == 8 && seg[6] == "votes" && r.method == "PUT":
		in.kind, in.p, in.epoch = opVote, seg[7], body.Epoch
		if body.Vote == "abort" {
			in.vote = 'a'
		} else {
			in.vote, in.chash = 'p', committablesHash(body.Committables)
		}
	case len(seg) == 8 && seg[6] == "acks" && r.method == "PUT":
		in.kind, in.p, in.epoch = opAck, seg[7], body.Epoch
	case len(seg) == 7 && seg[4] == "participants" && seg[6] == "register":
		in.kind, in.p = opRegister, seg[5]
	case len(seg) == 7 && seg[4] == "participants" && seg[6] == "pending":
		// A long-poll (wait_ms) is a read too: whatever it waited for, its answer is the
		// state at some moment between its request and its answer.
		in.kind, in.p = opPending, seg[5]
	default:
		return hIn{}, false
	}
	return in, true
}

// committablesHash identifies committables by their compact form (the coordinator compacts
// them once; a prepared vote without any holds []).
func committablesHash(raw json.RawMessage) uint64 {
	var b bytes.Buffer
	if len(raw) == 0 || json.Compact(&b, raw) != nil || b.String() == "null" {
		b.Reset()
		b.WriteString("[]")
	}
	return hash(b.String()) | 1 // never 0, which means none
}

type wireCP struct {
	Id           int64  `json:"id"`
	Status       string `json:"status"`
	Participants []struct {
		Name         string          `json:"name"`
		Vote         *string         `json:"vote"`
		Epoch        *int64          `json:"epoch"`
		Committables json.RawMessage `json:"committables"`
		AckedAt      *time.Time      `json:"acked_at"`
	} `json:"participants"`
}

func (w wireCP) view() hView {
	v := hView{id: w.Id, status: statusByte(w.Status)}
	ps := slices.Clone(w.Participants)
	slices.SortFunc(ps, func(a, b struct {
		Name         string          `json:"name"`
		Vote         *string         `json:"vote"`
		Epoch        *int64          `json:"epoch"`
		Committables json.RawMessage `json:"committables"`
		AckedAt      *time.Time      `json:"acked_at"`
	}) int {
		return strings.Compare(a.Name, b.Name)
	})
	for _, p := range ps {
		var part hPart
		if p.Vote != nil {
			part.vote = (*p.Vote)[0]
			if part.vote == 'p' {
				part.chash = committablesHash(p.Committables)
			}
		}
		if p.Epoch != nil {
			part.epoch = *p.Epoch
		}
		part.acked = p.AckedAt != nil
		v.names = append(v.names, p.Name)
		v.parts = append(v.parts, part)
	}
	return v
}

func statusByte(s string) byte {
	switch s {
	case "preparing":
		return 'P'
	case "committing":
		return 'C'
	case "committed":
		return 'D'
	case "aborted":
		return 'A'
	}
	return '?'
}

// parseOutput reads a definitive answer. An answer the model cannot read is kept with
// status 0, which no rule accepts.
func parseOutput(in hIn, rep reply) hOut {
	out := hOut{status: rep.status, raw: string(bytes.TrimSpace(rep.body))}
	bad := func() hOut { out.status = 0; return out }
	if rep.status >= 300 {
		var p struct {
			Code       string  `json:"code"`
			Checkpoint *wireCP `json:"checkpoint"`
		}
		if json.Unmarshal(rep.body, &p) != nil {
			return bad()
		}
		out.code = p.Code
		if p.Checkpoint != nil {
			v := p.Checkpoint.view()
			out.cp = &v
		}
		return out
	}
	switch in.kind {
	case opOpen, opRead, opVote, opAck, opCommit, opAbort:
		var w wireCP
		if json.Unmarshal(rep.body, &w) != nil {
			return bad()
		}
		v := w.view()
		out.cp = &v
	case opList:
		var page struct {
			Items []wireCP `json:"items"`
		}
		if json.Unmarshal(rep.body, &page) != nil {
			return bad()
		}
		for _, w := range page.Items {
			out.list = append(out.list, w.view())
		}
		slices.SortFunc(out.list, func(a, b hView) int { return int(a.id - b.id) })
	case opRegister:
		var reg struct {
			Epoch int64 `json:"epoch"`
		}
		if json.Unmarshal(rep.body, &reg) != nil {
			return bad()
		}
		out.epoch = reg.Epoch
	case opPending:
		var pe struct {
			Epoch int64 `json:"epoch"`
			Items []struct {
				Checkpoint   int64           `json:"checkpoint"`
				Action       string          `json:"action"`
				Committables json.RawMessage `json:"committables"`
			} `json:"items"`
		}
		if json.Unmarshal(rep.body, &pe) != nil {
			return bad()
		}
		out.epoch = pe.Epoch
		for _, it := range pe.Items {
			item := hItem{id: it.Checkpoint, action: it.Action[0]}
			if item.action != 'v' {
				item.chash = committablesHash(it.Committables)
			}
			out.items = append(out.items, item)
		}
	}
	return out
}

// The model.

// mCP is a checkpoint in the model's state. Once in a state it is never changed: a step
// that changes it changes a copy (mState.edit).
type mCP struct {
	status byte
	key    string // the Idempotency-Key that opened it
	parts  []hPart
	// seen is how many checkpoints were open the last time this one was known to be
	// preparing: an abort by its deadline, which comes at a moment no answer shows, came
	// later, and cascaded to every checkpoint up to seen still preparing (and perhaps to
	// some opened after).
	seen int64
	h    uint64 // hash of the above; 0 until computed
}

// cpChunk is how many checkpoints a chunk of a cpList holds.
const cpChunk = 64

// cpList is a state's checkpoints, id i at index i-1, in chunks that states share: a step
// copies the list of chunks and the one chunk it changes, not every checkpoint, which keeps
// a long history's steps cheap. A cpList is changed only through a clone.
type cpList struct {
	chunks [][]*mCP
	n      int64
	// done is how many checkpoints, from the first, are settled (settled): none of them
	// is preparing or owed anything any more, so the scans for what is start after them.
	done int64
	// h is the xor of the checkpoints' hashes as of the last seal; changed lists the ids
	// set or pushed since, with the hash each had before (0: none).
	h       uint64
	changed []cpChange
}

type cpChange struct {
	id     int64
	before uint64
}

// settled reports whether c is decided and owed nothing, for good: committed (every ack
// in), or aborted with every participant that had voted prepared acked.
func settled(c *mCP) bool {
	if c.status == 'D' {
		return true
	}
	if c.status != 'A' {
		return false
	}
	for _, p := range c.parts {
		if p.vote == 'p' && !p.acked {
			return false
		}
	}
	return true
}

// first is the lowest id not settled (len+1 if all are): scans start there.
func (l *cpList) first() int64 { return l.done + 1 }

// sealed brings h and done up to date with the changes since the last seal, and returns h.
func (l *cpList) sealed() uint64 {
	for k, ch := range l.changed {
		if slices.ContainsFunc(l.changed[:k], func(o cpChange) bool { return o.id == ch.id }) {
			continue // counted with its first change
		}
		l.h ^= ch.before ^ l.at(ch.id).hashed(int(ch.id))
	}
	l.changed = l.changed[:0]
	for l.done < l.n && settled(l.at(l.done+1)) {
		l.done++
	}
	return l.h
}

func (l *cpList) len() int64 { return l.n }

// at is checkpoint id (1 <= id <= len).
func (l *cpList) at(id int64) *mCP { return l.chunks[(id-1)/cpChunk][(id-1)%cpChunk] }

// clone returns a copy that may be changed; its chunks are shared until then.
func (l *cpList) clone() cpList {
	return cpList{chunks: slices.Clone(l.chunks), n: l.n, done: l.done, h: l.h, changed: slices.Clone(l.changed)}
}

// set replaces checkpoint id, copying its chunk.
func (l *cpList) set(id int64, c *mCP) {
	l.changed = append(l.changed, cpChange{id, l.at(id).hashed(int(id))})
	k := (id - 1) / cpChunk
	chunk := slices.Clone(l.chunks[k])
	chunk[(id-1)%cpChunk] = c
	l.chunks[k] = chunk
}

// push adds checkpoint len+1.
func (l *cpList) push(c *mCP) {
	if l.n%cpChunk == 0 {
		l.chunks = append(l.chunks, append(make([]*mCP, 0, cpChunk), c))
	} else {
		k := len(l.chunks) - 1
		l.chunks[k] = append(slices.Clip(slices.Clone(l.chunks[k])), c)
	}
	l.n++
	l.changed = append(l.changed, cpChange{id: l.n})
}

// all yields each checkpoint with its id, lowest first.
func (l *cpList) all() iter.Seq2[int64, *mCP] {
	return func(yield func(int64, *mCP) bool) {
		id := int64(0)
		for _, chunk := range l.chunks {
			for _, c := range chunk {
				id++
				if !yield(id, c) {
					return
				}
			}
		}
	}
}

func (l *cpList) equal(m cpList) bool {
	if l.n != m.n {
		return false
	}
	for k, chunk := range l.chunks {
		if len(chunk) > 0 && &chunk[0] == &m.chunks[k][0] {
			continue // shared
		}
		for i, c := range chunk {
			if !c.equal(m.chunks[k][i]) {
				return false
			}
		}
	}
	return true
}

// mState is one possible state of a job: its participants' epochs and its checkpoints,
// id i at index i-1.
type mState struct {
	names  []string
	epochs []int64
	cps    cpList
	hash   uint64
	ch     *chooser // during a step: picks among what may have happened unseen
}

// chooser enumerates the choices of a step: a step that calls pick is run again for each
// combination of answers (enumerate).
type chooser struct {
	prefix []int // the picks to replay, then 0s
	sizes  []int // how many options each pick had
	pos    int
}

func (c *chooser) pick(n int) int {
	v := 0
	if c.pos < len(c.prefix) {
		v = c.prefix[c.pos]
	} else {
		c.prefix = append(c.prefix, 0)
	}
	c.sizes = append(c.sizes, n)
	c.pos++
	return v
}

// pick returns one of 0..n-1: each, over the runs of enumerate.
func (s *mState) pick(n int) int {
	if s.ch == nil || n <= 1 {
		return 0
	}
	return s.ch.pick(n)
}

// enumerate runs step on a clone of s once for every combination of its picks, and
// returns the states of the runs that succeeded, or, if none did, the first error.
func enumerate(s *mState, step func(t *mState) error) ([]*mState, error) {
	var next []*mState
	var first error
	var prefix []int
	for runs := 0; runs < 256; runs++ {
		t := s.clone()
		t.ch = &chooser{prefix: prefix}
		err := step(t)
		ch := t.ch
		t.ch = nil
		if err == nil {
			next = append(next, t.seal())
		} else if first == nil {
			first = err
		}
		i := ch.pos - 1
		for i >= 0 && ch.prefix[i]+1 >= ch.sizes[i] {
			i--
		}
		if i < 0 {
			break
		}
		prefix = append(slices.Clone(ch.prefix[:i]), ch.prefix[i]+1)
	}
	if len(next) > 0 {
		return next, nil
	}
	return nil, first
}

func (c *mCP) hashed(id int) uint64 {
	if c.h == 0 {
		f := fnv.New64a()
		fmt.Fprintf(f, "%d %c %s %d", id, c.status, c.key, c.seen)
		for _, p := range c.parts {
			fmt.Fprintf(f, " %c%d/%d/%t", p.vote+'0', p.epoch, p.chash, p.acked)
		}
		c.h = f.Sum64() | 1
	}
	return c.h
}

func (c *mCP) equal(d *mCP) bool {
	return c == d || c.status == d.status && c.key == d.key && c.seen == d.seen && slices.Equal(c.parts, d.parts)
}

// clone returns a copy of s that a step may change.
func (s *mState) clone() *mState {
	return &mState{names: s.names, epochs: slices.Clone(s.epochs), cps: s.cps.clone()}
}

// edit returns checkpoint id of s for changing (s must be a clone).
func (s *mState) edit(id int64) *mCP {
	c := *s.cps.at(id)
	c.parts = slices.Clone(c.parts)
	c.h = 0
	s.cps.set(id, &c)
	return &c
}

// seal computes s's hash once a step is done with it.
func (s *mState) seal() *mState {
	h := uint64(s.cps.len())
	for i, e := range s.epochs {
		h = h*31 + uint64(e) + uint64(i)
	}
	s.hash = h ^ s.cps.sealed()
	return s
}

func (s *mState) equal(t *mState) bool {
	if s.hash != t.hash || s.cps.len() != t.cps.len() || !slices.Equal(s.epochs, t.epochs) {
		return false
	}
	return s.cps.equal(t.cps)
}

func (s *mState) part(name string) int { return slices.Index(s.names, name) }

func allPreparedIn(c *mCP) bool {
	for _, p := range c.parts {
		if p.vote != 'p' {
			return false
		}
	}
	return true
}

func allAckedIn(c *mCP) bool {
	for _, p := range c.parts {
		if !p.acked {
			return false
		}
	}
	return true
}

// lowerPreparing returns the lowest checkpoint below id still preparing, or 0.
func (s *mState) lowerPreparing(id int64) int64 {
	for i := s.cps.first(); i < id; i++ {
		if s.cps.at(i).status == 'P' {
			return i
		}
	}
	return 0
}

// abortFrom aborts preparing checkpoint id and every higher one still preparing (rule 9's
// cascade).
func (s *mState) abortFrom(id int64) {
	for i := id; i <= int64(s.cps.len()); i++ {
		if s.cps.at(i).status == 'P' {
			s.edit(i).status = 'A'
		}
	}
}

// deadlineAbort aborts preparing checkpoint id as its deadline did, at a moment no answer
// showed, after it was last seen preparing: the cascade reached every checkpoint still
// preparing above it up to one opened by then, chosen among seen..limit (rule 9). It fails
// when there is no such moment before the checkpoint limit+1 opened.
func (s *mState) deadlineAbort(id, limit int64) error {
	lo := max(id, s.cps.at(id).seen)
	if lo > limit {
		return fmt.Errorf("checkpoint %d, preparing while %d were open, aborted before %d opened", id, s.cps.at(id).seen, limit+1)
	}
	upTo := lo + int64(s.pick(int(limit-lo+1)))
	for i := id; i <= upTo; i++ {
		if s.cps.at(i).status == 'P' {
			s.edit(i).status = 'A'
		}
	}
	return nil
}

// commitUpTo decides commit for preparing checkpoint id. No lower checkpoint may be
// preparing then (rule 9): each lower one the state has preparing was decided unseen
// before, committed (with auto_commit, Advance commits the lowest first, if its votes are
// all prepared) or aborted by its deadline before id opened, as chosen. It fails when
// neither is possible (rules 2 and 9).
func (s *mState) commitUpTo(id int64, auto bool) error {
	if !allPreparedIn(s.cps.at(id)) {
		return fmt.Errorf("checkpoint %d decided commit without every vote prepared (rule 2)", id)
	}
	for i := s.cps.first(); i < id; i++ {
		c := s.cps.at(i)
		if c.status != 'P' {
			continue
		}
		canCommit := auto && allPreparedIn(c)
		canAbort := max(i, c.seen) < id
		switch {
		case !canCommit && !canAbort:
			return fmt.Errorf("checkpoint %d decided commit while checkpoint %d was preparing (rule 9)", id, i)
		case canCommit && (!canAbort || s.pick(2) == 0):
			s.edit(i).status = 'C'
		default:
			if err := s.deadlineAbort(i, id-1); err != nil {
				return err
			}
		}
	}
	s.edit(id).status = 'C'
	return nil
}

// adopt brings the state of checkpoint v.id to the status an answer shows, through what
// happens without a request: a deadline's abort (with its cascade) and, with auto_commit,
// the commit of a checkpoint whose votes are all prepared. Anything else is a decision
// reversed or a status gone back.
func (s *mState) adopt(v hView, auto bool) error {
	if v.id < 1 || v.id > int64(s.cps.len()) {
		return fmt.Errorf("an answer shows checkpoint %d, which was never opened (%d were)", v.id, s.cps.len())
	}
	c := s.cps.at(v.id)
	switch {
	case c.status == v.status:
		return nil
	case c.status == 'P' && v.status == 'A':
		return s.deadlineAbort(v.id, int64(s.cps.len()))
	case c.status == 'P' && v.status == 'C' && !auto:
		return fmt.Errorf("checkpoint %d of a job without auto_commit shows committing, and no commit request may have decided it", v.id)
	case c.status == 'P' && v.status == 'C':
		return s.commitUpTo(v.id, auto)
	}
	return fmt.Errorf("checkpoint %d was %s, an answer shows it %s", v.id, statusName(c.status), statusName(v.status))
}

// observe checks a checkpoint an answer showed against the state, after adopt: the same
// votes with the same epochs and committables, the same acks, the same status.
func (s *mState) observe(v hView, auto bool) error {
	if err := s.adopt(v, auto); err != nil {
		return err
	}
	c := s.cps.at(v.id)
	if !slices.Equal(v.names, s.names) {
		return fmt.Errorf("checkpoint %d shows participants %v, the job has %v", v.id, v.names, s.names)
	}
	for i, p := range c.parts {
		if q := v.parts[i]; q != p {
			return fmt.Errorf("checkpoint %d shows %s as %s, the history as %s", v.id, s.names[i], partString(q), partString(p))
		}
	}
	if c.status != v.status {
		return fmt.Errorf("checkpoint %d was %s, an answer shows it %s", v.id, statusName(c.status), statusName(v.status))
	}
	if auto && c.status == 'P' && allPreparedIn(c) && s.lowerPreparing(v.id) == 0 {
		return fmt.Errorf("checkpoint %d has every vote prepared and none lower preparing, yet it was not committed (auto_commit)", v.id)
	}
	s.seenPreparing(v.id)
	return nil
}

// seenPreparing notes that checkpoint id is known to be preparing now.
func (s *mState) seenPreparing(id int64) {
	if c := s.cps.at(id); c.status == 'P' && c.seen < int64(s.cps.len()) {
		s.edit(id).seen = int64(s.cps.len())
	}
}

func statusName(b byte) string {
	return map[byte]string{'P': "preparing", 'C': "committing", 'D': "committed", 'A': "aborted"}[b]
}

func partString(p hPart) string {
	s := "-"
	if p.vote != 0 {
		s = fmt.Sprintf("%c@%d#%x", p.vote, p.epoch, p.chash&0xffff)
	}
	if p.acked {
		s += "+ack"
	}
	return s
}

// epochRefusal is rule 5: the code of the refusal a vote or ack of participant p with
// epoch calls for, or "".
func (s *mState) epochRefusal(p string, epoch int64) string {
	cur := s.epochs[s.part(p)]
	switch {
	case cur == 0 || epoch == 0:
		return "not_registered"
	case epoch != cur:
		return "fenced"
	}
	return ""
}

// apply is the model's step for a definitive answer: the state after it, or why the
// answer is impossible in s. s is a clone, which apply changes.
func apply(s *mState, in hIn, out hOut) error {
	auto := in.cfg.autoCommit
	n := int64(s.cps.len())
	exists := in.id >= 1 && in.id <= n
	answered := func(cp *hView) error {
		if cp == nil {
			return fmt.Errorf("an answer without the checkpoint")
		}
		if cp.id != in.id {
			return fmt.Errorf("asked about checkpoint %d, answered %d", in.id, cp.id)
		}
		return s.observe(*cp, auto)
	}
	refused := func(codes ...string) error {
		if out.status != http.StatusConflict || !slices.Contains(codes, out.code) {
			return fmt.Errorf("answered %d %s, want 409 %v", out.status, out.code, codes)
		}
		if out.cp != nil {
			return s.observe(*out.cp, auto)
		}
		return nil
	}
	if (in.p != "" && s.part(in.p) < 0) || (in.id != 0 && !exists && in.kind != opOpen) {
		if out.status == http.StatusNotFound {
			return nil
		}
		return fmt.Errorf("participant %q or checkpoint %d does not exist (%d opened), answered %d", in.p, in.id, n, out.status)
	}
	switch in.kind {
	case opOpen:
		prior := int64(0)
		for id, c := range s.cps.all() {
			if in.key != "" && c.key == in.key {
				prior = id
			}
		}
		switch {
		case out.status == http.StatusCreated && out.cp != nil && prior != 0:
			if out.cp.id != prior {
				return fmt.Errorf("Idempotency-Key %s opened checkpoint %d, a retry answered %d", in.key, prior, out.cp.id)
			}
			return s.observe(*out.cp, auto)
		case out.status == http.StatusCreated && out.cp != nil:
			if out.cp.id != n+1 {
				return fmt.Errorf("opened checkpoint %d, the next id is %d", out.cp.id, n+1)
			}
			s.cps.push(&mCP{status: 'P', key: in.key, parts: make([]hPart, len(s.names)), seen: n + 1})
			return s.observe(*out.cp, auto)
		case prior != 0:
			return fmt.Errorf("Idempotency-Key %s opened checkpoint %d, a retry answered %d %s", in.key, prior, out.status, out.code)
		}
		if err := refused("too_many_checkpoints"); err != nil {
			return err
		}
		preparing := 0
		for _, c := range s.cps.all() {
			if c.status == 'P' {
				preparing++
			}
		}
		if preparing < in.cfg.maxConcurrent {
			return fmt.Errorf("too_many_checkpoints with %d preparing, the job allows %d", preparing, in.cfg.maxConcurrent)
		}
		return nil

	case opRegister:
		i := s.part(in.p)
		if out.status != http.StatusOK {
			return fmt.Errorf("register answered %d", out.status)
		}
		if out.epoch <= s.epochs[i] {
			return fmt.Errorf("register %s gave epoch %d, it had %d (rule 5)", in.p, out.epoch, s.epochs[i])
		}
		s.register(i, out.epoch)
		return nil

	case opVote:
		i := s.part(in.p)
		if code := s.epochRefusal(in.p, in.epoch); code != "" {
			return refused(code)
		}
		c := s.cps.at(in.id)
		mine := c.parts[i]
		if mine.vote != 0 {
			if mine.vote == in.vote && mine.chash == in.chash {
				if out.status != http.StatusOK {
					return fmt.Errorf("the same vote again answered %d %s, want 200 (rule 4)", out.status, out.code)
				}
				return answered(out.cp)
			}
			return refused("vote_conflict")
		}
		if out.status != http.StatusOK {
			// The refusal's checkpoint shows whether it was decided meanwhile.
			if err := refused("already_decided"); err != nil {
				return err
			}
			if s.cps.at(in.id).status == 'P' {
				return fmt.Errorf("vote on preparing checkpoint %d refused as already_decided", in.id)
			}
			return nil
		}
		if c.status != 'P' {
			return fmt.Errorf("a first vote on %s checkpoint %d answered 200 (rule 1)", statusName(c.status), in.id)
		}
		s.edit(in.id).parts[i] = hPart{vote: in.vote, epoch: in.epoch, chash: in.chash}
		if in.vote == 'a' {
			s.abortFrom(in.id)
		}
		return answered(out.cp)

	case opAck:
		i := s.part(in.p)
		if code := s.epochRefusal(in.p, in.epoch); code != "" {
			return refused(code)
		}
		if out.status != http.StatusOK {
			if err := refused("not_decided"); err != nil {
				return err
			}
			if s.cps.at(in.id).status != 'P' {
				return fmt.Errorf("ack on %s checkpoint %d refused as not_decided", statusName(s.cps.at(in.id).status), in.id)
			}
			return nil
		}
		if out.cp == nil {
			return fmt.Errorf("an answer without the checkpoint")
		}
		if s.cps.at(in.id).status == 'P' {
			// Decided meanwhile, without a request: the answer shows how.
			if err := s.adopt(*out.cp, auto); err != nil {
				return err
			}
		}
		if s.cps.at(in.id).status == 'P' {
			return fmt.Errorf("ack on preparing checkpoint %d answered 200", in.id)
		}
		s.ack(in.id, i)
		return answered(out.cp)

	case opCommit:
		c := s.cps.at(in.id)
		if out.status == http.StatusOK {
			switch c.status {
			case 'A':
				return fmt.Errorf("commit of aborted checkpoint %d answered 200 (rule 1)", in.id)
			case 'P':
				if err := s.commitUpTo(in.id, auto); err != nil {
					return err
				}
			}
			return answered(out.cp)
		}
		if err := refused("votes_missing", "lower_checkpoint_open", "already_decided"); err != nil {
			return err
		}
		c = s.cps.at(in.id)
		switch {
		case out.code == "already_decided" && c.status != 'A',
			out.code == "votes_missing" && (c.status != 'P' || allPreparedIn(c)),
			out.code == "lower_checkpoint_open" && (c.status != 'P' || !allPreparedIn(c) || s.lowerPreparing(in.id) == 0):
			return fmt.Errorf("commit refused with %s, but checkpoint %d is %s with %s", out.code, in.id, statusName(c.status), s.describeCP(in.id))
		}
		return nil

	case opAbort:
		c := s.cps.at(in.id)
		if out.status == http.StatusOK {
			switch c.status {
			case 'C', 'D':
				return fmt.Errorf("abort of %s checkpoint %d answered 200 (rule 1)", statusName(c.status), in.id)
			case 'P':
				s.abortFrom(in.id)
			}
			return answered(out.cp)
		}
		if err := refused("already_decided"); err != nil {
			return err
		}
		if c := s.cps.at(in.id); c.status != 'C' && c.status != 'D' {
			return fmt.Errorf("abort refused with already_decided, but checkpoint %d is %s", in.id, statusName(c.status))
		}
		return nil

	case opRead:
		if out.status != http.StatusOK {
			return fmt.Errorf("read answered %d", out.status)
		}
		return answered(out.cp)

	case opList:
		if out.status != http.StatusOK {
			return fmt.Errorf("list answered %d", out.status)
		}
		for _, v := range out.list {
			if in.preparing && v.status != 'P' {
				return fmt.Errorf("a list of preparing checkpoints shows %d %s", v.id, statusName(v.status))
			}
			if err := s.observe(v, auto); err != nil {
				return err
			}
		}
		return nil

	case opPending:
		return s.pending(in, out)
	}
	return fmt.Errorf("unknown operation")
}

// register gives participant i epoch e and aborts every preparing checkpoint it had not
// voted on (rule 5).
func (s *mState) register(i int, e int64) {
	s.epochs[i] = e
	for id := s.cps.first(); id <= s.cps.len(); id++ {
		if c := s.cps.at(id); c.status == 'P' && c.parts[i].vote == 0 {
			s.abortFrom(id)
		}
	}
}

// ack records participant i's ack of decided checkpoint id; the last ack of a commit makes
// it committed.
func (s *mState) ack(id int64, i int) {
	if s.cps.at(id).parts[i].acked {
		return
	}
	c := s.edit(id)
	c.parts[i].acked = true
	if c.status == 'C' && allAckedIn(c) {
		c.status = 'D'
	}
}

// pending checks a pending list (rule 7): the participant's current epoch, oldest first,
// every item owed, and everything owed on a decided checkpoint listed.
func (s *mState) pending(in hIn, out hOut) error {
	auto := in.cfg.autoCommit
	i := s.part(in.p)
	if out.status != http.StatusOK {
		return fmt.Errorf("pending answered %d", out.status)
	}
	if out.epoch != s.epochs[i] {
		return fmt.Errorf("pending of %s shows epoch %d, it has %d", in.p, out.epoch, s.epochs[i])
	}
	listed := map[int64]bool{}
	for k, it := range out.items {
		if k > 0 && it.id <= out.items[k-1].id {
			return fmt.Errorf("pending lists %d after %d: not oldest first", it.id, out.items[k-1].id)
		}
		if it.id < 1 || it.id > int64(s.cps.len()) {
			return fmt.Errorf("pending lists checkpoint %d, which was never opened", it.id)
		}
		listed[it.id] = true
		switch it.action {
		case 'c':
			if err := s.adopt(hView{id: it.id, status: 'C'}, auto); err != nil {
				return fmt.Errorf("pending asks %s to commit: %v", in.p, err)
			}
		case 'a':
			if err := s.adopt(hView{id: it.id, status: 'A'}, auto); err != nil {
				return fmt.Errorf("pending asks %s to roll back: %v", in.p, err)
			}
		}
		c := s.cps.at(it.id)
		mine := c.parts[i]
		switch {
		case mine.acked:
			return fmt.Errorf("pending asks %s for %c on checkpoint %d, which it acked", in.p, it.action, it.id)
		case it.action == 'v' && (c.status != 'P' || mine.vote != 0):
			return fmt.Errorf("pending asks %s to vote on checkpoint %d, %s, its vote %s", in.p, it.id, statusName(c.status), partString(mine))
		case it.action == 'v':
			s.seenPreparing(it.id)
		case it.action == 'c' && c.status != 'C':
			return fmt.Errorf("pending asks %s to commit checkpoint %d, which is %s", in.p, it.id, statusName(c.status))
		case it.action != 'v' && (mine.vote != 'p' || mine.chash != it.chash):
			return fmt.Errorf("pending asks %s to %c checkpoint %d with committables %x, its vote is %s", in.p, it.action, it.id, it.chash&0xffff, partString(mine))
		}
	}
	for id := s.cps.first(); id <= s.cps.len(); id++ {
		c := s.cps.at(id)
		mine := c.parts[i]
		if listed[id] || mine.acked {
			continue
		}
		// A preparing checkpoint not voted on is left out once its deadline passed (and
		// will abort); the model, which knows no deadlines, lets that be.
		if c.status == 'C' || c.status == 'A' && mine.vote == 'p' {
			return fmt.Errorf("pending of %s leaves out checkpoint %d, %s, which it owes an ack (rule 7)", in.p, id, statusName(c.status))
		}
	}
	return nil
}

// unknownNext is the model's step for a request whose answer was lost: the states if it
// was not applied and, when it could have been, if it was.
func unknownNext(s *mState, in hIn) []*mState {
	applied, _ := enumerate(s, func(t *mState) error { return applyLost(t, in) })
	return append([]*mState{s}, applied...)
}

// applyLost applies a request whose answer was lost to t, or fails if it cannot have
// been applied.
func applyLost(t *mState, in hIn) error {
	refused := errors.New("not applicable")
	n := int64(t.cps.len())
	if in.id != 0 && in.kind != opOpen && (in.id < 1 || in.id > n) || in.p != "" && t.part(in.p) < 0 {
		return refused
	}
	switch in.kind {
	case opOpen:
		for _, c := range t.cps.all() {
			if in.key != "" && c.key == in.key {
				return refused
			}
		}
		t.cps.push(&mCP{status: 'P', key: in.key, parts: make([]hPart, len(t.names)), seen: n + 1})
	case opRegister:
		// The coordinator hands out the next epoch; any other higher one would do, but
		// the model keeps one.
		i := t.part(in.p)
		t.register(i, t.epochs[i]+1)
	case opVote:
		i := t.part(in.p)
		if t.epochRefusal(in.p, in.epoch) != "" || t.cps.at(in.id).status != 'P' || t.cps.at(in.id).parts[i].vote != 0 {
			return refused
		}
		t.edit(in.id).parts[i] = hPart{vote: in.vote, epoch: in.epoch, chash: in.chash}
		if in.vote == 'a' {
			t.abortFrom(in.id)
		}
	case opAck:
		i := t.part(in.p)
		if t.epochRefusal(in.p, in.epoch) != "" || t.cps.at(in.id).status == 'P' || t.cps.at(in.id).parts[i].acked {
			return refused
		}
		t.ack(in.id, i)
	case opCommit:
		if t.cps.at(in.id).status != 'P' {
			return refused
		}
		return t.commitUpTo(in.id, in.cfg.autoCommit)
	case opAbort:
		if t.cps.at(in.id).status != 'P' {
			return refused
		}
		t.abortFrom(in.id)
	default:
		return refused
	}
	return nil
}

// describeCP is checkpoint id as the visualization shows it.
func (s *mState) describeCP(id int64) string {
	c := s.cps.at(id)
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", id, statusName(c.status))
	for i, p := range c.parts {
		fmt.Fprintf(&b, " %s:%s", s.names[i], partString(p))
	}
	return b.String()
}

// describeOp is an operation in a few words: the request and the answer's status and code.
func describeOp(in hIn, out hOut) string {
	var b strings.Builder
	b.WriteString(opNames[in.kind])
	if in.id != 0 {
		fmt.Fprintf(&b, " %d", in.id)
	}
	if in.p != "" {
		fmt.Fprintf(&b, " %s", in.p)
	}
	switch in.kind {
	case opVote:
		fmt.Fprintf(&b, " %c@%d#%x", in.vote, in.epoch, in.chash&0xffff)
	case opAck:
		fmt.Fprintf(&b, " @%d", in.epoch)
	case opOpen:
		fmt.Fprintf(&b, " key %s", in.key)
	}
	if out.unknown && out.status == 0 {
		b.WriteString(" -> lost (maybe applied)")
		return b.String()
	}
	if out.unknown {
		fmt.Fprintf(&b, " -> %d (maybe applied)", out.status)
		return b.String()
	}
	fmt.Fprintf(&b, " -> %d %s", out.status, out.code)
	return b.String()
}

// historyModel is the protocol's rules for one job, as a nondeterministic model: a state
// is one possible state of the job, and a step returns every state the answer allows.
var historyModel = porcupine.NondeterministicModel{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		byJob := map[string][]porcupine.Operation{}
		var jobs []string
		for _, op := range ops {
			j := op.Input.(hIn).job
			if byJob[j] == nil {
				jobs = append(jobs, j)
			}
			byJob[j] = append(byJob[j], op)
		}
		var out [][]porcupine.Operation
		for _, j := range jobs {
			out = append(out, byJob[j])
		}
		return out
	},
	Init: func() []any { return []any{&mState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(*mState), input.(hIn), output.(hOut)
		if s.names == nil {
			// The first step of a partition learns the job's participants.
			s = &mState{names: in.cfg.participants, epochs: make([]int64, len(in.cfg.participants))}
			s.seal()
		}
		var states []*mState
		if out.unknown {
			states = unknownNext(s, in)
		} else {
			states, _ = enumerate(s, func(t *mState) error { return apply(t, in, out) })
		}
		next := make([]any, len(states))
		for i, t := range states {
			next[i] = t
		}
		return next
	},
	Equal: func(a, b any) bool { return a.(*mState).equal(b.(*mState)) },
	Hash:  func(s any) uint64 { return s.(*mState).hash },
	DescribeOperation: func(input, output any) string {
		out := output.(hOut)
		d := describeOp(input.(hIn), out)
		if len(out.raw) > 400 {
			return d + " " + out.raw[:400] + "…"
		}
		return d + " " + out.raw
	},
	DescribeState: func(state any) string {
		s := state.(*mState)
		if s.names == nil {
			return "nothing yet"
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d opened; epochs", s.cps.len())
		for i, n := range s.names {
			fmt.Fprintf(&b, " %s:%d", n, s.epochs[i])
		}
		// Checkpoints on which something is still owed, and the last few.
		for id := int64(1); id <= int64(s.cps.len()); id++ {
			c := s.cps.at(id)
			if id > int64(s.cps.len())-3 || c.status == 'P' || c.status == 'C' || c.status == 'A' && !allAckedIn(c) {
				fmt.Fprintf(&b, "; %s", s.describeCP(id))
			}
		}
		return b.String()
	},
}

// stepAll is the model's step on a set of possible states (nil: the initial one): the
// states op may lead to, and, if there are none, why op is impossible in the last state
// that refused it.
func stepAll(states []*mState, op porcupine.Operation) ([]*mState, error) {
	in, out := op.Input.(hIn), op.Output.(hOut)
	if states == nil {
		states = []*mState{(&mState{names: in.cfg.participants, epochs: make([]int64, len(in.cfg.participants))}).seal()}
	}
	var next []*mState
	seen := map[uint64][]*mState{} // the states of next by hash: a state reached twice is kept once
	add := func(ts ...*mState) {
		for _, t := range ts {
			if !slices.ContainsFunc(seen[t.hash], t.equal) {
				seen[t.hash] = append(seen[t.hash], t)
				next = append(next, t)
			}
		}
	}
	var why error
	for _, s := range states {
		if out.unknown {
			add(unknownNext(s, in)...)
			continue
		}
		states, err := enumerate(s, func(t *mState) error { return apply(t, in, out) })
		if err != nil {
			why = err
		}
		add(states...)
	}
	return next, why
}

// explainLimit bounds the states reason follows: past it, a failure is reported without
// its explanation rather than explained in minutes.
const explainLimit = 100_000

// explain replays ops in the order given and returns the first answer the model refuses,
// for tests of the model: nil if every step is legal in some state.
func explain(ops []porcupine.Operation) error {
	var states []*mState
	for k, op := range ops {
		next, why := stepAll(states, op)
		if len(next) == 0 {
			return fmt.Errorf("operation %d (%s): %v", k, historyModel.DescribeOperation(op.Input, op.Output), why)
		}
		states = next
	}
	return nil
}

// reason says why the check found no linearization of ops: after the longest partial
// linearization it found, the operation that had to come next (the first to return of
// those left) and what the model says about its answer there.
func reason(ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	partials := info.PartialLinearizations()
	if len(partials) != 1 || len(partials[0]) == 0 {
		return ""
	}
	longest := slices.MaxFunc(partials[0], func(a, b []int) int { return len(a) - len(b) })
	var states []*mState
	done := map[int]bool{}
	for _, id := range longest {
		states, _ = stepAll(states, ops[id])
		done[id] = true
		if len(states) > explainLimit {
			return fmt.Sprintf("not explained: after %d of the %d operations of the longest linearization the model has more than %d possible states", len(done), len(longest), explainLimit)
		}
	}
	next := -1
	for id, op := range ops {
		if !done[id] && (next < 0 || op.Return < ops[next].Return) {
			next = id
		}
	}
	if next < 0 {
		return ""
	}
	_, why := stepAll(states, ops[next])
	return fmt.Sprintf("after %d operations, %s: %v", len(longest), describeOp(ops[next].Input.(hIn), ops[next].Output.(hOut)), why)
}

// checkTimeout bounds the search of one job's history. Most take milliseconds; the search
// grows with the requests whose outcome is unknown around the same checkpoints, and one
// history of the coordinator kills (1,800 operations, 520 unknown) once took 16 s, which
// the race detector can make several times longer.
const checkTimeout = 150 * time.Second

// check checks every job's history (rule by rule, as historyModel says), logs what it
// checked, and fails t if a history is not linearizable or could not be checked in time.
// The visualization of a failing history is written to $HISTORY_DIR (or a new temporary
// directory) and named in the failure.
func (h *history) check(t testing.TB) {
	t.Helper()
	h.mu.Lock()
	ops := slices.Clone(h.ops)
	unmodeled := slices.Clone(h.unmodeled)
	h.mu.Unlock()
	if len(unmodeled) > 0 {
		t.Errorf("the history holds requests the model does not know, which may have changed the jobs: %q", unmodeled)
		return
	}
	ops = h.bound(ops)
	model := historyModel.ToModel()
	for _, part := range historyModel.Partition(ops) {
		job := part[0].Input.(hIn).job
		lost := 0
		for _, op := range part {
			if op.Output.(hOut).unknown {
				lost++
			}
		}
		start := time.Now()
		timeout := cmp.Or(h.timeout, checkTimeout)
		res, info := porcupine.CheckOperationsVerbose(model, part, timeout)
		took := time.Since(start)
		t.Logf("history of %s: %d operations (%d of unknown outcome) checked in %s: %s", job, len(part), lost, took.Round(time.Millisecond), res)
		verdict := "is not linearizable: the rules cannot explain the answers"
		switch res {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			verdict = fmt.Sprintf("could not be checked: the check of %d operations did not finish in %s, longest linearization so far", len(part), took.Round(time.Millisecond))
		}
		why := reason(part, info)
		if res == porcupine.Unknown && len(part) > 2000 {
			// Drawing every partial linearization of a long unfinished search takes
			// minutes.
			t.Errorf("history of %s %s (%s); too long to draw", job, verdict, why)
			continue
		}
		path, err := h.visualize(model, info, job)
		if err != nil {
			t.Errorf("history of %s %s (%s; the visualization could not be written: %v)", job, verdict, why, err)
			continue
		}
		t.Errorf("history of %s %s (%s); see %s", job, verdict, why, path)
	}
}

// bound narrows what requests with lost answers may have done, which keeps the check's
// search small: a lost read changed nothing and is left out; a lost write that the same
// request sent again later got a 2xx for (the workload retries every request unchanged)
// took effect before that answer or not at all, since applying it again afterwards
// changes nothing (rule 4: the same vote, ack, commit or abort again, or the same
// Idempotency-Key, is answered with the state as it is). A registration is not
// idempotent, and stays open, unless the process it was sent to ended: a lost request
// whose process was killed and whose database sessions ended (ended) took effect before
// that end or not at all; one that never got a connection was never sent, and is left out.
func (h *history) bound(ops []porcupine.Operation) []porcupine.Operation {
	h.mu.Lock()
	ends := maps.Clone(h.ends)
	h.mu.Unlock()
	return bound(ops, ends)
}

func bound(ops []porcupine.Operation, ends map[string][]int64) []porcupine.Operation {
	answered := map[hIn][]porcupine.Operation{} // 2xx answers by request, in the order sent
	for _, op := range ops {
		if out := op.Output.(hOut); !out.unknown && out.status >= 200 && out.status < 300 {
			answered[op.Input.(hIn)] = append(answered[op.Input.(hIn)], op)
		}
	}
	for _, as := range answered {
		slices.SortFunc(as, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	}
	var out []porcupine.Operation
	for _, op := range ops {
		in := op.Input.(hIn)
		if !op.Output.(hOut).unknown {
			out = append(out, op)
			continue
		}
		if out := op.Output.(hOut); out.via != "" && out.connAt == 0 {
			continue // it never had a connection (refused: its coordinator was down), so it was never sent
		} else if out.connAt > 0 {
			// The connection was taken at connAt from a process of out.via that was
			// running when it was opened, no later; that process's end is the first of
			// out.via's ends after connAt, or a later one.
			es := ends[out.via]
			if i, _ := slices.BinarySearch(es, out.connAt); i < len(es) {
				op.Return = min(op.Return, es[i])
			}
		}
		switch in.kind {
		case opRead, opList, opPending:
			continue
		case opRegister:
		default:
			as := answered[in]
			if i, _ := slices.BinarySearchFunc(as, op.Call, func(a porcupine.Operation, call int64) int { return cmp.Compare(a.Call, call) }); i < len(as) {
				op.Return = min(op.Return, as[i].Return)
			}
		}
		out = append(out, op)
	}
	return out
}

// visualize writes info's visualization for job and returns its path.
func (h *history) visualize(model porcupine.Model, info porcupine.LinearizationInfo, job string) (string, error) {
	dir := os.Getenv("HISTORY_DIR")
	if dir == "" {
		d, err := os.MkdirTemp("", "history-*")
		if err != nil {
			return "", err
		}
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, url.PathEscape(job)+"-"+strconv.FormatInt(time.Now().UnixNano(), 36)+".html")
	return path, porcupine.VisualizePath(model, info, path)
}

// Tests of the model on small hand-written histories, which need no coordinator.

// scripted builds operations for a job with participants a and b, one after another unless
// a step says otherwise.
type scripted struct {
	cfg *histJob
	ops []porcupine.Operation
	t   int64
}

func newScripted(auto bool, maxConcurrent int) *scripted {
	return &scripted{cfg: &histJob{participants: []string{"a", "b"}, autoCommit: auto, maxConcurrent: maxConcurrent}}
}

// add appends an operation answered before the next one is sent; a nil out means the
// answer was lost.
func (s *scripted) add(in hIn, out *hOut) *scripted {
	in.job, in.cfg = "j", s.cfg
	op := porcupine.Operation{ClientId: len(s.ops), Input: in, Call: s.t, Return: s.t + 1}
	if out == nil {
		op.Output, op.Return = hOut{unknown: true}, math.MaxInt64
	} else {
		op.Output = *out
	}
	s.t += 2
	s.ops = append(s.ops, op)
	return s
}

func (s *scripted) register(p string, epoch int64) *scripted {
	return s.add(hIn{kind: opRegister, p: p}, &hOut{status: 200, epoch: epoch})
}

func (s *scripted) open(key string, id int64) *scripted {
	return s.add(hIn{kind: opOpen, key: key}, &hOut{status: 201, cp: cpv(id, 'P', "-", "-")})
}

func (s *scripted) vote(id int64, p string, epoch int64, kind byte, status int, code string, shown *hView) *scripted {
	in := hIn{kind: opVote, id: id, p: p, epoch: epoch, vote: kind}
	if kind == 'p' {
		in.chash = committablesHash(json.RawMessage(fmt.Sprintf(`[%q]`, p)))
	}
	return s.add(in, &hOut{status: status, code: code, cp: shown})
}

// cpv is a checkpoint as shown, its parts for a and b as "-" (no vote), "p1" (prepared
// with epoch 1, the committables vote sends), "a1" (abort), with "+" when acked.
func cpv(id int64, status byte, a, b string) *hView {
	v := &hView{id: id, status: status, names: []string{"a", "b"}}
	for i, s := range []string{a, b} {
		var p hPart
		if strings.HasSuffix(s, "+") {
			p.acked, s = true, strings.TrimSuffix(s, "+")
		}
		if s != "-" {
			p.vote = s[0]
			p.epoch, _ = strconv.ParseInt(s[1:], 10, 64)
			if p.vote == 'p' {
				p.chash = committablesHash(json.RawMessage(fmt.Sprintf(`[%q]`, v.names[i])))
			}
		}
		v.parts = append(v.parts, p)
	}
	return v
}

func (s *scripted) check(t *testing.T, wantLegal bool, why string) {
	t.Helper()
	res := porcupine.CheckOperations(historyModel.ToModel(), s.ops)
	err := explain(s.ops)
	switch {
	case wantLegal && (!res || err != nil):
		t.Errorf("a legal history was refused: %v", err)
	case !wantLegal && res:
		t.Errorf("an illegal history was accepted (%s)", why)
	case !wantLegal && err != nil && !strings.Contains(err.Error(), why):
		t.Errorf("refused for %q, want %q", err, why)
	}
}

func TestHistoryModel(t *testing.T) {
	base := func(auto bool) *scripted {
		return newScripted(auto, 2).register("a", 1).register("b", 1).open("k1", 1)
	}
	commit := func(s *scripted, id int64, status int, code string, shown *hView) *scripted {
		return s.add(hIn{kind: opCommit, id: id}, &hOut{status: status, code: code, cp: shown})
	}
	ack := func(s *scripted, id int64, p string, shown *hView) *scripted {
		return s.add(hIn{kind: opAck, id: id, p: p, epoch: 1}, &hOut{status: 200, cp: shown})
	}
	read := func(s *scripted, shown *hView) *scripted {
		return s.add(hIn{kind: opRead, id: shown.id}, &hOut{status: 200, cp: shown})
	}
	pendingOf := func(s *scripted, p string, items ...hItem) *scripted {
		return s.add(hIn{kind: opPending, p: p}, &hOut{status: 200, epoch: 1, items: items})
	}
	chash := func(p string) uint64 { return committablesHash(json.RawMessage(fmt.Sprintf(`[%q]`, p))) }

	t.Run("a whole round is legal", func(t *testing.T) {
		s := base(true).
			vote(1, "a", 1, 'p', 200, "", cpv(1, 'P', "p1", "-")).
			vote(1, "b", 1, 'p', 200, "", cpv(1, 'C', "p1", "p1"))
		s = pendingOf(s, "a", hItem{id: 1, action: 'c', chash: chash("a")})
		s = ack(s, 1, "a", cpv(1, 'C', "p1+", "p1"))
		s = ack(s, 1, "b", cpv(1, 'D', "p1+", "p1+"))
		s = pendingOf(s, "a")
		s.check(t, true, "")
	})
	t.Run("a manual commit and an idempotent retry are legal", func(t *testing.T) {
		s := base(false).
			vote(1, "a", 1, 'p', 200, "", cpv(1, 'P', "p1", "-")).
			vote(1, "b", 1, 'p', 200, "", cpv(1, 'P', "p1", "p1"))
		s = commit(s, 1, 200, "", cpv(1, 'C', "p1", "p1"))
		s = commit(s, 1, 200, "", cpv(1, 'C', "p1", "p1"))
		s.vote(1, "a", 1, 'p', 200, "", cpv(1, 'C', "p1", "p1")).check(t, true, "")
	})
	t.Run("lost answers may or may not have been applied", func(t *testing.T) {
		applied := base(true).add(hIn{kind: opVote, id: 1, p: "a", epoch: 1, vote: 'p', chash: chash("a")}, nil)
		read(applied, cpv(1, 'P', "p1", "-")).check(t, true, "")
		notApplied := base(true).add(hIn{kind: opVote, id: 1, p: "a", epoch: 1, vote: 'p', chash: chash("a")}, nil)
		read(notApplied, cpv(1, 'P', "-", "-")).check(t, true, "")
		lostOpen := base(true).add(hIn{kind: opOpen, key: "k2"}, nil)
		lostOpen.add(hIn{kind: opOpen, key: "k2"}, &hOut{status: 201, cp: cpv(2, 'P', "-", "-")}).check(t, true, "")
	})
	t.Run("a deadline abort is legal and cascades", func(t *testing.T) {
		s := base(true).open("k2", 2)
		s = read(s, cpv(1, 'A', "-", "-"))
		s.vote(2, "a", 1, 'p', 409, "already_decided", cpv(2, 'A', "-", "-")).check(t, true, "")
		// Aborted before 2 opened, unseen: 2 is not part of the cascade.
		s = base(true).open("k2", 2)
		s = read(s, cpv(1, 'A', "-", "-"))
		read(s, cpv(2, 'P', "-", "-")).check(t, true, "")
		// Seen preparing once 2 was open, then aborted: the cascade took 2.
		s = base(true).open("k2", 2)
		s = read(s, cpv(1, 'P', "-", "-"))
		s = read(s, cpv(1, 'A', "-", "-"))
		read(s, cpv(2, 'P', "-", "-")).check(t, false, "was aborted")
	})

	t.Run("an id handed out twice", func(t *testing.T) {
		base(true).open("k2", 1).check(t, false, "the next id is 2")
	})
	t.Run("an id skipped", func(t *testing.T) {
		base(true).open("k2", 3).check(t, false, "the next id is 2")
	})
	t.Run("an Idempotency-Key opening two checkpoints", func(t *testing.T) {
		base(true).open("k1", 2).check(t, false, "a retry answered 2")
	})
	t.Run("an epoch not higher", func(t *testing.T) {
		base(true).register("a", 1).check(t, false, "it had 1")
	})
	t.Run("a stale epoch accepted", func(t *testing.T) {
		base(true).register("a", 2).vote(1, "a", 1, 'p', 200, "", cpv(1, 'P', "p1", "-")).check(t, false, "want 409 [fenced]")
	})
	t.Run("a current epoch fenced", func(t *testing.T) {
		base(true).vote(1, "a", 1, 'p', 409, "fenced", cpv(1, 'P', "-", "-")).check(t, false, "want 409 [already_decided]")
	})
	t.Run("a recorded vote lost", func(t *testing.T) {
		s := base(true).vote(1, "a", 1, 'p', 200, "", cpv(1, 'P', "p1", "-"))
		read(s, cpv(1, 'P', "-", "-")).check(t, false, "shows a as -")
	})
	t.Run("a commit without unanimity", func(t *testing.T) {
		s := base(true).vote(1, "a", 1, 'p', 200, "", cpv(1, 'P', "p1", "-"))
		read(s, cpv(1, 'C', "p1", "-")).check(t, false, "without every vote prepared")
	})
	t.Run("a spontaneous commit without auto_commit", func(t *testing.T) {
		s := base(false).vote(1, "a", 1, 'p', 200, "", cpv(1, 'P', "p1", "-")).
			vote(1, "b", 1, 'p', 200, "", cpv(1, 'C', "p1", "p1"))
		s.check(t, false, "without auto_commit")
	})
	t.Run("a decision reversed", func(t *testing.T) {
		s := base(true).vote(1, "a", 1, 'p', 200, "", cpv(1, 'P', "p1", "-")).
			vote(1, "b", 1, 'p', 200, "", cpv(1, 'C', "p1", "p1"))
		read(s, cpv(1, 'A', "p1", "p1")).check(t, false, "was committing, an answer shows it aborted")
		s = base(true).add(hIn{kind: opAbort, id: 1}, &hOut{status: 200, cp: cpv(1, 'A', "-", "-")})
		read(s, cpv(1, 'C', "-", "-")).check(t, false, "was aborted")
	})
	t.Run("committed before every ack", func(t *testing.T) {
		s := base(true).vote(1, "a", 1, 'p', 200, "", cpv(1, 'P', "p1", "-")).
			vote(1, "b", 1, 'p', 200, "", cpv(1, 'C', "p1", "p1"))
		ack(s, 1, "a", cpv(1, 'D', "p1+", "p1")).check(t, false, "was committing, an answer shows it committed")
	})
	t.Run("a commit above a preparing checkpoint", func(t *testing.T) {
		s := base(false).open("k2", 2)
		s = read(s, cpv(1, 'P', "-", "-")).
			vote(2, "a", 1, 'p', 200, "", cpv(2, 'P', "p1", "-")).
			vote(2, "b", 1, 'p', 200, "", cpv(2, 'P', "p1", "p1"))
		commit(s, 2, 200, "", cpv(2, 'C', "p1", "p1")).check(t, false, "while checkpoint 1 was preparing (rule 9)")
		// Unless 1 may have been aborted by its deadline before 2 opened.
		s = base(false).open("k2", 2).
			vote(2, "a", 1, 'p', 200, "", cpv(2, 'P', "p1", "-")).
			vote(2, "b", 1, 'p', 200, "", cpv(2, 'P', "p1", "p1"))
		s = commit(s, 2, 200, "", cpv(2, 'C', "p1", "p1"))
		read(s, cpv(1, 'A', "-", "-")).check(t, true, "")
		s = base(false).open("k2", 2).
			vote(2, "a", 1, 'p', 200, "", cpv(2, 'P', "p1", "-")).
			vote(2, "b", 1, 'p', 200, "", cpv(2, 'P', "p1", "p1"))
		s = commit(s, 2, 200, "", cpv(2, 'C', "p1", "p1"))
		read(s, cpv(1, 'P', "-", "-")).check(t, false, "was aborted, an answer shows it preparing")
	})
	t.Run("an abort that does not cascade", func(t *testing.T) {
		s := base(true).open("k2", 2).add(hIn{kind: opAbort, id: 1}, &hOut{status: 200, cp: cpv(1, 'A', "-", "-")})
		read(s, cpv(2, 'P', "-", "-")).check(t, false, "was aborted, an answer shows it preparing")
	})
	t.Run("the last vote of the lowest checkpoint leaves it preparing", func(t *testing.T) {
		base(true).vote(1, "a", 1, 'p', 200, "", cpv(1, 'P', "p1", "-")).
			vote(1, "b", 1, 'p', 200, "", cpv(1, 'P', "p1", "p1")).check(t, false, "yet it was not committed")
	})
	t.Run("pending forgets an ack owed", func(t *testing.T) {
		s := base(true).vote(1, "a", 1, 'p', 200, "", cpv(1, 'P', "p1", "-")).
			vote(1, "b", 1, 'p', 200, "", cpv(1, 'C', "p1", "p1"))
		pendingOf(s, "a").check(t, false, "which it owes an ack")
	})
	t.Run("too_many_checkpoints below the limit", func(t *testing.T) {
		base(true).add(hIn{kind: opOpen, key: "k2"}, &hOut{status: 409, code: "too_many_checkpoints", cp: cpv(1, 'P', "-", "-")}).
			check(t, false, "too_many_checkpoints with 1 preparing")
	})
}

// lyingProxy is a reverse proxy on loopback in front of target that passes every request
// on and lets lie rewrite the body of each 200 answer: lie gets the request and the body,
// and returns the body to send instead, or nil to send it as it is.
func lyingProxy(t testing.TB, target string, lie func(r *http.Request, body []byte) []byte) *api {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode == http.StatusOK {
			if told := lie(resp.Request, b); told != nil {
				b = told
			}
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return &api{base: srv.URL, hc: srv.Client()}
}

// rewriteJSON decodes body as a JSON object of raw members, lets change change them, and
// encodes it again (members change leaves alone keep their bytes); nil if change changed
// nothing (it says so).
func rewriteJSON(body []byte, change func(m map[string]json.RawMessage) bool) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil || !change(m) {
		return nil
	}
	return encodeRaw(m)
}

// encodeRaw encodes v as JSON without escaping <, > and & (as the coordinator does), so
// that committables inside keep their bytes; nil if it cannot.
func encodeRaw(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return nil
	}
	return bytes.TrimSpace(b.Bytes())
}

// checkCaught checks that a history check reported to rec that job's history is not
// linearizable, for a reason that mentions why, with a visualization that exists and is
// not empty.
func checkCaught(t *testing.T, rec *recordingTB, job, why string) {
	t.Helper()
	for _, e := range rec.errors {
		if !strings.Contains(e, "history of "+job+" is not linearizable") {
			continue
		}
		found, path, ok := strings.Cut(e, "; see ")
		if !ok {
			t.Fatalf("no visualization: %s", e)
		}
		if !strings.Contains(found, why) {
			t.Errorf("caught, but not for %q: %s", why, found)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Size() == 0 {
			t.Fatalf("visualization %s: %v, %v", path, fi, err)
		}
		if !strings.HasPrefix(path, os.Getenv("HISTORY_DIR")) {
			t.Errorf("visualization %s is not in HISTORY_DIR %s", path, os.Getenv("HISTORY_DIR"))
		}
		t.Logf("caught: %s (%d bytes)", e, fi.Size())
		return
	}
	t.Fatalf("the lie in %s was not caught; the check reported %q", job, rec.errors)
}

// TestHistoryCatchesLies runs the workload through a proxy that rewrites some of the
// coordinator's answers into answers the rules forbid, and checks that the history check
// refuses the history and writes its visualization; through an honest proxy it passes.
func TestHistoryCatchesLies(t *testing.T) {
	cluster := harness.StartCluster(t)
	coord := harness.StartCoordinator(t, cluster.NewDatabase(t), "--sweep-interval", "100ms")
	direct := newAPI(coord)
	t.Setenv("HISTORY_DIR", t.TempDir())

	// run runs the workload through a proxy that tells lie, until it made some progress
	// and the proxy changed at least wantLies answers.
	run := func(t *testing.T, job string, wantLies int64, lie func(r *http.Request, body []byte) []byte) *recordingTB {
		var lies atomic.Int64
		j := workloadJob{name: job, participants: []string{"sink-a", "sink-b", "source"}, autoCommit: true, maxConcurrent: 2, timeoutMs: 5000}
		w := newWorkload(t, []*api{lyingProxy(t, coord.BaseURL, func(r *http.Request, b []byte) []byte {
			told := lie(r, b)
			if told != nil {
				lies.Add(1)
			}
			return told
		})}, 5*time.Second, j)
		w.start()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if opened, votes, acks, _ := w.ledger.counts(); opened >= 5 && votes >= 10 && acks >= 5 && lies.Load() >= wantLies {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("too little progress through the proxy in 20 s (%d answers changed): %s", lies.Load(), w.ledger.stats())
			}
		}
		w.stop()
		t.Logf("%s; %d answers changed by the proxy", w.ledger.stats(), lies.Load())
		rec := &recordingTB{TB: t}
		w.checkHistory(rec, direct)
		return rec
	}

	t.Run("honest", func(t *testing.T) {
		rec := run(t, "honest", 0, func(*http.Request, []byte) []byte { return nil })
		if len(rec.errors) > 0 {
			t.Errorf("an honest history was refused: %q", rec.errors)
		}
	})
	t.Run("committed shown as aborted", func(t *testing.T) {
		rec := run(t, "lie-aborted", 1, func(r *http.Request, b []byte) []byte {
			if r.Method != "PUT" || !strings.Contains(r.URL.Path, "/acks/") {
				return nil
			}
			return rewriteJSON(b, func(m map[string]json.RawMessage) bool {
				if string(m["status"]) != `"committed"` {
					return false
				}
				m["status"] = json.RawMessage(`"aborted"`)
				return true
			})
		})
		checkCaught(t, rec, "lie-aborted", "aborted")
	})
	t.Run("recorded votes dropped", func(t *testing.T) {
		rec := run(t, "lie-votes", 3, func(r *http.Request, b []byte) []byte {
			_, voter, ok := strings.Cut(r.URL.Path, "/votes/")
			if r.Method != "PUT" || !ok {
				return nil
			}
			// The answer to one participant's vote leaves out the others' votes.
			return rewriteJSON(b, func(m map[string]json.RawMessage) bool {
				var parts []map[string]json.RawMessage
				if json.Unmarshal(m["participants"], &parts) != nil {
					return false
				}
				dropped := false
				for _, p := range parts {
					if string(p["name"]) != strconv.Quote(voter) && string(p["vote"]) != "null" {
						for _, k := range []string{"vote", "epoch", "committables", "voted_at"} {
							p[k] = json.RawMessage("null")
						}
						dropped = true
					}
				}
				m["participants"] = encodeRaw(parts)
				return dropped
			})
		})
		checkCaught(t, rec, "lie-votes", "checkpoint")
	})
	t.Run("an epoch not higher", func(t *testing.T) {
		var registrations atomic.Int64
		proxy := lyingProxy(t, coord.BaseURL, func(r *http.Request, b []byte) []byte {
			if !strings.HasSuffix(r.URL.Path, "/register") || registrations.Add(1) == 1 {
				return nil
			}
			// The second registration is answered with the first's epoch.
			return rewriteJSON(b, func(m map[string]json.RawMessage) bool {
				m["epoch"] = json.RawMessage("1")
				return true
			})
		})
		direct.mustDo(t, "PUT", jobPath("lie-epoch"), `{"participants":["p"]}`, http.StatusCreated, nil)
		h := newHistory()
		h.addJob("lie-epoch", []string{"p"}, true, 1)
		for range 2 {
			if rep, err := h.send(context.Background(), proxy, request{method: "POST", path: registerPath("lie-epoch", "p")}); err != nil || rep.status != http.StatusOK {
				t.Fatalf("register: %v %v", rep, err)
			}
		}
		rec := &recordingTB{TB: t}
		h.check(rec)
		checkCaught(t, rec, "lie-epoch", "register p gave epoch 1, it had 1 (rule 5)")
	})
}

// TestCheckpointList checks that a state's checkpoints, shared in chunks, are changed
// only in the clone that changes them, across chunk boundaries.
func TestCheckpointList(t *testing.T) {
	var l cpList
	for i := int64(1); i <= 2*cpChunk+10; i++ {
		l.push(&mCP{seen: i})
	}
	m := l.clone()
	m.set(cpChunk+6, &mCP{seen: -1})
	m.push(&mCP{seen: 2*cpChunk + 11})
	n := l.clone()
	n.push(&mCP{seen: -2})
	for id, c := range l.all() {
		if c.seen != id {
			t.Fatalf("the original's checkpoint %d is %d after its clones changed", id, c.seen)
		}
	}
	if l.len() != 2*cpChunk+10 || m.len() != l.len()+1 || n.len() != l.len()+1 {
		t.Fatalf("lengths %d %d %d", l.len(), m.len(), n.len())
	}
	if m.at(cpChunk+6).seen != -1 || m.at(m.len()).seen != 2*cpChunk+11 || n.at(n.len()).seen != -2 {
		t.Error("a clone's change is not in the clone")
	}
	if c := l.clone(); !l.equal(c) || l.equal(m) || m.equal(n) {
		t.Error("equal is wrong")
	}
	same := l.clone()
	same.set(3, &mCP{seen: 3})
	if !l.equal(same) {
		t.Error("a checkpoint replaced by an equal one made the lists differ")
	}

	// The hash kept up to date change by change is the hash of the content.
	hash := func(l *cpList) uint64 {
		var h uint64
		for id, c := range l.all() {
			h ^= c.hashed(int(id))
		}
		return h
	}
	l.sealed()
	x := l.clone()
	x.set(5, &mCP{seen: 50})
	x.set(5, &mCP{seen: 500}) // twice in one step
	x.push(&mCP{seen: 7})
	x.set(x.len(), &mCP{seen: 8})
	for _, c := range []*cpList{&l, &m, &n, &x} {
		if got, want := c.sealed(), hash(c); got != want {
			t.Errorf("kept hash %x, the content's %x", got, want)
		}
	}
	// Scans start after the settled prefix, and only there.
	y := x.clone()
	y.set(1, &mCP{status: 'D'})
	y.set(2, &mCP{status: 'A', parts: []hPart{{vote: 'a'}, {vote: 'p', acked: true}}})
	y.set(4, &mCP{status: 'D'})
	if y.sealed(); y.first() != 3 {
		t.Errorf("the first checkpoint not settled is %d, want 3", y.first())
	}
	y.set(3, &mCP{status: 'A', parts: []hPart{{vote: 'p'}}})
	if y.sealed(); y.first() != 3 {
		t.Errorf("an abort owed an ack counts as settled: first %d, want 3", y.first())
	}
}

// TestHistoryBound checks what bound makes of requests whose answers were lost: a lost
// request that never had a connection is left out; one sent to a coordinator whose process
// then ended is open until the end of the process it took its connection from; a retried
// write is open until its 2xx; anything else stays open to the end of the history.
func TestHistoryBound(t *testing.T) {
	const via, other = "http://127.0.0.1:1", "http://127.0.0.1:2"
	cfg := &histJob{participants: []string{"a"}, autoCommit: true, maxConcurrent: 1}
	vote := hIn{kind: opVote, job: "j", id: 1, p: "a", epoch: 1, vote: 'p', cfg: cfg}
	vote2 := hIn{kind: opVote, job: "j", id: 2, p: "a", epoch: 1, vote: 'p', cfg: cfg}
	ack := hIn{kind: opAck, job: "j", id: 1, p: "a", epoch: 1, cfg: cfg}
	lost := func(in hIn, call int64, via string, connAt int64) porcupine.Operation {
		return porcupine.Operation{Input: in, Call: call, Output: hOut{unknown: true, via: via, connAt: connAt}, Return: math.MaxInt64}
	}
	ends := map[string][]int64{via: {100, 200, 300}}
	ops := []porcupine.Operation{
		lost(vote, 10, via, 0),    // refused: never sent
		lost(vote, 10, via, 150),  // the process that ended at 200
		lost(vote, 10, via, 200),  // taken at the end: at most the next process's
		lost(vote, 10, via, 350),  // after the last end: open
		lost(vote, 10, other, 50), // a coordinator never killed: open
		lost(vote2, 10, "", 0),    // recorded without a coordinator (a cut): open
		lost(ack, 20, "", 0),      // retried below: open until its 2xx
		{Input: ack, Call: 30, Output: hOut{status: 200}, Return: 40},
		lost(hIn{kind: opRead, job: "j", id: 1, cfg: cfg}, 10, via, 150), // a read: left out
	}
	got := bound(ops, ends)
	var returns []int64
	for _, op := range got {
		returns = append(returns, op.Return)
	}
	const open = math.MaxInt64
	want := []int64{200, 200, open, open, open, 40, 40}
	if !slices.Equal(returns, want) {
		t.Errorf("bound returned operations ending at %v, want %v", returns, want)
	}
}

// TestHistoryVisualization checks that an illegal history with a lost answer (its Return
// at the end of time) is refused by history.check with a visualization written to
// HISTORY_DIR, which names the operations.
func TestHistoryVisualization(t *testing.T) {
	t.Setenv("HISTORY_DIR", t.TempDir())
	s := newScripted(true, 2).register("a", 1).register("b", 1).open("k1", 1).
		add(hIn{kind: opVote, id: 1, p: "a", epoch: 1, vote: 'p', chash: committablesHash(json.RawMessage(`["a"]`))}, nil).
		vote(1, "b", 1, 'p', 200, "", cpv(1, 'P', "-", "p1")).
		add(hIn{kind: opRead, id: 1}, &hOut{status: 200, cp: cpv(1, 'C', "-", "p1")})
	h := &history{ops: s.ops}
	rec := &recordingTB{TB: t}
	h.check(rec)
	checkCaught(t, rec, "j", "decided commit without every vote prepared (rule 2)")
	_, path, _ := strings.Cut(rec.errors[0], "; see ")
	html, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The page holds the operations as JSON, with > escaped.
	for _, want := range []string{"vote 1 a p@1", "lost (maybe applied)", `read 1 -\u003e 200`} {
		if !strings.Contains(string(html), want) {
			t.Errorf("the visualization does not show %q", want)
		}
	}
}

// TestHistoryRefusesUnmodeledRequests checks that a history holding a write the model does
// not know (here complete, which records acks) is not called checked, while creating the
// job before its first recorded request is fine.
func TestHistoryRefusesUnmodeledRequests(t *testing.T) {
	h := newHistory()
	h.addJob("j", []string{"a"}, true, 1)
	ok := reply{status: http.StatusOK, body: []byte(`{"epoch":1}`)}
	h.record(request{method: "PUT", path: jobPath("j"), body: `{"participants":["a"]}`}, h.now(), reply{status: http.StatusCreated}, nil, h.now())
	h.record(request{method: "POST", path: registerPath("j", "a")}, h.now(), ok, nil, h.now())
	rec := &recordingTB{TB: t}
	h.check(rec)
	if len(rec.errors) > 0 {
		t.Fatalf("a history of a creation and a registration was refused: %q", rec.errors)
	}
	h.record(request{method: "POST", path: cpPath("j", 1) + "/complete"}, h.now(), ok, nil, h.now())
	h.check(rec)
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], "/complete") {
		t.Fatalf("a history with a complete was not refused: %q", rec.errors)
	}
}
