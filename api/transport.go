package api

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/twophase/coordinator/coordinator"
)

// The transport's guards: which Host a request may name, which web pages may send it,
// and how many requests may wait on purpose at once. The limits of the connection itself
// (how long the headers may take to arrive, how large they may be) are http.Server's.

// codeMisdirectedRequest answers a request whose Host names no host the coordinator
// serves (RFC 9110 15.5.20).
const codeMisdirectedRequest = "misdirected_request"

// AnyHost, as an entry of Options.AllowedHosts, allows every Host: for a coordinator
// behind a proxy that checks it.
const AnyHost = "*"

// guards returns the check that refuses, before anything else looks at a request (after
// its request id and its access log line): a request from a web page of an origin that is
// not allowed (403 forbidden), and a request whose Host is not allowed (421
// misdirected_request). A browser cannot be made to send either for a page of another
// site, nor can a page of another site read the coordinator through a name of its own that
// resolves to the coordinator's address (DNS rebinding). Clients that are not browsers send
// no Origin nor Sec-Fetch-Site and are not affected. Neither refusal changes anything.
func guards(opts Options) func(r *http.Request) error {
	hosts := map[string]bool{}
	anyHost := false
	for _, h := range opts.AllowedHosts {
		if h == AnyHost {
			anyHost = true
			continue
		}
		hosts[hostName(h)] = true
	}
	origins := map[string]bool{}
	for _, o := range opts.AllowedOrigins {
		if o := normalizeOrigin(o); o != "null" {
			origins[o] = true
		}
	}
	return func(r *http.Request) error {
		if err := checkBrowser(r, origins); err != nil {
			return err
		}
		if !anyHost && !probe(r) {
			if host := hostName(r.Host); !hosts[host] && !loopbackName(host) {
				return &requestError{code: codeMisdirectedRequest, detail: fmt.Sprintf(
					"this coordinator does not serve the host %s: it serves its loopback names and "+
						"the hosts it is configured with (--allowed-hosts)", quoteClipped(r.Host))}
			}
		}
		return nil
	}
}

// CORS for the pages of --allowed-origins: what a browser needs to let such a page call
// the API with a bearer token and read the answers.
const (
	corsMethods = "GET, HEAD, PUT, POST, DELETE"
	corsHeaders = "Authorization, Content-Type, Idempotency-Key, Prefer, Last-Event-ID, X-Request-Id"
	corsExpose  = "X-Request-Id, Retry-After, Preference-Applied, Location, WWW-Authenticate"
	corsMaxAge  = "600"
)

// corsFor returns what answers the CORS of a request whose Origin is one of allowed (the
// guards refused the others): it adds the headers that let the page read the answer, and
// answers a preflight (OPTIONS with Access-Control-Request-Method) itself, with 204,
// reporting true. Requests without an Origin (every client but a browser) are left as
// they are. No cookie is ever involved: a page sends its token in Authorization.
func corsFor(allowed []string) func(w http.ResponseWriter, r *http.Request) bool {
	origins := map[string]bool{}
	for _, o := range allowed {
		if o := normalizeOrigin(o); o != "null" {
			origins[o] = true
		}
	}
	return func(w http.ResponseWriter, r *http.Request) bool {
		origin := r.Header.Get("Origin")
		if origin == "" || len(origins) == 0 || !origins[normalizeOrigin(origin)] {
			return false
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", corsMethods)
			h.Set("Access-Control-Allow-Headers", corsHeaders)
			h.Set("Access-Control-Max-Age", corsMaxAge)
			w.WriteHeader(http.StatusNoContent)
			return true
		}
		h.Set("Access-Control-Expose-Headers", corsExpose)
		return false
	}
}

// probe reports whether r is a health probe, which the Host check lets through:
// Kubernetes' probes name the pod's IP address as Host.
func probe(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		(r.URL.Path == "/healthz" || r.URL.Path == "/readyz")
}

// checkBrowser refuses a request that a web browser sends on behalf of a page the
// coordinator does not trust: one with an Origin that is neither in origins ("null", the
// origin of sandboxed pages and local files, never is) nor the coordinator's own origin,
// and one with Sec-Fetch-Site: cross-site without an allowed Origin.
func checkBrowser(r *http.Request, origins map[string]bool) error {
	values := r.Header.Values("Origin")
	for _, origin := range values {
		if o := normalizeOrigin(origin); !origins[o] && o != ownOrigin(r) {
			return &requestError{code: string(coordinator.CodeForbidden), detail: fmt.Sprintf(
				"requests from web pages are refused unless their origin is allowed (--allowed-origins), "+
					"and the Origin %s is not; the request changed nothing", quoteClipped(origin))}
		}
	}
	if len(values) == 0 && strings.EqualFold(strings.TrimSpace(r.Header.Get("Sec-Fetch-Site")), "cross-site") {
		return &requestError{code: string(coordinator.CodeForbidden), detail: "requests from web pages of " +
			"other sites are refused (Sec-Fetch-Site: cross-site, and no allowed Origin); the request changed nothing"}
	}
	return nil
}

