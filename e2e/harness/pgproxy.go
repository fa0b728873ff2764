package harness

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// cutAnswerTimeout bounds how long a cut connection waits for the server's answer to the
// COMMIT it will not pass on: long enough for any commit, short enough that a server that
// never answers does not hang the test.
const cutAnswerTimeout = 10 * time.Second

// PGProxy is a TCP proxy on 127.0.0.1 between the coordinator and a PostgreSQL cluster.
// It passes every connection through unchanged (the pool's, the LISTEN connection,
// migrations, cancel requests) and reads the client's side of the PostgreSQL protocol as
// it goes, so that it can be armed to lose the answer to one COMMIT: see ArmCommitLoss.
//
// Its methods are safe to call from several goroutines. t.Cleanup closes it and every
// connection it relays.
type PGProxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu       sync.Mutex
	armed    *commitLoss // nil: nothing to cut
	cuts     []CommitCut // every cut so far, oldest first
	conns    map[*proxyConn]struct{}
	accepted int
	closed   bool
	wg       sync.WaitGroup
}

// CommitCut is one COMMIT whose answer the proxy did not pass on.
type CommitCut struct {
	// Statements is the SQL the cut transaction executed, in order, each at most 160
	// bytes, the COMMIT last.
	Statements []string
	// Matches is how many of them matched the armed pattern.
	Matches int
	// ServerAnswered is true if the server had answered the COMMIT (its ReadyForQuery
	// came) before the proxy closed both sides; false if it closed after cutAnswerTimeout.
	ServerAnswered bool
	// At is when the proxy closed the connection.
	At time.Time
}

type commitLoss struct {
	stmt *regexp.Regexp
	min  int
}

// StartPGProxy listens on 127.0.0.1:0 and relays every connection to target (host:port,
// e.g. fmt.Sprintf("127.0.0.1:%d", cluster.Port())).
func StartPGProxy(t testing.TB, target string) *PGProxy {
	t.Helper()
	skipShort(t, "relays connections to a PostgreSQL cluster")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("harness: proxy: %v", err)
	}
	p := &PGProxy{t: t, ln: ln, target: target, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's address, 127.0.0.1:<port>.
func (p *PGProxy) Addr() string { return p.ln.Addr().String() }

// URL is dbURL (a postgres:// URL) with its host and port replaced by the proxy's.
func (p *PGProxy) URL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		p.t.Fatalf("harness: proxy: %q is not a URL: %v", dbURL, err)
	}
	u.Host = p.Addr()
	return u.String()
}

// ArmCommitLoss makes the proxy lose the answer to the next COMMIT, on whatever
// connection, of a transaction that executed at least min statements (min < 1 counts as
// 1) whose SQL matches stmt. The proxy passes that COMMIT, and everything the client
// sent with it, on to the server, waits until the server has answered it (its
// ReadyForQuery), and then closes both sides without passing the answer on: the client
// sees its connection break after COMMIT was sent, not knowing whether it committed. It
// fires once; arming again replaces what was armed and not fired.
//
// A statement executes when the client binds it (extended protocol: the SQL is that of
// the Parse that prepared it, by name) or sends it as a simple query; preparing alone
// does not count. A transaction is what a connection executed since its last COMMIT or
// ROLLBACK.
func (p *PGProxy) ArmCommitLoss(stmt *regexp.Regexp, min int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = &commitLoss{stmt: stmt, min: max(min, 1)}
}

// Disarm cancels what is armed and has not fired; it reports whether it was still armed.
func (p *PGProxy) Disarm() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.armed != nil
	p.armed = nil
	return was
}

// Cuts returns every cut so far, oldest first.
func (p *PGProxy) Cuts() []CommitCut {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]CommitCut(nil), p.cuts...)
}

// Connections returns how many connections the proxy accepted so far, and how many of
// them are still open.
func (p *PGProxy) Connections() (accepted, open int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted, len(p.conns)
}

// fire is called by a connection at the execution of a COMMIT that ends stmts: if armed
// and stmts match, it disarms the proxy and returns how many matched.
func (p *PGProxy) fire(stmts []string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.armed == nil {
		return 0, false
	}
	n := 0
	for _, s := range stmts {
		if p.armed.stmt.MatchString(s) {
			n++
		}
	}
	if n < p.armed.min {
		return 0, false
	}
	p.armed = nil
	return n, true
}

