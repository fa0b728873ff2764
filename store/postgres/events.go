package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/coordinator"
)

// The event streams read checkpoint_events, which every status change writes in the
// transaction that makes it (insertCheckpointSQL, saveStatusSQL). A change is returned only
// once no transaction of this database that could precede it is still running: its tx (the
// 64-bit transaction id) is below the oldest one still running. The oldest is read by one
// statement (eventsXminSQL) and used by the next (eventsAfterSQL), whose snapshot is taken
// after it: every transaction below it had ended before that snapshot, so what it
// committed is seen, and nothing can commit below it later. Reading the oldest from the
// same statement's snapshot would not do: a transaction could end between the snapshot and
// the read of pg_stat_activity, unseen by the one and absent from the other.

// eventsXminSQL keeps, as the session's setting twophase.events_xmin, the 64-bit id of the
// oldest transaction of this database still running (its prepared transactions too), or the
// next id to be assigned when none runs. pg_stat_activity gives 32-bit ids: each is put in
// the epoch of the next id, or the one before when that would put it after it. Other
// databases of the server are not looked at, so their long transactions do not hold this
// database's streams back.
const eventsXminSQL = `
	WITH c AS (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS next),
	running AS (
		SELECT backend_xid::text::bigint AS x FROM pg_stat_activity WHERE datname = current_database() AND backend_xid IS NOT NULL
		UNION ALL
		SELECT transaction::text::bigint FROM pg_prepared_xacts WHERE database = current_database())
	SELECT set_config('twophase.events_xmin', least(c.next, coalesce(min(
		((c.next >> 32) << 32) + r.x - CASE WHEN ((c.next >> 32) << 32) + r.x > c.next THEN 4294967296 ELSE 0 END), c.next))::text, false)
	FROM c LEFT JOIN running r ON true GROUP BY c.next`

// eventsXminValue is the oldest running transaction eventsXminSQL kept.
const eventsXminValue = "current_setting('twophase.events_xmin')::bigint"

// eventsAfterSQL reads up to $5 status changes after position ($1, $2, $3, $4), of every
// job, below the oldest running transaction; eventsOfJobAfterSQL those of job $2 (through the
// primary key from the position on: a job's stream reads the store only to catch up).
const (
	eventsAfterSQL = `SELECT tx, job, checkpoint, rank, status, at FROM checkpoint_events
		WHERE tx >= $1 AND (tx, job, checkpoint, rank) > ($1, $2, $3, $4) AND tx < ` + eventsXminValue + `
		ORDER BY tx, job, checkpoint, rank LIMIT $5`
	eventsOfJobAfterSQL = `SELECT tx, job, checkpoint, rank, status, at FROM checkpoint_events
		WHERE job = $2 AND tx >= $1 AND (tx, checkpoint, rank) > ($1, $3, $4) AND tx < ` + eventsXminValue + `
		ORDER BY tx, checkpoint, rank LIMIT $5`
)

// eventsHeldSQL tells whether a status change after position ($1, $2, $3, $4) has
// committed that eventsAfterSQL cannot return yet (of job $2 when $5); and the position of
// the last change retention deleted, if any.
const eventsHeldSQL = `SELECT
		EXISTS (SELECT 1 FROM checkpoint_events WHERE tx >= ` + eventsXminValue + ` AND (tx, job, checkpoint, rank) > ($1, $2, $3, $4)
			AND (NOT $5 OR job = $2)),
		h.tx, h.job, h.checkpoint, h.rank
	FROM (SELECT 1) one LEFT JOIN checkpoint_events_horizon h ON true`

// eventHeadSQL is the position where a new stream begins: before the oldest running
// transaction, after every change below it.
const eventHeadSQL = "SELECT " + eventsXminValue

