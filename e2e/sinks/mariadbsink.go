package sinks

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
)

// MariaDBCommittable names an XA transaction of a MariaDBSink.
type MariaDBCommittable struct {
	// XID is the transaction's gtrid, as XA RECOVER lists it.
	XID string `json:"xid"`
	// Rows is how many events it holds (for humans reading the coordinator).
	Rows int `json:"rows"`
}

// MariaDBSink writes each checkpoint's events to a MariaDB (or MySQL) table in one XA
// transaction: XA START, the rows, XA END and XA PREPARE in phase one, XA COMMIT or XA
// ROLLBACK in phase two. A prepared XA transaction survives the end of the session that
// prepared it and a restart of the server (MariaDB 10.5 and later, MySQL 5.7.7 and
// later), so the sink closes that session once prepared and any session may finish it.
//
// Each XA transaction also inserts its XID into twophase_sink_commits, so that a replayed
// XA COMMIT can tell "already committed" (the row is there) from "lost" (it is not).
//
// On start (Recover) it reconciles XA RECOVER with the coordinator, as PGSink does with
// pg_prepared_xacts: a prepared transaction of this sink that no pending item names
// belongs to a process that died between XA PREPARE and its vote, or whose decision it
// never applied.
type MariaDBSink struct {
	// DB is the database that receives the events (with the mysql driver). Required.
	DB *sql.DB
	// Coordinator is used by Recover to look checkpoints up. Required.
	Coordinator *cc.Coordinator
	// Job and Name are the job and this participant's name in it. Required.
	Job, Name string
	// Table receives the events (seq, payload, checkpoint). Required; created by Setup.
	Table string
	// Input hands out each checkpoint's events. Required.
	Input Input
	// XIDPrefix starts each XA transaction's gtrid, followed by the checkpoint id. XIDs are
	// global to the server, so the prefix must be unique to this sink there. Empty means
	// "<database>.<job>.<participant>.", set by Setup (hashed past 40 bytes: a gtrid has
	// at most 64).
	XIDPrefix string
	// Logger; nil means no logging.
	Logger *slog.Logger

	// uncertain holds the XIDs of failed Prepare calls that sent XA PREPARE: the server
	// may have prepared them. The next Prepare rolls them back.
	uncertain map[string]bool
	// afterPrepare, when set (by tests), runs after XA PREPARE succeeded, while the
	// preparing session is still open; its error fails Prepare as a lost answer would.
	afterPrepare func(xid string) error
}

var (
	_ cc.Participant[MariaDBCommittable] = (*MariaDBSink)(nil)
	_ cc.Recoverer[MariaDBCommittable]   = (*MariaDBSink)(nil)
)

func (s *MariaDBSink) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// Setup creates the sink's table and the commit markers' table (InnoDB: XA needs a
// transactional engine) if they do not exist, and sets XIDPrefix if it is empty.
func (s *MariaDBSink) Setup(ctx context.Context) error {
	for _, stmt := range []string{
		"CREATE TABLE IF NOT EXISTS " + ident(s.Table) + " (seq BIGINT NOT NULL, payload TEXT NOT NULL, checkpoint BIGINT NOT NULL) ENGINE=InnoDB",
		"CREATE TABLE IF NOT EXISTS twophase_sink_commits (xid VARCHAR(64) PRIMARY KEY, `rows` INT NOT NULL) ENGINE=InnoDB",
	} {
		if _, err := s.DB.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	if s.XIDPrefix != "" {
		return nil
	}
	var db string
	if err := s.DB.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&db); err != nil {
		return err
	}
	s.XIDPrefix = db + "." + s.Job + "." + s.Name + "."
	if len(s.XIDPrefix) > 40 {
		sum := sha256.Sum256([]byte(db + "\x00" + s.Job + "\x00" + s.Name))
		s.XIDPrefix = "tp-" + hex.EncodeToString(sum[:12]) + "."
	}
	return nil
}

// XID is the gtrid of checkpoint's XA transaction for this sink.
func (s *MariaDBSink) XID(checkpoint int64) string {
	if s.XIDPrefix == "" {
		panic("sinks: MariaDBSink used before Setup (XIDPrefix is empty)")
	}
	return s.XIDPrefix + strconv.FormatInt(checkpoint, 10)
}

