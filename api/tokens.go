package api

import (
	"context"
	"net/http"
	"net/url"

	"github.com/twophase/coordinator/coordinator"
)

// The admin's token routes. Without authentication they are refused: tokens take effect
// only once it is on, and until then `coordinator token` manages them.

func (s *server) tokensOn() (*coordinator.Tokens, error) {
	if s.tokens == nil {
		return nil, forbidden("authentication is off on this coordinator (no admin token is configured): " +
			"manage tokens with 'coordinator token', or turn authentication on")
	}
	return s.tokens, nil
}

func (s *server) CreateToken(ctx context.Context, req CreateTokenRequestObject) (CreateTokenResponseObject, error) {
	tokens, err := s.tokensOn()
	if err != nil {
		return nil, err
	}
	if req.Body == nil {
		return nil, invalid("body", "a TokenRequest is required")
	}
	t := coordinator.Token{Name: req.Body.Name, ExpiresAt: req.Body.ExpiresAt}
	if req.Body.Job != nil {
		t.Job = coordinator.JobPattern(*req.Body.Job)
	}
	for _, sc := range req.Body.Scopes {
		t.Scopes = append(t.Scopes, coordinator.Scope(sc))
	}
	if req.Body.Participant != nil {
		t.Participant = *req.Body.Participant
	}
	created, secret, err := tokens.Create(ctx, t)
	if err != nil {
		return nil, err
	}
	// This coordinator accepts it from its answer on; the others within RefreshInterval.
	if err := s.auth.Refresh(ctx); err != nil {
		return nil, err
	}
	view := tokenBody(created)
	body := TokenCreated{Name: view.Name, Scopes: view.Scopes, Job: view.Job, Participant: view.Participant,
		CreatedAt: view.CreatedAt, ExpiresAt: view.ExpiresAt, Token: secret}
	return jsonResponse{status: http.StatusCreated, body: body, location: tokenPath(created.Name)}, nil
}

func (s *server) ListTokens(ctx context.Context, req ListTokensRequestObject) (ListTokensResponseObject, error) {
	tokens, err := s.tokensOn()
	if err != nil {
		return nil, err
	}
	after, err := nameCursor(cursorTokens, req.Params.Cursor)
	if err != nil {
		return nil, err
	}
	list, more, err := tokens.List(ctx, after, pageLimit(req.Params.Limit))
	if err != nil {
		return nil, err
	}
	out := TokenList{Items: make([]Token, len(list))}
	for i, t := range list {
		out.Items[i] = tokenBody(t)
	}
	if more && len(list) > 0 {
		out.NextCursor = ptr(encodeCursor(cursorTokens, list[len(list)-1].Name))
	}
	return ok(out), nil
}

func (s *server) GetToken(ctx context.Context, req GetTokenRequestObject) (GetTokenResponseObject, error) {
	tokens, err := s.tokensOn()
	if err != nil {
		return nil, err
	}
	t, err := tokens.Get(ctx, req.Name)
	if err != nil {
		return nil, err
	}
	return ok(tokenBody(t)), nil
}

func (s *server) DeleteToken(ctx context.Context, req DeleteTokenRequestObject) (DeleteTokenResponseObject, error) {
	tokens, err := s.tokensOn()
	if err != nil {
		return nil, err
	}
	if err := tokens.Revoke(ctx, req.Name); err != nil {
		return nil, err
	}
	return jsonResponse{status: http.StatusNoContent}, nil
}

func tokenPath(name string) string { return "/v1/tokens/" + url.PathEscape(name) }