func (p *PGProxy) recordCut(c CommitCut) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts = append(p.cuts, c)
}

func (p *PGProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = client.Close()
			continue
		}
		c := &proxyConn{p: p, client: client, server: server, stmts: map[string]string{}}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.closeBoth()
			return
		}
		p.accepted++
		p.conns[c] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go c.clientToServer()
		go c.serverToClient()
	}
}

func (p *PGProxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range conns {
		c.closeBoth()
	}
	p.wg.Wait()
}

// proxyConn is one relayed connection. The client's bytes are parsed (message framing,
// Parse, Bind, Query, Sync) by clientToServer, the server's (framing, ReadyForQuery) by
// serverToClient; both forward the bytes unchanged unless the connection is being cut.
type proxyConn struct {
	p              *PGProxy
	client, server net.Conn
	closeOnce      sync.Once

	// Client side, touched only by clientToServer.
	cbuf     []byte
	started  bool              // the startup message has been read: typed messages follow
	opaque   bool              // TLS, or a cancel request: nothing more is parsed
	stmts    map[string]string // prepared statement name -> SQL ("" the unnamed one)
	tx       []string          // SQL executed since the last COMMIT or ROLLBACK
	syncSent int64             // messages each answered by one ReadyForQuery

	// Server side, touched only by serverToClient.
	sbuf    []byte
	zSeen   int64
	sOpaque bool

	mu        sync.Mutex
	rawExpect int // single unframed bytes the server will send (answers to SSLRequest)
	cutting   bool
	cutTarget int64 // the ReadyForQuery count that answers the cut COMMIT
	cut       CommitCut
}

