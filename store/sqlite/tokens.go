package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/twophase/coordinator/coordinator"
)

var _ coordinator.TokenStore = (*Store)(nil)

// sqliteConstraint is SQLite's primary result code of a constraint violation (the name or
// digest of a token taken).
const sqliteConstraint = 19

// CreateToken implements coordinator.TokenStore.
func (s *Store) CreateToken(ctx context.Context, t *coordinator.Token, audit *coordinator.AuditEntry) (*coordinator.Token, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	scopes, err := json.Marshal(t.Scopes)
	if err != nil {
		return nil, err
	}
	out := *t
	out.CreatedAt = now()
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, createTokenSQL, t.Name, t.Digest, string(scopes), string(t.Job),
			nullable(t.Participant), out.CreatedAt.UnixMicro(), micros(t.ExpiresAt)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, bumpTokensVersionSQL); err != nil || audit == nil {
			return err
		}
		_, err := tx.ExecContext(ctx, insertAuditSQL, auditArgs(audit)...)
		return err
	})
	if primaryCode(err) == sqliteConstraint {
		return nil, &coordinator.Error{Code: coordinator.CodeTokenExists, Message: fmt.Sprintf("a token named %s exists already", t.Name)}
	}
	if err != nil {
		return nil, translate(fmt.Errorf("create token %s: %w", t.Name, err))
	}
	if out.ExpiresAt != nil {
		e := fromMicros(out.ExpiresAt.UnixMicro())
		out.ExpiresAt = &e
	}
	return &out, nil
}

// GetToken implements coordinator.TokenStore.
func (s *Store) GetToken(ctx context.Context, name string) (*coordinator.Token, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	t, err := scanToken(s.reader.QueryRowContext(ctx, getTokenSQL, name))
	return t, translate(err)
}

// ListTokens implements coordinator.TokenStore.
func (s *Store) ListTokens(ctx context.Context, after string, limit int) ([]*coordinator.Token, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.reader.QueryContext(ctx, listTokensSQL, after, limit)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var tokens []*coordinator.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, translate(err)
		}
		tokens = append(tokens, t)
	}
	return tokens, translate(rows.Err())
}

// DeleteToken implements coordinator.TokenStore.
func (s *Store) DeleteToken(ctx context.Context, name string, audit *coordinator.AuditEntry) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, deleteTokenSQL, name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return coordinator.ErrNotFound
		}
		if _, err = tx.ExecContext(ctx, bumpTokensVersionSQL); err != nil || audit == nil {
			return err
		}
		_, err = tx.ExecContext(ctx, insertAuditSQL, auditArgs(audit)...)
		return err
	})
	if errors.Is(err, coordinator.ErrNotFound) {
		return coordinator.ErrNotFound
	}
	return translate(err)
}

// TokensVersion implements coordinator.TokenStore.
func (s *Store) TokensVersion(ctx context.Context) (int64, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	var v int64
	err := s.reader.QueryRowContext(ctx, tokensVersionSQL).Scan(&v)
	return v, translate(err)
}

func scanToken(row scanner) (*coordinator.Token, error) {
	var (
		t           coordinator.Token
		scopes, job string
		participant sql.NullString
		created     int64
		expires     sql.NullInt64
	)
	if err := row.Scan(&t.Name, &t.Digest, &scopes, &job, &participant, &created, &expires); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(scopes), &t.Scopes); err != nil {
		return nil, fmt.Errorf("token %s: scopes: %w", t.Name, err)
	}
	t.Job, t.Participant = coordinator.JobPattern(job), participant.String
	t.CreatedAt, t.ExpiresAt = fromMicros(created), optionalTime(expires)
	return &t, nil
}

// ListAudit implements coordinator.Store.
func (s *Store) ListAudit(ctx context.Context, q coordinator.AuditQuery) ([]*coordinator.AuditEntry, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	prefix, isPrefix := q.Jobs.Prefix()
	exact := prefix
	if isPrefix {
		exact = ""
	}
	rows, err := s.reader.QueryContext(ctx, listAuditSQL, prefix, q.WithTokens, q.Before, q.Limit, exact)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []*coordinator.AuditEntry
	for rows.Next() {
		var (
			e                                    coordinator.AuditEntry
			at                                   int64
			action                               string
			job, token, subject, reason, request sql.NullString
			checkpoint                           sql.NullInt64
		)
		if err := rows.Scan(&e.ID, &at, &action, &job, &checkpoint, &token, &subject, &reason, &request); err != nil {
			return nil, translate(err)
		}
		e.At, e.Action, e.Checkpoint = fromMicros(at), coordinator.AuditAction(action), checkpoint.Int64
		e.Job, e.Token, e.Subject, e.Reason, e.RequestID = job.String, token.String, subject.String, reason.String, request.String
		out = append(out, &e)
	}
	return out, translate(rows.Err())
}

// auditArgs are insertAuditSQL's arguments for e; a zero At is now.
func auditArgs(e *coordinator.AuditEntry) []any {
	at := e.At
	if at.IsZero() {
		at = now()
	}
	var checkpoint any
	if e.Checkpoint != 0 {
		checkpoint = e.Checkpoint
	}
	return []any{at.UnixMicro(), string(e.Action), nullable(e.Job), checkpoint, nullable(e.Token), nullable(e.Subject), nullable(e.Reason), nullable(e.RequestID)}
}

// Stats implements coordinator.Store, on one snapshot.
func (s *Store) Stats(ctx context.Context, lastCommitted bool) (*coordinator.Stats, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	out := &coordinator.Stats{LastCommitted: map[string]int64{}}
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, openStatsSQL)
		if err != nil {
			return err
		}
		for rows.Next() {
			var o coordinator.OpenCheckpoints
			var status string
			var oldest int64
			if err := rows.Scan(&o.Job, &status, &o.Count, &oldest); err != nil {
				rows.Close()
				return err
			}
			o.Status, o.Oldest = coordinator.Status(status), fromMicros(oldest)
			out.Open = append(out.Open, o)
		}
		if err := rows.Err(); err != nil || !lastCommitted {
			return err
		}
		rows, err = tx.QueryContext(ctx, lastCommittedStatsSQL)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var job string
			var id int64
			if err := rows.Scan(&job, &id); err != nil {
				return err
			}
			out.LastCommitted[job] = id
		}
		return rows.Err()
	})
	if err != nil {
		return nil, translate(fmt.Errorf("read statistics: %w", err))
	}
	return out, nil
}

// JobsToPrune implements coordinator.Store, by the store's clock.
func (s *Store) JobsToPrune(ctx context.Context, after string, limit int) ([]string, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	jobs, err := s.readNames(ctx, jobsToPruneSQL, after, now().UnixMicro(), limit)
	if err != nil {
		return nil, translate(fmt.Errorf("look for expired checkpoints: %w", err))
	}
	return jobs, nil
}

// DeleteExpired implements coordinator.Store, job after job in one transaction. One
// process owns the data directory: it is never skipped.
func (s *Store) DeleteExpired(ctx context.Context, jobs []string, limit int) (int, string, bool, error) {
	if err := s.checkOpen(); err != nil {
		return 0, "", false, err
	}
	var deleted int
	var last string
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		deleted, last = 0, ""
		at := now().UnixMicro()
		for _, job := range jobs {
			res, err := tx.ExecContext(ctx, deleteExpiredSQL, job, at, limit-deleted)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			deleted += int(n)
			if deleted >= limit {
				last = job
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return 0, "", false, translate(fmt.Errorf("delete expired checkpoints: %w", err))
	}
	return deleted, last, false, nil
}
