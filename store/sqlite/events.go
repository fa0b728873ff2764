package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// The event streams read checkpoint_events, which every status change writes in the
// transaction that makes it (jobTx.insertCheckpoint, jobTx.saveStatus). One connection
// writes, one transaction at a time, so a change's tx (its row id) is higher than every
// change committed before it: whatever a read sees is final, nothing is ever held back.

// insertEventSQL records a status change: ? job, ? checkpoint, ? rank, ? status, ? at.
const insertEventSQL = "INSERT INTO checkpoint_events (job, checkpoint, rank, status, at) VALUES (?, ?, ?, ?, ?)"

// eventsAfterSQL reads up to ?5 status changes after position (?1, ?2, ?3, ?4) of every
// job; eventsOfJobAfterSQL those of job ?2.
const (
	eventsAfterSQL = `SELECT tx, job, checkpoint, rank, status, at FROM checkpoint_events
		WHERE tx >= ?1 AND (tx, job, checkpoint, rank) > (?1, ?2, ?3, ?4) ORDER BY tx LIMIT ?5`
	eventsOfJobAfterSQL = `SELECT tx, job, checkpoint, rank, status, at FROM checkpoint_events
		WHERE job = ?2 AND tx >= ?1 AND (tx, checkpoint, rank) > (?1, ?3, ?4) ORDER BY tx LIMIT ?5`
)

// eventsHorizonSQL reads the position of the last change retention deleted.
const eventsHorizonSQL = "SELECT tx, job, checkpoint, rank FROM checkpoint_events_horizon"

// eventHeadSQL reads the id after the last change recorded.
const eventHeadSQL = "SELECT coalesce(max(tx), 0) + 1 FROM checkpoint_events"

// pruneEventsSQL deletes up to ?2 status changes recorded before ?1, oldest first, and
// returns their positions.
const pruneEventsSQL = `DELETE FROM checkpoint_events WHERE tx IN (
	SELECT tx FROM checkpoint_events WHERE at < ?1 ORDER BY tx LIMIT ?2) RETURNING tx, job, checkpoint, rank`

// saveHorizonSQL moves the horizon forward to ?1..?4.
const saveHorizonSQL = `INSERT INTO checkpoint_events_horizon (one, tx, job, checkpoint, rank) VALUES (1, ?1, ?2, ?3, ?4)
	ON CONFLICT (one) DO UPDATE SET tx = excluded.tx, job = excluded.job, checkpoint = excluded.checkpoint, rank = excluded.rank
	WHERE excluded.tx > checkpoint_events_horizon.tx`

// Events implements coordinator.EventStore.
func (s *Store) Events(ctx context.Context, job string, after coordinator.EventPosition, limit int) (coordinator.EventPage, error) {
	var page coordinator.EventPage
	if err := s.checkOpen(); err != nil {
		return page, err
	}
	if job != "" {
		after.Job = job
	}
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return page, translate(err)
	}
	defer tx.Rollback()
	read := eventsAfterSQL
	if job != "" {
		read = eventsOfJobAfterSQL
	}
	rows, err := tx.QueryContext(ctx, read, after.Tx, after.Job, after.Checkpoint, after.Rank, limit)
	if err != nil {
		return page, translate(err)
	}
	for rows.Next() {
		var e coordinator.StatusEvent
		var status string
		var at int64
		if err := rows.Scan(&e.Tx, &e.Job, &e.Checkpoint, &e.Rank, &status, &at); err != nil {
			rows.Close()
			return page, translate(err)
		}
		e.Status, e.At = coordinator.Status(status), fromMicros(at)
		page.Events = append(page.Events, e)
	}
	if err := rows.Err(); err != nil {
		return page, translate(err)
	}
	var h coordinator.EventPosition
	err = tx.QueryRowContext(ctx, eventsHorizonSQL).Scan(&h.Tx, &h.Job, &h.Checkpoint, &h.Rank)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return page, translate(err)
	default:
		page.Reset = after.Less(h)
	}
	return page, nil
}

// EventHead implements coordinator.EventStore.
func (s *Store) EventHead(ctx context.Context) (coordinator.EventPosition, error) {
	if err := s.checkOpen(); err != nil {
		return coordinator.EventPosition{}, err
	}
	var tx int64
	if err := s.reader.QueryRowContext(ctx, eventHeadSQL).Scan(&tx); err != nil {
		return coordinator.EventPosition{}, translate(err)
	}
	return coordinator.EventPosition{Tx: tx}, nil
}

// PruneEvents implements coordinator.EventStore.
func (s *Store) PruneEvents(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	var n int
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		n = 0
		rows, err := tx.QueryContext(ctx, pruneEventsSQL, cutoff.UnixMicro(), limit)
		if err != nil {
			return err
		}
		var last coordinator.EventPosition
		for rows.Next() {
			var p coordinator.EventPosition
			if err := rows.Scan(&p.Tx, &p.Job, &p.Checkpoint, &p.Rank); err != nil {
				rows.Close()
				return err
			}
			if last.Less(p) {
				last = p
			}
			n++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		_, err = tx.ExecContext(ctx, saveHorizonSQL, last.Tx, last.Job, last.Checkpoint, last.Rank)
		return err
	})
	if err != nil {
		return 0, translate(err)
	}
	return n, nil
}

// SubscribeEverything implements coordinator.EventStore.
func (s *Store) SubscribeEverything() *coordinator.Subscription {
	return s.broker.SubscribeEverything()
}