func (c *proxyConn) closeBoth() {
	c.closeOnce.Do(func() {
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

func (c *proxyConn) done() {
	c.closeBoth()
	c.p.mu.Lock()
	delete(c.p.conns, c)
	c.p.mu.Unlock()
	c.p.wg.Done()
}

func (c *proxyConn) clientToServer() {
	defer c.done()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			data := buf[:n]
			if !c.opaque {
				c.scanClient(data)
			}
			if _, werr := c.server.Write(data); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (c *proxyConn) serverToClient() {
	defer c.done()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			data := buf[:n]
			c.mu.Lock()
			cutting := c.cutting
			c.mu.Unlock()
			if !c.sOpaque {
				c.scanServer(data)
			}
			if cutting {
				c.mu.Lock()
				answered := c.zSeen >= c.cutTarget
				c.mu.Unlock()
				if answered {
					c.finishCut(true)
					return
				}
				continue // the client gets nothing more
			}
			if _, werr := c.client.Write(data); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Startup-phase request codes (the protocol version field of an untyped message).
const (
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
	cancelRequestCode = 80877102
)

// scanClient parses the client's messages in data (with what an earlier read left
// incomplete) and, at a COMMIT the armed pattern asks to cut, starts the cut: before data
// is written to the server, so that no answer to it can be passed on.
func (c *proxyConn) scanClient(data []byte) {
	c.cbuf = append(c.cbuf, data...)
	for !c.opaque {
		if !c.started {
			if len(c.cbuf) < 8 {
				return
			}
			n := int(binary.BigEndian.Uint32(c.cbuf))
			if n < 8 || n > 1<<20 {
				c.opaque = true
				return
			}
			if len(c.cbuf) < n {
				return
			}
			switch code := binary.BigEndian.Uint32(c.cbuf[4:]); code {
			case sslRequestCode, gssEncRequestCode:
				// The server answers with one byte; after 'S' or 'G' the rest is
				// encrypted, which the tests do not use (sslmode=disable).
				c.mu.Lock()
				c.rawExpect++
				c.mu.Unlock()
			case cancelRequestCode:
				c.opaque = true
			default:
				c.started = true
				c.syncSent++ // the server's first ReadyForQuery ends the start-up
			}
			c.cbuf = c.cbuf[n:]
			continue
		}
		if len(c.cbuf) < 5 {
			return
		}
		typ := c.cbuf[0]
		n := int(binary.BigEndian.Uint32(c.cbuf[1:]))
		if n < 4 {
			c.opaque = true
			return
		}
		if len(c.cbuf) < 1+n {
			return
		}
		body := c.cbuf[5 : 1+n]
		c.message(typ, body)
		c.cbuf = c.cbuf[1+n:]
	}
	if len(c.cbuf) == 0 {
		c.cbuf = nil // let a large message's buffer go
	}
}

// message handles one client message.
func (c *proxyConn) message(typ byte, body []byte) {
	switch typ {
	case 'P': // Parse: name, query, parameter types
		name, rest := cstring(body)
		query, _ := cstring(rest)
		c.stmts[name] = query
	case 'C': // Close: 'S' statement or 'P' portal, name
		if len(body) > 0 && body[0] == 'S' {
			name, _ := cstring(body[1:])
			delete(c.stmts, name)
		}
	case 'B': // Bind: portal, statement, ...
		_, rest := cstring(body)
		name, _ := cstring(rest)
		c.execute(c.stmts[name], false)
	case 'Q': // simple query
		query, _ := cstring(body)
		c.syncSent++
		c.execute(query, true)
	case 'S': // Sync
		c.syncSent++
	}
}

var (
	commitSQL   = regexp.MustCompile(`(?is)^\s*(COMMIT|END)\s*(TRANSACTION|WORK)?\s*;?\s*$|;\s*(COMMIT|END)\s*;?\s*$`)
	beginSQL    = regexp.MustCompile(`(?is)^\s*(BEGIN|START\s+TRANSACTION)\b`)
	rollbackSQL = regexp.MustCompile(`(?is)^\s*(ROLLBACK|ABORT)\s*(TRANSACTION|WORK)?\s*;?\s*$`)
)

// execute notes that the client executes query, as a simple query or a bound statement;
// at a COMMIT it ends the transaction, and cuts the connection if the proxy is armed for it.
func (c *proxyConn) execute(query string, simple bool) {
	switch {
	case beginSQL.MatchString(query):
		c.tx = append(c.tx[:0], query)
	case len(c.tx) < 4096:
		c.tx = append(c.tx, query)
	}
	if rollbackSQL.MatchString(query) {
		c.tx = c.tx[:0]
		return
	}
	if commitSQL.MatchString(query) {
		stmts := c.tx
		c.tx = nil
		matches, ok := c.p.fire(stmts)
		if !ok {
			return
		}
		cut := CommitCut{Matches: matches}
		for _, s := range stmts {
			s = strings.Join(strings.Fields(s), " ")
			if len(s) > 160 {
				s = s[:157] + "..."
			}
			cut.Statements = append(cut.Statements, s)
		}
		c.mu.Lock()
		c.cutting = true
		// The ReadyForQuery that answers the COMMIT: the server sends one per Sync, per
		// simple query and after the start-up, in order. A simple query counted itself
		// already; a bound COMMIT is answered at the next Sync.
		c.cutTarget = c.syncSent
		if !simple {
			c.cutTarget++
		}
		c.cut = cut
		c.mu.Unlock()
		time.AfterFunc(cutAnswerTimeout, func() { c.finishCut(false) })
	}
}

// finishCut closes both sides of a connection being cut, once, and records the cut.
func (c *proxyConn) finishCut(answered bool) {
	c.mu.Lock()
	if !c.cutting || c.cut.At != (time.Time{}) {
		c.mu.Unlock()
		return
	}
	c.cut.ServerAnswered = answered
	c.cut.At = time.Now()
	cut := c.cut
	c.mu.Unlock()
	c.p.recordCut(cut) // before the client can see its connection break
	c.closeBoth()
}

// scanServer counts the server's ReadyForQuery messages in data.
func (c *proxyConn) scanServer(data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.rawExpect > 0 && len(data) > 0 {
		if data[0] != 'N' {
			c.sOpaque = true // TLS or GSS from here: not parsed
			return
		}
		c.rawExpect--
		data = data[1:]
	}
	c.sbuf = append(c.sbuf, data...)
	for len(c.sbuf) >= 5 {
		n := int(binary.BigEndian.Uint32(c.sbuf[1:]))
		if n < 4 {
			c.sOpaque = true
			return
		}
		if len(c.sbuf) < 1+n {
			return
		}
		if c.sbuf[0] == 'Z' {
			c.zSeen++
		}
		c.sbuf = c.sbuf[1+n:]
	}
	if len(c.sbuf) == 0 {
		c.sbuf = nil
	}
}

// cstring splits b at its first NUL: the string before it and the rest after it.
func cstring(b []byte) (string, []byte) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return string(b), nil
	}
	return string(b[:i]), b[i+1:]
}
