package sinks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
)

// PGCommittable names a prepared transaction of a PGSink.
type PGCommittable struct {
	// GID is the transaction's identifier in pg_prepared_xacts.
	GID string `json:"gid"`
	// Rows is how many events it holds (for humans reading the coordinator).
	Rows int `json:"rows"`
}

// PGSink writes each checkpoint's events to a table in one transaction that it prepares
// (PREPARE TRANSACTION '<database>.<job>.<participant>.<checkpoint>') in phase one and commits
// (COMMIT PREPARED) or rolls back (ROLLBACK PREPARED) in phase two. The server needs
// max_prepared_transactions > 0.
//
// Each prepared transaction also inserts its GID into twophase_sink_commits, so that a
// replayed COMMIT PREPARED can tell "already committed" (the row is there) from "lost"
// (it is not): Commit and Abort are idempotent and never guess.
//
// On start (Recover) it reconciles pg_prepared_xacts with the coordinator: a prepared
// transaction of this sink that no pending item names belongs to a process that died
// between PREPARE TRANSACTION and its vote; it is rolled back when its checkpoint is
// aborted.
type PGSink struct {
	// Pool connects to the database that receives the events. Required.
	Pool *pgxpool.Pool
	// Coordinator is used by Recover to look checkpoints up. Required.
	Coordinator *cc.Coordinator
	// Job and Name are the job and this participant's name in it. Required.
	Job, Name string
	// Table receives the events (seq, payload, checkpoint). Required; created by Setup.
	Table string
	// Input hands out each checkpoint's events. Required.
	Input Input
	// GIDPrefix starts the identifier of each prepared transaction, which is followed by
	// the checkpoint id. Identifiers are global to the PostgreSQL cluster, so the prefix
	// must be unique to this sink there. Empty means "<database>.<job>.<participant>.",
	// set by Setup (hashed when it would not fit in 200 bytes).
	GIDPrefix string
	// Logger; nil means no logging.
	Logger *slog.Logger

	// uncertain holds the GIDs of failed Prepare calls that sent PREPARE TRANSACTION: the
	// server may have prepared them before the connection failed (a crash, a lost
	// answer). Their checkpoints never got a prepared vote with them, so nobody will ask
	// for them: the next Prepare rolls them back.
	uncertain map[string]bool
	// afterPrepare, when set (by tests), runs after PREPARE TRANSACTION succeeded; its
	// error fails Prepare as a lost answer would.
	afterPrepare func() error
}

var (
	_ cc.Participant[PGCommittable] = (*PGSink)(nil)
	_ cc.Recoverer[PGCommittable]   = (*PGSink)(nil)
)

func (s *PGSink) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// Setup creates the sink's table and the commit markers' table if they do not exist, and
// sets GIDPrefix if it is empty. Call it before anything else.
func (s *PGSink) Setup(ctx context.Context) error {
	_, err := s.Pool.Exec(ctx, fmt.Sprintf(`
CREATE TABLE IF NOT EXISTS %s (seq bigint NOT NULL, payload text NOT NULL, checkpoint bigint NOT NULL);
CREATE TABLE IF NOT EXISTS twophase_sink_commits (gid text PRIMARY KEY, rows int NOT NULL)`,
		pgx.Identifier{s.Table}.Sanitize()))
	if err != nil || s.GIDPrefix != "" {
		return err
	}
	var db string
	if err := s.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		return err
	}
	s.GIDPrefix = db + "." + s.Job + "." + s.Name + "."
	if len(s.GIDPrefix)+20 > 200 { // a checkpoint id has at most 19 digits
		sum := sha256.Sum256([]byte(db + "\x00" + s.Job + "\x00" + s.Name))
		s.GIDPrefix = "tp-" + hex.EncodeToString(sum[:16]) + "."
	}
	return nil
}

func (s *PGSink) gidPrefix() string {
	if s.GIDPrefix == "" {
		panic("sinks: PGSink used before Setup (GIDPrefix is empty)")
	}
	return s.GIDPrefix
}

// GID is the prepared transaction identifier of checkpoint for this sink.
func (s *PGSink) GID(checkpoint int64) string {
	return s.gidPrefix() + strconv.FormatInt(checkpoint, 10)
}

