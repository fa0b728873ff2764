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
func (s *Store) CreateToken(ctx context.Context, t *coordinator.Token) (*coordinator.Token, error) {
	scopes := make([]string, len(t.Scopes))
	for i, sc := range t.Scopes {
		scopes[i] = string(sc)
	}
	out, err := scanToken(s.pool.QueryRow(ctx, createTokenSQL,
		t.Name, t.Digest, scopes, string(t.Job), nullable(t.Participant), t.ExpiresAt))
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
func (s *Store) DeleteToken(ctx context.Context, name string) error {
	var deleted string
	err := s.pool.QueryRow(ctx, deleteTokenSQL, name).Scan(&deleted)
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
