package api

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
)

// routeTable finds the route of a request without chi's route lookup, from chi's own
// table of the routes registered, and hands everything it cannot tell for certain to
// chi. The reason is the stack: chi's lookup recurses once per node of its tree (432
// bytes a level, 12 levels for a vote), which takes the goroutine of every HTTP/1.1
// connection from 8 to 16 KiB of stack, and the garbage collector keeps and scans
// those stacks while the requests wait for their commit. This lookup walks the path's
// segments in a loop. It takes a route only when the path has no empty or escaped
// segment and exactly one route of the table matches it segment by segment (a static
// segment by its text, a {name} by any text), so that chi, which prefers a static
// segment to a parameter, could not have chosen another; and only for a method the route
// has a handler for; and only when every route is made of plain segments (load).
// Everything else, unknown paths and methods included, chi routes as before, answering
// 404 and 405 itself.
type routeTable struct {
	bySegments map[int][]*tableRoute // by the number of the pattern's segments; nil: chi routes all
}

// tableRoute is one route of the table: its pattern's segments ("" for a parameter),
// the names of its parameters in order, and its handler for each method.
type tableRoute struct {
	pattern  string
	segments []string
	params   []string
	handlers map[string]http.Handler
}

// load fills the table with routes, called once, before the first request. If any
// pattern is not made of plain segments (a regular expression, a wildcard, a router
// mounted, a parameter within a segment), the table stays empty and chi routes every
// request: chi may prefer such a route to one of plain segments (a regular expression
// to a parameter), which the table could not tell.
func (t *routeTable) load(routes []chi.Route) {
	t.bySegments = map[int][]*tableRoute{}
	for _, rt := range routes {
		segments, params, ok := patternSegments(rt.Pattern)
		if !ok {
			t.bySegments = nil
			return
		}
		t.bySegments[len(segments)] = append(t.bySegments[len(segments)],
			&tableRoute{pattern: rt.Pattern, segments: segments, params: params, handlers: rt.Handlers})
	}
}

// patternSegments splits a pattern such as /v1/jobs/{job} into its segments, "" for each
// parameter, and the parameters' names; ok is false for any other kind of pattern.
func patternSegments(pattern string) (segments, params []string, ok bool) {
	if !strings.HasPrefix(pattern, "/") || pattern == "/" {
		return nil, nil, false
	}
	for _, s := range strings.Split(pattern[1:], "/") {
		switch {
		case s == "" || strings.ContainsAny(s, "*:"):
			return nil, nil, false
		case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}"):
			name := s[1 : len(s)-1]
			if name == "" || strings.ContainsAny(name, "{}") {
				return nil, nil, false
			}
			segments, params = append(segments, ""), append(params, name)
		case strings.ContainsAny(s, "{}"):
			return nil, nil, false
		default:
			segments = append(segments, s)
		}
	}
	return segments, params, true
}

// lookup returns the handler of r's route, with rctx filled in as chi's lookup fills it
// (parameters, pattern, method) and r's pattern set as chi sets it, or nil when chi is to
// route r. rctx is the route context of the router the table was made from, and the
// request is at its top (no router mounted this one). Unlike chi, it does not set r's path
// values (Request.PathValue): nothing here reads them (the generated wrappers read chi's
// parameters), and each would cost the request a map of its own.
func (t *routeTable) lookup(rctx *chi.Context, r *http.Request) http.Handler {
	if t == nil || t.bySegments == nil || rctx == nil || rctx.RoutePath != "" || r.URL.RawPath != "" {
		return nil
	}
	path := r.URL.Path
	if len(path) < 2 || path[0] != '/' {
		return nil
	}
	path = path[1:]
	n := strings.Count(path, "/") + 1
	method := rctx.RouteMethod
	if method == "" {
		method = r.Method
	}
	var found *tableRoute
	for _, rt := range t.bySegments[n] {
		if rt.matches(path) {
			if found != nil {
				return nil // chi's preference decides
			}
			found = rt
		}
	}
	if found == nil {
		return nil
	}
	h := found.handlers[method]
	if h == nil {
		return nil
	}
	rctx.RouteMethod = method
	p := 0
	for i, rest := 0, path; i < len(found.segments); i++ {
		seg, next, _ := strings.Cut(rest, "/")
		rest = next
		if found.segments[i] == "" {
			rctx.URLParams.Add(found.params[p], seg)
			p++
		}
	}
	rctx.RoutePatterns = append(rctx.RoutePatterns, found.pattern)
	r.Pattern = rctx.RoutePattern()
	return h
}

// matches reports whether path (without its leading slash, with as many segments as the
// route) has the route's static segments where the route has them, and no empty segment.
func (rt *tableRoute) matches(path string) bool {
	for _, want := range rt.segments {
		seg, rest, _ := strings.Cut(path, "/")
		if seg == "" || want != "" && seg != want {
			return false
		}
		path = rest
	}
	return true
}
