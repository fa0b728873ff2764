package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The stores record every status change of a checkpoint (opened preparing, decided
// committing or aborted, completed committed) as a StatusEvent in the transaction that
// made it, so that the event streams can tell, after any reconnect and through any
// coordinator, exactly which status changes came after a position: none lost, none twice,
// in order. Votes and acks are not recorded: a stream shows them live, with the
// checkpoint, but a reconnect goes on from the last status change.

// EventPosition is a place in the order of status changes: the changes after it are those
// whose (Tx, Job, Checkpoint, Rank) is greater. Tx orders the transactions that made them
// so that a change is never found before one that precedes it: every change with a lower
// Tx has committed (or never will) by the time a store returns one.
type EventPosition struct {
	Tx         int64
	Job        string
	Checkpoint int64
	Rank       int
}

// StatusEvent is one status change: checkpoint Checkpoint of Job became Status at At (the
// database's clock of the change).
type StatusEvent struct {
	EventPosition
	Status Status
	At     time.Time
}

// EventPage is what Store.Events returns.
type EventPage struct {
	// Events are the status changes after the position asked for, in order.
	Events []StatusEvent
	// Held says that changes were committed that cannot be returned yet, because a
	// transaction that may precede them has not ended: ask again shortly.
	Held bool
	// Reset says that status changes after the position were deleted by retention.
	Reset bool
}

// StatusRank orders the status changes of one checkpoint made in one transaction:
// preparing before committing or aborted, committing before committed.
func StatusRank(s Status) int {
	switch s {
	case StatusPreparing:
		return 1
	case StatusCommitted:
		return 3
	}
	return 2
}

// Less reports whether p comes before q.
func (p EventPosition) Less(q EventPosition) bool {
	if p.Tx != q.Tx {
		return p.Tx < q.Tx
	}
	if p.Job != q.Job {
		return p.Job < q.Job
	}
	if p.Checkpoint != q.Checkpoint {
		return p.Checkpoint < q.Checkpoint
	}
	return p.Rank < q.Rank
}

// String is the position as an event stream's id: "tx.checkpoint.rank.job".
func (p EventPosition) String() string {
	return strconv.FormatInt(p.Tx, 10) + "." + strconv.FormatInt(p.Checkpoint, 10) + "." + strconv.Itoa(p.Rank) + "." + p.Job
}

// ParseEventPosition reads an id that EventPosition.String wrote.
func ParseEventPosition(s string) (EventPosition, error) {
	parts := strings.SplitN(s, ".", 4)
	bad := fmt.Errorf("%.80q is not an event id of this coordinator", s)
	if len(parts) != 4 {
		return EventPosition{}, bad
	}
	tx, err1 := strconv.ParseInt(parts[0], 10, 64)
	cp, err2 := strconv.ParseInt(parts[1], 10, 64)
	rank, err3 := strconv.Atoi(parts[2])
	if err := errors.Join(err1, err2, err3); err != nil || tx < 0 || cp < 0 || rank < 0 || rank > 3 ||
		(parts[3] != "" && !ValidName(parts[3])) || (parts[3] == "" && (cp != 0 || rank != 0)) {
		return EventPosition{}, bad
	}
	return EventPosition{Tx: tx, Job: parts[3], Checkpoint: cp, Rank: rank}, nil
}

// AsOf returns cp as it stood when it became status, from cp as it stands now (at status
// or later): the fields that a later change set are cleared. A status change of the past
// shows the checkpoint at that change, so that a stream never shows a status twice.
func AsOf(cp *Checkpoint, status Status) *Checkpoint {
	if cp.Status == status {
		return cp
	}
	c := cp.Clone()
	c.Status = status
	c.CompletedAt = nil
	for i := range c.Participants {
		p := &c.Participants[i]
		p.AckedAt, p.AckedBy = nil, ""
		if status == StatusPreparing {
			p.Epoch, p.Vote, p.VotedAt, p.Reason, p.Committables = 0, "", nil, "", nil
		}
	}
	if status == StatusPreparing {
		c.DecidedAt, c.AbortReason, c.DecidedBy, c.DecisionCause = nil, "", "", ""
	}
	return c
}

// EventStore is what a store offers the event streams.
type EventStore interface {
	// Events returns up to limit status changes after pos, of job or, when job is "", of
	// every job, in order (EventPage).
	Events(ctx context.Context, job string, after EventPosition, limit int) (EventPage, error)
	// EventHead returns a position after every status change committed so far (and before
	// every one that is not): where a stream that asked for no position begins.
	EventHead(ctx context.Context) (EventPosition, error)
	// PruneEvents deletes up to limit status changes recorded before cutoff, oldest first,
	// and returns how many it deleted. A position before any of them is reset afterwards.
	PruneEvents(ctx context.Context, cutoff time.Time, limit int) (int, error)
	// SubscribeEverything returns a subscription woken by this process's next wake-up of
	// any waiter: a change of any job, by this process or heard from another.
	SubscribeEverything() *Subscription
}