// pruneEventsSQL deletes up to $2 status changes recorded before $1, oldest first, and
// moves the horizon to the last of them.
const pruneEventsSQL = `
	WITH d AS (
		DELETE FROM checkpoint_events WHERE (tx, job, checkpoint, rank) IN (
			SELECT tx, job, checkpoint, rank FROM checkpoint_events WHERE at < $1 ORDER BY tx, job, checkpoint, rank LIMIT $2)
		RETURNING tx, job, checkpoint, rank),
	last AS (SELECT tx, job, checkpoint, rank FROM d ORDER BY tx DESC, job DESC, checkpoint DESC, rank DESC LIMIT 1),
	h AS (
		INSERT INTO checkpoint_events_horizon (tx, job, checkpoint, rank) SELECT tx, job, checkpoint, rank FROM last
		ON CONFLICT (one) DO UPDATE SET tx = excluded.tx, job = excluded.job, checkpoint = excluded.checkpoint, rank = excluded.rank
		WHERE (checkpoint_events_horizon.tx, checkpoint_events_horizon.job, checkpoint_events_horizon.checkpoint, checkpoint_events_horizon.rank) <
			(excluded.tx, excluded.job, excluded.checkpoint, excluded.rank))
	SELECT count(*) FROM d`

// Events implements coordinator.EventStore.
func (s *Store) Events(ctx context.Context, job string, after coordinator.EventPosition, limit int) (coordinator.EventPage, error) {
	var page coordinator.EventPage
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return page, translate(err)
	}
	defer conn.Release()
	read := eventsAfterSQL
	if job != "" {
		read = eventsOfJobAfterSQL
		after.Job = job
	}
	b := &pgx.Batch{}
	b.Queue(eventsXminSQL)
	b.Queue(read, after.Tx, after.Job, after.Checkpoint, after.Rank, limit)
	b.Queue(eventsHeldSQL, after.Tx, after.Job, after.Checkpoint, after.Rank, job != "")
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return page, translate(err)
	}
	rows, err := br.Query()
	if err != nil {
		return page, translate(err)
	}
	for rows.Next() {
		var e coordinator.StatusEvent
		var status string
		if err := rows.Scan(&e.Tx, &e.Job, &e.Checkpoint, &e.Rank, &status, &e.At); err != nil {
			rows.Close()
			return page, translate(err)
		}
		e.Status = coordinator.Status(status)
		page.Events = append(page.Events, e)
	}
	if err := rows.Err(); err != nil {
		return page, translate(err)
	}
	var htx, hcp *int64
	var hjob *string
	var hrank *int
	if err := br.QueryRow().Scan(&page.Held, &htx, &hjob, &hcp, &hrank); err != nil {
		return page, translate(err)
	}
	if htx != nil {
		horizon := coordinator.EventPosition{Tx: *htx, Job: *hjob, Checkpoint: *hcp, Rank: *hrank}
		// Changes up to the horizon may be gone. A job's position names the job, so that
		// another job's changes deleted at the same transaction are no loss of its own.
		page.Reset = after.Less(horizon)
	}
	return page, nil
}

// EventHead implements coordinator.EventStore.
func (s *Store) EventHead(ctx context.Context) (coordinator.EventPosition, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return coordinator.EventPosition{}, translate(err)
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(eventsXminSQL)
	b.Queue(eventHeadSQL)
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return coordinator.EventPosition{}, translate(err)
	}
	var xmin int64
	if err := br.QueryRow().Scan(&xmin); err != nil {
		return coordinator.EventPosition{}, translate(err)
	}
	// Every change below xmin comes before; the position (xmin, "", 0, 0) is before every
	// change of xmin and later.
	return coordinator.EventPosition{Tx: xmin}, nil
}

// PruneEvents implements coordinator.EventStore.
func (s *Store) PruneEvents(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, pruneEventsSQL, cutoff, limit).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, translate(err)
	}
	return n, nil
}

// SubscribeEverything implements coordinator.EventStore.
func (s *Store) SubscribeEverything() *coordinator.Subscription {
	return s.broker.SubscribeEverything()
}