// Prepare writes the checkpoint's events in an XA transaction and prepares it. A
// checkpoint without events prepares nothing. It first rolls back what earlier failed
// Prepare calls may have left prepared.
func (s *MariaDBSink) Prepare(ctx context.Context, checkpoint int64) ([]MariaDBCommittable, error) {
	for xid := range s.uncertain {
		err := s.finish(ctx, "ROLLBACK", xid)
		if err != nil && unknownXID(err) {
			err = s.stillPrepared(ctx, xid)
		}
		if err != nil {
			return nil, fmt.Errorf("roll back %s, left by a failed prepare: %w", xid, err)
		}
		delete(s.uncertain, xid)
	}
	events, err := s.Input.Take(ctx, checkpoint)
	if err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, nil
	}
	xid := s.XID(checkpoint)
	conn, err := s.DB.Conn(ctx)
	if err != nil {
		return nil, err
	}
	// The session that prepared is closed, not handed back to the pool: the prepared
	// transaction then belongs to no session, and any may commit or roll it back.
	closed := false
	closeSession := func() {
		if !closed {
			closed = true
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			_ = conn.Close()
		}
	}
	defer closeSession()
	fail := func(what string, err error) ([]MariaDBCommittable, error) {
		return nil, fmt.Errorf("%s checkpoint %d: %w", what, checkpoint, err)
	}
	var session int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&session); err != nil {
		return fail("session of", err)
	}
	if _, err := conn.ExecContext(ctx, "XA START "+quoteXID(xid)); err != nil {
		return fail("xa start", err)
	}
	var b strings.Builder
	args := make([]any, 0, 3*len(events))
	b.WriteString("INSERT INTO " + ident(s.Table) + " (seq, payload, checkpoint) VALUES ")
	for i, e := range events {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?)")
		args = append(args, e.Seq, e.Payload, checkpoint)
	}
	if _, err := conn.ExecContext(ctx, b.String(), args...); err != nil {
		return fail("write", err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO twophase_sink_commits (xid, `rows`) VALUES (?, ?)", xid, len(events)); err != nil {
		return fail("mark", err)
	}
	if _, err := conn.ExecContext(ctx, "XA END "+quoteXID(xid)); err != nil {
		return fail("xa end", err)
	}
	_, err = conn.ExecContext(ctx, "XA PREPARE "+quoteXID(xid))
	if err == nil && s.afterPrepare != nil {
		err = s.afterPrepare(xid)
	}
	if err != nil {
		s.markUncertain(xid)
		return fail("xa prepare", err)
	}
	// The server lets the transaction go when the closed session's thread ends, a moment
	// after the client hangs up; until then XA COMMIT and XA ROLLBACK from other sessions
	// call it unknown. Prepare returns once the thread is gone, so that any session may
	// finish what it prepared.
	closeSession()
	if err := s.awaitSessionEnd(ctx, session); err != nil {
		s.markUncertain(xid) // prepared, but no vote will name it: the next Prepare rolls it back
		return fail("xa prepare", err)
	}
	s.log().Debug("prepared", "xid", xid, "rows", len(events))
	return []MariaDBCommittable{{XID: xid, Rows: len(events)}}, nil
}

// markUncertain notes that xid may be prepared by a Prepare that failed, for the next
// Prepare to roll back.
func (s *MariaDBSink) markUncertain(xid string) {
	if s.uncertain == nil {
		s.uncertain = map[string]bool{}
	}
	s.uncertain[xid] = true
}

