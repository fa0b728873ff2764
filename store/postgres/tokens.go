package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/twophase/coordinator/coordinator"
)

var _ coordinator.TokenStore = (*Store)(nil)

// CreateToken implements coordinator.TokenStore.
func (s *Store) CreateToken(ctx context.Context, t *coordinator.Token, audit *coordinator.AuditEntry) (*coordinator.Token, error) {
	scopes := make([]string, len(t.Scopes))
	for i, sc := range t.Scopes {
		scopes[i] = string(sc)
	}
	var out *coordinator.Token
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = scanToken(tx.QueryRow(ctx, createTokenSQL, t.Name, t.Digest, scopes, string(t.Job), nullable(t.Participant), t.ExpiresAt))
		if err != nil || audit == nil {
			return err
		}
		_, err = tx.Exec(ctx, insertAuditSQL, auditArgs(audit)...)
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return nil, &coordinator.Error{Code: coordinator.CodeTokenExists, Message: fmt.Sprintf("a token named %s exists already", t.Name)}
	}
	if err != nil {
		return nil, translate(err)
	}
	return out, nil
}

// GetToken implements coordinator.TokenStore.
func (s *Store) GetToken(ctx context.Context, name string) (*coordinator.Token, error) {
	t, err := scanToken(s.pool.QueryRow(ctx, getTokenSQL, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, coordinator.ErrNotFound
	}
	return t, translate(err)
}

// ListTokens implements coordinator.TokenStore.
func (s *Store) ListTokens(ctx context.Context, after string, limit int) ([]*coordinator.Token, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := s.pool.Query(ctx, listTokensSQL, after, lim)
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
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var deleted string
		if err := tx.QueryRow(ctx, deleteTokenSQL, name).Scan(&deleted); err != nil || audit == nil {
			return err
		}
		_, err := tx.Exec(ctx, insertAuditSQL, auditArgs(audit)...)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return coordinator.ErrNotFound
	}
	return translate(err)
}

// TokensVersion implements coordinator.TokenStore.
func (s *Store) TokensVersion(ctx context.Context) (int64, error) {
	var v int64
	err := s.pool.QueryRow(ctx, tokensVersionSQL).Scan(&v)
	return v, translate(err)
}

func scanToken(row pgx.Row) (*coordinator.Token, error) {
	var (
		t           coordinator.Token
		scopes      []string
		job         string
		participant *string
		expires     *time.Time
	)
	if err := row.Scan(&t.Name, &t.Digest, &scopes, &job, &participant, &t.CreatedAt, &expires); err != nil {
		return nil, err
	}
	t.Job = coordinator.JobPattern(job)
	for _, sc := range scopes {
		t.Scopes = append(t.Scopes, coordinator.Scope(sc))
	}
	if participant != nil {
		t.Participant = *participant
	}
	t.CreatedAt = t.CreatedAt.UTC()
	t.ExpiresAt = utc(expires)
	return &t, nil
}

// ListAudit implements coordinator.Store.
func (s *Store) ListAudit(ctx context.Context, q coordinator.AuditQuery) ([]*coordinator.AuditEntry, error) {
	prefix, exact := patternArgs(q.Jobs)
	rows, err := s.pool.Query(ctx, listAuditSQL, prefix, q.WithTokens, q.Before, q.Limit, exact)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []*coordinator.AuditEntry
	for rows.Next() {
		var (
			e                                    coordinator.AuditEntry
			action                               string
			job, token, subject, reason, request *string
			checkpoint                           *int64
		)
		if err := rows.Scan(&e.ID, &e.At, &action, &job, &checkpoint, &token, &subject, &reason, &request); err != nil {
			return nil, translate(err)
		}
		e.At, e.Action = e.At.UTC(), coordinator.AuditAction(action)
		e.Job, e.Token, e.Subject, e.Reason, e.RequestID = deref(job), deref(token), deref(subject), deref(reason), deref(request)
		if checkpoint != nil {
			e.Checkpoint = *checkpoint
		}
		out = append(out, &e)
	}
	return out, translate(rows.Err())
}

// auditArgs are insertAuditSQL's arguments for e; a zero At is the database's clock.
func auditArgs(e *coordinator.AuditEntry) []any {
	var at *time.Time
	if !e.At.IsZero() {
		at = &e.At
	}
	var checkpoint *int64
	if e.Checkpoint != 0 {
		checkpoint = &e.Checkpoint
	}
	return []any{at, string(e.Action), nullable(e.Job), checkpoint, nullable(e.Token), nullable(e.Subject), nullable(e.Reason), nullable(e.RequestID)}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Stats implements coordinator.Store, in one read-only transaction.
func (s *Store) Stats(ctx context.Context, lastCommitted bool) (*coordinator.Stats, error) {
	out := &coordinator.Stats{LastCommitted: map[string]int64{}}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, openStatsSQL)
		if err != nil {
			return err
		}
		for rows.Next() {
			var o coordinator.OpenCheckpoints
			var status string
			if err := rows.Scan(&o.Job, &status, &o.Count, &o.Oldest); err != nil {
				rows.Close()
				return err
			}
			o.Status, o.Oldest = coordinator.Status(status), o.Oldest.UTC()
			out.Open = append(out.Open, o)
		}
		if err := rows.Err(); err != nil || !lastCommitted {
			return err
		}
		rows, err = tx.Query(ctx, lastCommittedStatsSQL)
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

// JobsToPrune implements coordinator.Store.
func (s *Store) JobsToPrune(ctx context.Context, after string, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, jobsToPruneSQL, after, limit)
	if err != nil {
		return nil, translate(fmt.Errorf("look for expired checkpoints: %w", err))
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, translate(fmt.Errorf("look for expired checkpoints: %w", err))
	}
	return jobs, nil
}

// DeleteExpired implements coordinator.Store.
func (s *Store) DeleteExpired(ctx context.Context, jobs []string, limit int) (int, string, bool, error) {
	if len(jobs) == 0 {
		return 0, "", false, nil
	}
	var got bool
	var chosen, deleted int
	var last string
	var from []string
	err := s.pool.QueryRow(ctx, deleteExpiredSQL, jobs, limit, retentionLockKey).Scan(&got, &chosen, &last, &deleted, &from)
	if err != nil {
		return 0, "", false, translate(fmt.Errorf("delete expired checkpoints: %w", err))
	}
	for _, job := range from {
		s.committer.cache.forget(job)
	}
	if chosen < limit {
		last = ""
	}
	return deleted, last, !got, nil
}
