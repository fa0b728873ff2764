package api

import (
	"compress/gzip"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"

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
func (s *server) GetMetrics(ctx context.Context, req GetMetricsRequestObject) (GetMetricsResponseObject, error) {
	if s.metrics == nil {
		return nil, &requestError{code: codeNotFound, detail: "this coordinator serves no metrics"}
	}
	return metricsResponse{m: s.metrics, gzip: req.Params.AcceptEncoding != nil && acceptsGzip(*req.Params.AcceptEncoding)}, nil
}

type metricsResponse struct {
	m    *metrics.Metrics
	gzip bool
}

func (r metricsResponse) VisitGetMetricsResponse(w http.ResponseWriter) error {
	w.Header().Set("Content-Type", metrics.ContentType())
	w.Header().Add("Vary", "Accept-Encoding")
	if !r.gzip {
		w.WriteHeader(http.StatusOK)
		_, err := r.m.WriteText(w)
		return err
	}
	w.Header().Set("Content-Encoding", "gzip")
	w.WriteHeader(http.StatusOK)
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(w)
	if _, err := r.m.WriteText(zw); err != nil {
		return err
	}
	return zw.Close()
}

// gzipWriters are reused from scrape to scrape: a gzip.Writer holds some hundreds of KiB.
var gzipWriters = sync.Pool{New: func() any { w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed); return w }}

// acceptsGzip reports whether an Accept-Encoding header's codings include gzip (or *) with
// a weight above 0 (RFC 9110 12.5.3).
func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		coding, params, _ := strings.Cut(part, ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		if coding != "gzip" && coding != "*" {
			continue
		}
		if q, ok := strings.CutPrefix(strings.ReplaceAll(strings.ToLower(params), " ", ""), "q="); ok {
			if w, err := strconv.ParseFloat(q, 64); err == nil && w == 0 {
				continue
			}
		}
		return true
	}
	return false
}
