package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/twophase/coordinator/clients/go/coordinatorclient"
	"github.com/twophase/coordinator/coordinator"
	"github.com/twophase/coordinator/store/sqlite"
)

// infoServer serves the API with build on the embedded store (GET /v1/info reads no store).
func infoServer(t *testing.T, build *BuildInfo) *bundle {
	t.Helper()
	store, err := sqlite.Open(context.Background(), t.TempDir(), sqlite.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	srv := httptest.NewServer(NewHandler(coordinator.NewService(store, nil), Options{Logger: slog.New(slog.DiscardHandler), Build: build}))
	t.Cleanup(srv.Close)
	client, err := coordinatorclient.NewClientWithResponses(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{url: srv.URL, client: client, store: store}
}

// TestInfo: GET /v1/info answers the build it was given, exactly the fields of
// openapi.yaml's Info, with the schema version read on each request; HEAD answers alike
// without the body, and a query parameter is refused as on every operation.
func TestInfo(t *testing.T) {
	t.Parallel()
	var schema atomic.Uint64
	schema.Store(3)
	b := infoServer(t, &BuildInfo{
		Version: "v1.2.3", GoVersion: "go1.26.8", Store: InfoStorePostgres, SchemaExpected: 3,
		SchemaVersion: func(context.Context) uint { return uint(schema.Load()) },
	})
	var info Info
	b.call(t, "GET", "/v1/info", "", "").ok(t, http.StatusOK, &info)
	want := Info{Version: "v1.2.3", GoVersion: "go1.26.8", Store: InfoStorePostgres, SchemaVersion: 3, SchemaExpected: 3}
	if info != want {
		t.Errorf("GET /v1/info = %+v, want %+v", info, want)
	}

	// Another coordinator migrated the database further: this one says so.
	schema.Store(4)
	resp, err := b.client.GetInfoWithResponse(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if resp.JSON200 == nil || resp.JSON200.SchemaVersion != 4 || resp.JSON200.SchemaExpected != 3 {
		t.Errorf("through the client, after a migration elsewhere: %d %s, want schema_version 4, schema_expected 3", resp.StatusCode(), resp.Body)
	}

	get := b.call(t, "GET", "/v1/info", "", "")
	head := b.call(t, "HEAD", "/v1/info", "", "")
	if head.status != http.StatusOK || len(head.body) != 0 || head.header.Get("Content-Length") != get.header.Get("Content-Length") {
		t.Errorf("HEAD /v1/info: %d, %d body bytes, Content-Length %q; GET: %d, Content-Length %q",
			head.status, len(head.body), head.header.Get("Content-Length"), get.status, get.header.Get("Content-Length"))
	}
	b.call(t, "GET", "/v1/info?verbose=1", "", "").problem(t, http.StatusBadRequest, "invalid_request")
	a := b.call(t, "POST", "/v1/info", "", "")
	a.problem(t, http.StatusMethodNotAllowed, "method_not_allowed")
	if got := a.header.Values("Allow"); len(got) != 2 || got[0] != "GET" || got[1] != "HEAD" {
		t.Errorf("POST /v1/info: Allow %q, want GET, HEAD", got)
	}
}

// TestInfoStaticSchema: without a SchemaVersion function the schema is the one expected;
// without a build at all, the operation answers 404 as an older server does.
func TestInfoStaticSchema(t *testing.T) {
	t.Parallel()
	var info Info
	b := infoServer(t, &BuildInfo{Version: "devel", GoVersion: "go1.26.8", Store: InfoStoreEmbedded, SchemaExpected: 1})
	b.call(t, "GET", "/v1/info", "", "").ok(t, http.StatusOK, &info)
	if info.Store != InfoStoreEmbedded || info.SchemaVersion != 1 || info.SchemaExpected != 1 || info.Version != "devel" {
		t.Errorf("GET /v1/info = %+v", info)
	}
	infoServer(t, nil).call(t, "GET", "/v1/info", "", "").problem(t, http.StatusNotFound, "not_found")
}