// awaitSessionEnd waits until the server's thread of the closed session is gone from
// the process list, when the server has detached its prepared XA transaction.
func (s *MariaDBSink) awaitSessionEnd(ctx context.Context, session int64) error {
	const poll = 2 * time.Millisecond
	for {
		var n int
		err := s.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", session).Scan(&n)
		if err != nil {
			return fmt.Errorf("wait for the preparing session to end: %w", err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the preparing session to end: %w", ctx.Err())
		case <-time.After(poll):
		}
	}
}

// finish runs XA COMMIT or XA ROLLBACK (verb) of xid in a session of its own.
func (s *MariaDBSink) finish(ctx context.Context, verb, xid string) error {
	_, err := s.DB.ExecContext(ctx, "XA "+verb+" "+quoteXID(xid))
	return err
}

// Commit commits the prepared transactions. One already committed is no error; one that
// is neither prepared nor committed was lost, a Permanent error.
func (s *MariaDBSink) Commit(ctx context.Context, checkpoint int64, committables []MariaDBCommittable) error {
	for _, c := range committables {
		err := s.finish(ctx, "COMMIT", c.XID)
		if err == nil {
			continue
		}
		if !unknownXID(err) {
			return fmt.Errorf("xa commit %s: %w", c.XID, err)
		}
		committed, err := s.committed(ctx, c.XID)
		if err != nil {
			return err
		}
		if committed {
			continue
		}
		if err := s.stillPrepared(ctx, c.XID); err != nil {
			return err
		}
		return cc.Permanent(fmt.Errorf("checkpoint %d: XA transaction %s is neither prepared nor committed", checkpoint, c.XID))
	}
	return nil
}

// Abort rolls the prepared transactions back. One already gone is no error, unless it was
// committed: a Permanent error, since a decision cannot be reversed.
func (s *MariaDBSink) Abort(ctx context.Context, checkpoint int64, committables []MariaDBCommittable) error {
	for _, c := range committables {
		err := s.finish(ctx, "ROLLBACK", c.XID)
		if err == nil {
			continue
		}
		if !unknownXID(err) {
			return fmt.Errorf("xa rollback %s: %w", c.XID, err)
		}
		committed, err := s.committed(ctx, c.XID)
		if err != nil {
			return err
		}
		if committed {
			return cc.Permanent(fmt.Errorf("checkpoint %d: abort of %s, which is committed", checkpoint, c.XID))
		}
		if err := s.stillPrepared(ctx, c.XID); err != nil {
			return err
		}
	}
	return nil
}

// stillPrepared returns an error (one to retry) if xid, which XA COMMIT or XA ROLLBACK
// just called unknown (1397), is listed by XA RECOVER: MariaDB answers so while the
// transaction is still attached to the session that prepared it, which is going away.
func (s *MariaDBSink) stillPrepared(ctx context.Context, xid string) error {
	xids, err := s.Prepared(ctx)
	if err != nil {
		return err
	}
	if slices.Contains(xids, xid) {
		return fmt.Errorf("XA transaction %s is still attached to the session that prepared it", xid)
	}
	return nil
}

func (s *MariaDBSink) committed(ctx context.Context, xid string) (bool, error) {
	var n int
	err := s.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM twophase_sink_commits WHERE xid = ?", xid).Scan(&n)
	return n > 0, err
}

// Prepared lists this sink's prepared XA transactions (their gtrids), from XA RECOVER.
func (s *MariaDBSink) Prepared(ctx context.Context) ([]string, error) {
	rows, err := s.DB.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var formatID, gtridLength, bqualLength int
		var data []byte
		if err := rows.Scan(&formatID, &gtridLength, &bqualLength, &data); err != nil {
			return nil, err
		}
		if gtridLength > len(data) {
			continue
		}
		if gtrid := string(data[:gtridLength]); bqualLength == 0 && strings.HasPrefix(gtrid, s.XIDPrefix) {
			out = append(out, gtrid)
		}
	}
	slices.Sort(out)
	return out, rows.Err()
}

// Recover reconciles XA RECOVER with the coordinator: transactions that pending items name
// are left to the Runner; each other one is committed if its checkpoint is decided commit
// with this XID among the sink's committables, rolled back if its checkpoint is aborted or
// never got this sink's vote with it, and left alone while its checkpoint is preparing with
// the vote recorded.
func (s *MariaDBSink) Recover(ctx context.Context, epoch int64, pending []cc.Item[MariaDBCommittable]) error {
	xids, err := s.Prepared(ctx)
	if err != nil {
		return fmt.Errorf("xa recover: %w", err)
	}
	return reconciler[MariaDBCommittable]{
		coord: s.Coordinator, job: s.Job, name: s.Name, logger: s.log(),
		what: "XA transaction", key: "xid", prefix: s.XIDPrefix,
		nameOf:      func(c MariaDBCommittable) string { return c.XID },
		committable: func(xid string) MariaDBCommittable { return MariaDBCommittable{XID: xid} },
		commit:      s.Commit, abort: s.Abort,
	}.reconcile(ctx, xids, pending)
}

// ReadMariaDB returns the events a MariaDBSink's table holds (committed ones only).
func ReadMariaDB(ctx context.Context, db *sql.DB, table string) ([]Event, error) {
	rows, err := db.QueryContext(ctx, "SELECT seq, payload FROM "+ident(table)+" ORDER BY seq")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		if err := rows.Scan(&e.Seq, &e.Payload); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// ident quotes a MariaDB identifier.
func ident(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// quoteXID quotes a gtrid as a string literal.
func quoteXID(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// unknownXID reports error 1397 (XAER_NOTA): no XA transaction with that XID.
func unknownXID(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1397
}