// Prepare writes the checkpoint's events in a transaction and prepares it. A checkpoint
// without events prepares nothing and votes with no committables. It first rolls back the
// transactions that earlier failed Prepare calls may have left prepared.
func (s *PGSink) Prepare(ctx context.Context, checkpoint int64) ([]PGCommittable, error) {
	for gid := range s.uncertain {
		if _, err := s.Pool.Exec(ctx, "ROLLBACK PREPARED "+quote(gid)); err != nil && !undefinedObject(err) {
			return nil, fmt.Errorf("roll back %s, left by a failed prepare: %w", gid, err)
		}
		delete(s.uncertain, gid)
	}
	events, err := s.Input.Take(ctx, checkpoint)
	if err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, nil
	}
	gid := s.GID(checkpoint)
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	// A transaction block by hand rather than pgx.Tx: it ends with PREPARE TRANSACTION,
	// after which the connection is free and the transaction survives a crash of this
	// process or of the server.
	fail := func(what string, err error) ([]PGCommittable, error) {
		_, _ = conn.Exec(context.Background(), "ROLLBACK")
		return nil, fmt.Errorf("%s checkpoint %d: %w", what, checkpoint, err)
	}
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		return fail("begin", err)
	}
	rows := make([][]any, len(events))
	for i, e := range events {
		rows[i] = []any{e.Seq, e.Payload, checkpoint}
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{s.Table}, []string{"seq", "payload", "checkpoint"}, pgx.CopyFromRows(rows)); err != nil {
		return fail("write", err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO twophase_sink_commits (gid, rows) VALUES ($1, $2)", gid, len(events)); err != nil {
		return fail("mark", err)
	}
	_, err = conn.Exec(ctx, "PREPARE TRANSACTION "+quote(gid))
	if err == nil && s.afterPrepare != nil {
		err = s.afterPrepare()
	}
	if err != nil {
		if s.uncertain == nil {
			s.uncertain = map[string]bool{}
		}
		s.uncertain[gid] = true
		return fail("prepare", err)
	}
	s.log().Debug("prepared", "gid", gid, "rows", len(events))
	return []PGCommittable{{GID: gid, Rows: len(events)}}, nil
}

// Commit commits the prepared transactions. One already committed is no error; one that
// is neither prepared nor committed was lost, a Permanent error.
func (s *PGSink) Commit(ctx context.Context, checkpoint int64, committables []PGCommittable) error {
	for _, c := range committables {
		_, err := s.Pool.Exec(ctx, "COMMIT PREPARED "+quote(c.GID))
		if err == nil || !undefinedObject(err) {
			if err != nil {
				return fmt.Errorf("commit prepared %s: %w", c.GID, err)
			}
			continue
		}
		committed, err := s.committed(ctx, c.GID)
		if err != nil {
			return err
		}
		if !committed {
			return cc.Permanent(fmt.Errorf("checkpoint %d: prepared transaction %s is neither prepared nor committed", checkpoint, c.GID))
		}
	}
	return nil
}

// Abort rolls the prepared transactions back. One already gone is no error, unless it
// was committed: a Permanent error, since a decision cannot be reversed.
func (s *PGSink) Abort(ctx context.Context, checkpoint int64, committables []PGCommittable) error {
	for _, c := range committables {
		_, err := s.Pool.Exec(ctx, "ROLLBACK PREPARED "+quote(c.GID))
		if err == nil || !undefinedObject(err) {
			if err != nil {
				return fmt.Errorf("rollback prepared %s: %w", c.GID, err)
			}
			continue
		}
		committed, err := s.committed(ctx, c.GID)
		if err != nil {
			return err
		}
		if committed {
			return cc.Permanent(fmt.Errorf("checkpoint %d: abort of %s, which is committed", checkpoint, c.GID))
		}
	}
	return nil
}

func (s *PGSink) committed(ctx context.Context, gid string) (bool, error) {
	var n int
	err := s.Pool.QueryRow(ctx, "SELECT count(*) FROM twophase_sink_commits WHERE gid = $1", gid).Scan(&n)
	return n > 0, err
}

// Prepared lists this sink's prepared transactions (their GIDs) in its database.
func (s *PGSink) Prepared(ctx context.Context) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `SELECT gid FROM pg_prepared_xacts
		WHERE database = current_database() AND starts_with(gid, $1) ORDER BY prepared`, s.gidPrefix())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Recover reconciles pg_prepared_xacts with the coordinator. Transactions that pending
// items name are left to the Runner. Each other one is looked up: rolled back if its
// checkpoint is aborted or never got this sink's vote with this GID; committed if its
// checkpoint's decision is commit with this GID among the sink's committables (which
// pending would normally have named); left alone while the checkpoint is preparing with
// the vote recorded (pending will name it once decided).
func (s *PGSink) Recover(ctx context.Context, epoch int64, pending []cc.Item[PGCommittable]) error {
	gids, err := s.Prepared(ctx)
	if err != nil {
		return fmt.Errorf("list prepared transactions: %w", err)
	}
	return reconciler[PGCommittable]{
		coord: s.Coordinator, job: s.Job, name: s.Name, logger: s.log(),
		what: "prepared transaction", key: "gid", prefix: s.gidPrefix(),
		nameOf:      func(c PGCommittable) string { return c.GID },
		committable: func(gid string) PGCommittable { return PGCommittable{GID: gid} },
		commit:      s.Commit, abort: s.Abort,
	}.reconcile(ctx, gids, pending)
}

// ReadPG returns the events a PGSink's table holds (committed ones only).
func ReadPG(ctx context.Context, pool *pgxpool.Pool, table string) ([]Event, error) {
	rows, err := pool.Query(ctx, "SELECT seq, payload FROM "+pgx.Identifier{table}.Sanitize()+" ORDER BY seq")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) {
		var e Event
		err := row.Scan(&e.Seq, &e.Payload)
		return e, err
	})
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// undefinedObject reports SQLSTATE 42704: no prepared transaction with that GID.
func undefinedObject(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42704"
}
