package api

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
)

// tableLookup looks path up in t as front does, and returns the handler with the route
// context and request it filled in.
func tableLookup(t *routeTable, method, target string) (http.Handler, *chi.Context, *http.Request) {
	rctx := chi.NewRouteContext()
	r := httptest.NewRequest(method, target, nil)
	return t.lookup(rctx, r), rctx, r
}

// TestRouteTableFindsWhatChiFinds: for every route and method of the API, a path made
// from its pattern is found by the route table with the pattern and the parameters (in
// order, and each by its name) that chi's own lookup gives it.
func TestRouteTableFindsWhatChiFinds(t *testing.T) {
	mux := newRouter(stubServer{}, Options{AllowedHosts: testHosts}, &problemWriter{logger: slog.New(slog.DiscardHandler)})
	var table routeTable
	table.load(mux.Routes())
	checked := 0
	for _, route := range mux.Routes() {
		segments, params, ok := patternSegments(route.Pattern)
		if !ok {
			t.Fatalf("pattern %s is not made of plain segments: the table leaves it to chi", route.Pattern)
		}
		values := map[string]string{}
		path := ""
		p := 0
		for _, s := range segments {
			if s == "" {
				v := fmt.Sprintf("v-%d.%s", p, params[p])
				values[params[p]] = v
				s = v
				p++
			}
			path += "/" + s
		}
		for method := range route.Handlers {
			chiCtx := chi.NewRouteContext()
			if !mux.Match(chiCtx, method, path) {
				t.Fatalf("chi does not match %s %s", method, path)
			}
			h, rctx, r := tableLookup(&table, method, path)
			if h == nil {
				t.Fatalf("%s %s: not found in the table", method, path)
			}
			if h != route.Handlers[method] {
				t.Errorf("%s %s: the table's handler is not chi's", method, path)
			}
			if got, want := rctx.RoutePattern(), chiCtx.RoutePattern(); got != want || r.Pattern != want {
				t.Errorf("%s %s: pattern %q (request %q), chi %q", method, path, got, r.Pattern, want)
			}
			if !slices.Equal(rctx.URLParams.Keys, chiCtx.URLParams.Keys) || !slices.Equal(rctx.URLParams.Values, chiCtx.URLParams.Values) {
				t.Errorf("%s %s: parameters %v=%v, chi %v=%v", method, path,
					rctx.URLParams.Keys, rctx.URLParams.Values, chiCtx.URLParams.Keys, chiCtx.URLParams.Values)
			}
			for name, v := range values {
				if got := rctx.URLParam(name); got != v {
					t.Errorf("%s %s: parameter %s = %q, want %q", method, path, name, got, v)
				}
			}
			if rctx.RouteMethod != method {
				t.Errorf("%s %s: route method %q", method, path, rctx.RouteMethod)
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("only %d routes and methods checked", checked)
	}
}

// TestRouteTableLeavesToChiWhatItCannotTell: paths with an empty, escaped or extra
// segment, unknown paths, methods a route has no handler for, and paths two routes match
// (chi prefers the static one) are not found in the table, so that chi routes them.
func TestRouteTableLeavesToChiWhatItCannotTell(t *testing.T) {
	mux := newRouter(stubServer{}, Options{AllowedHosts: testHosts}, &problemWriter{logger: slog.New(slog.DiscardHandler)})
	var table routeTable
	table.load(mux.Routes())
	for _, c := range []struct{ method, target string }{
		{http.MethodPut, "/v1/jobs//checkpoints/1/votes/a"},
		{http.MethodPut, "/v1/jobs/j/checkpoints/1/votes/a/"},
		{http.MethodPut, "/v1/jobs/j/checkpoints/1/votes/a%2Fb"},
		{http.MethodPut, "/v1/jobs/j/checkpoints/1/votes"},
		{http.MethodPut, "/v1/jobs/j/checkpoints/1/vote/a"},
		{http.MethodPatch, "/v1/jobs/j/checkpoints/1/votes/a"},
		{http.MethodGet, "/v1/nothing"},
		{http.MethodGet, "/"},
	} {
		if h, _, _ := tableLookup(&table, c.method, c.target); h != nil {
			t.Errorf("%s %s found in the table", c.method, c.target)
		}
	}
	if h, _, _ := tableLookup(&table, http.MethodPut, "/v1/jobs/j/checkpoints/1/votes/a"); h == nil {
		t.Fatal("a vote's path is not found in the table")
	}

	// Two routes that match one path: chi's preference decides.
	other := chi.NewRouter()
	byParam := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	other.Get("/a/{x}", byParam)
	other.Get("/a/b", func(http.ResponseWriter, *http.Request) {})
	var two routeTable
	two.load(other.Routes())
	if h, _, _ := tableLookup(&two, http.MethodGet, "/a/b"); h != nil {
		t.Error("/a/b, matched by /a/{x} and /a/b, found in the table")
	}
	h, rctx, _ := tableLookup(&two, http.MethodGet, "/a/c")
	if h == nil || strings.Join(rctx.URLParams.Values, ",") != "c" {
		t.Errorf("/a/c: handler %v, parameters %v", h != nil, rctx.URLParams.Values)
	}

	// A route that is not plain segments leaves every path to chi, which prefers a
	// regular expression to a parameter.
	mixed := chi.NewRouter()
	mixed.Get("/a/{x:[0-9]+}", func(http.ResponseWriter, *http.Request) {})
	mixed.Get("/a/{y}", func(http.ResponseWriter, *http.Request) {})
	var withRegexp routeTable
	withRegexp.load(mixed.Routes())
	for _, target := range []string{"/a/12", "/a/b"} {
		if h, _, _ := tableLookup(&withRegexp, http.MethodGet, target); h != nil {
			t.Errorf("%s found in a table of routes one of which is a regular expression", target)
		}
	}

	// Patterns that are not plain segments.
	for _, p := range []string{"/", "/a/*", "/a/{x:[0-9]+}", "/a/{x}.json", "/a//b", "a/b"} {
		if _, _, ok := patternSegments(p); ok {
			t.Errorf("pattern %s taken as plain segments", p)
		}
	}
}