// ownOrigin is the origin of the pages the coordinator serves itself (the console), as a
// browser names it in the requests they send: the scheme the request came over, and its
// Host. A page of another host that the attacker's name resolves to the coordinator's
// address (DNS rebinding) has an Origin of that name, which is its own Host too: the Host
// check refuses it (421), unless --allowed-hosts is * and a proxy checks the Host instead.
// Behind a proxy that terminates TLS the scheme differs (the page is https, the request
// plain http): such a deployment lists its https origin in --allowed-origins.
func ownOrigin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return normalizeOrigin(scheme + "://" + r.Host)
}

// hostName is the host of a Host header or of an entry of Options.AllowedHosts, as they
// are compared: without the port or the brackets of an IPv6 address, in lower case,
// without a trailing dot.
func hostName(hostport string) string {
	host := strings.TrimSpace(hostport)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// loopbackName reports whether host (a hostName) names the loopback interface:
// localhost, 127.0.0.0/8 or ::1. A page of another site cannot have a browser send them.
func loopbackName(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// normalizeOrigin is an origin as browsers send it (RFC 6454 6.1): the scheme and host in
// lower case, without the default port of the scheme. Anything else is kept as it is, to
// match nothing that is not written the same.
func normalizeOrigin(origin string) string {
	origin = strings.TrimSpace(origin)
	u, err := url.Parse(origin)
	if err != nil || u.Scheme == "" || u.Host == "" || u.Opaque != "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return origin
	}
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	if (scheme == "http" && u.Port() == "80") || (scheme == "https" && u.Port() == "443") {
		host = strings.TrimSuffix(host, ":"+u.Port())
	}
	return scheme + "://" + host
}

// CheckOrigin says what is wrong with origin as an entry of Options.AllowedOrigins, nil
// if nothing: it must be an origin as browsers send it, scheme://host[:port] with the
// scheme http or https, and no path. "null" and "*" are refused: any page can send
// the first, and the second would let every page in.
func CheckOrigin(origin string) error {
	switch origin {
	case "null":
		return fmt.Errorf("null is never allowed: it is the Origin of sandboxed pages and local files, which any page can make")
	case "*":
		return fmt.Errorf("* is not allowed: list the origins of the pages that may call the coordinator")
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Opaque != "" ||
		u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return fmt.Errorf("%q is not an origin: want scheme://host[:port], like https://dashboard.example.com", origin)
	}
	return nil
}

// CheckHost says what is wrong with host as an entry of Options.AllowedHosts, nil if
// nothing: a host name or an IP address, without port, or AnyHost.
func CheckHost(host string) error {
	if host == AnyHost {
		return nil
	}
	bad := func(why string) error {
		return fmt.Errorf("%q is not a host name: %s (like coordinator.example.com, 10.0.0.7 or ::1; * allows every host)", host, why)
	}
	if strings.Contains(host, "://") || strings.Contains(host, "/") {
		return bad("give the name alone, without scheme or path")
	}
	if _, port, err := net.SplitHostPort(host); err == nil && port != "" {
		return bad("give it without the port, which is not compared")
	}
	name := hostName(host)
	if net.ParseIP(name) != nil {
		return nil
	}
	if name == "" || len(name) > 253 {
		return bad("it is empty or too long")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return bad("it has an empty or too long label")
		}
		for _, c := range label {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return bad(fmt.Sprintf("it has %q, and wildcards other than a lone * are not supported", c))
			}
		}
	}
	return nil
}

// quoteClipped quotes a value the client sent, clipped, for a problem's detail.
func quoteClipped(s string) string {
	const max = 100
	if len(s) > max {
		return fmt.Sprintf("%q...", s[:max])
	}
	return fmt.Sprintf("%q", s)
}

// mayWait reports whether r is a request that may be held open on purpose, waiting for
// something to happen: a long-poll (wait_ms), and in time an event stream. Those held at
// once are bounded by Options.MaxWaiters.
func mayWait(r *http.Request) bool {
	return longPoll(r) > 0
}
