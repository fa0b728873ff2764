package api

import (
	"context"
	"net/http"

	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/metrics"
)

// BuildInfo is what GET /v1/info tells about the running build and its store. The wiring
// (cmd/coordinator) knows it; the handler only answers it. It holds no secret, and must
// not: the operation is open to every caller.
type BuildInfo struct {
	// Version is the build's version, as "coordinator --version" prints it.
	Version string
	// GoVersion is the Go release the build was made with.
	GoVersion string
	// Store is InfoStorePostgres or InfoStoreEmbedded.
	Store InfoStore
	// SchemaExpected is the schema version this build needs.
	SchemaExpected uint
	// SchemaVersion returns the store's schema version as last read. It is called on
	// every request, so it must answer from what it knows rather than wait for the
	// database for long, and it cannot fail: the operation answers 200 whether or not
	// the database answers. nil means SchemaExpected, for a store whose schema cannot
	// change while it is open.
	SchemaVersion func(ctx context.Context) uint
}

func (s *server) GetInfo(ctx context.Context, _ GetInfoRequestObject) (GetInfoResponseObject, error) {
	b := s.build
	if b == nil {
		return nil, &coordinator.Error{Code: coordinator.CodeNotFound, Message: "this server was not told what build it runs"}
	}
	schema := b.SchemaExpected
	if b.SchemaVersion != nil {
		schema = b.SchemaVersion(ctx)
	}
	return ok(Info{
		Version:        b.Version,
		GoVersion:      b.GoVersion,
		Store:          b.Store,
		SchemaVersion:  int(schema),
		SchemaExpected: int(b.SchemaExpected),
	}), nil
}

// GetMetrics answers the Prometheus text format.
func (s *server) GetMetrics(ctx context.Context, _ GetMetricsRequestObject) (GetMetricsResponseObject, error) {
	if s.metrics == nil {
		return nil, &requestError{code: codeNotFound, detail: "this coordinator serves no metrics"}
	}
	return metricsResponse{s.metrics}, nil
}

type metricsResponse struct{ m *metrics.Metrics }

func (r metricsResponse) VisitGetMetricsResponse(w http.ResponseWriter) error {
	w.Header().Set("Content-Type", metrics.ContentType())
	w.WriteHeader(http.StatusOK)
	_, err := r.m.WriteText(w)
	return err
}
