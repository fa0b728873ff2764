package sinks

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
)

// reconciler settles, when a sink starts, the prepared transactions of a database that no
// pending item names: each is named after its checkpoint (a prefix, then the id), and
// belongs to a process that died between preparing and voting, or whose decision it never
// applied. PGSink (pg_prepared_xacts) and MariaDBSink (XA RECOVER) use it.
type reconciler[C any] struct {
	coord     *cc.Coordinator
	job, name string // the job and the sink's participant name in it
	logger    *slog.Logger
	// what names the transactions in the log ("prepared transaction"), key the log
	// attribute of their name ("gid").
	what, key string
	prefix    string
	// nameOf is the transaction a committable names; committable, the committable of a
	// transaction's name.
	nameOf      func(C) string
	committable func(name string) C
	// commit and abort finish the transactions of a checkpoint, as the sink's Commit
	// and Abort do.
	commit, abort func(ctx context.Context, checkpoint int64, committables []C) error
}

// reconcile settles each of prepared (the transactions' names) that no item of pending
// names: it is committed if its checkpoint is decided commit with it among the sink's
// committables, rolled back if its checkpoint is aborted or never got the sink's vote with
// it, and left alone while its checkpoint is preparing with that vote recorded. Names
// without the prefix's shape and checkpoints the coordinator does not know are left alone,
// with a warning.
func (r reconciler[C]) reconcile(ctx context.Context, prepared []string, pending []cc.Item[C]) error {
	owed := map[string]bool{}
	for _, it := range pending {
		for _, c := range it.Committables {
			owed[r.nameOf(c)] = true
		}
	}
	for _, name := range prepared {
		if owed[name] {
			continue
		}
		id, err := strconv.ParseInt(strings.TrimPrefix(name, r.prefix), 10, 64)
		if err != nil {
			r.logger.Warn(r.what+" with an unexpected name, left alone", r.key, name)
			continue
		}
		cp, err := r.coord.Checkpoint(ctx, r.job, id, 0)
		if errors.Is(err, cc.ErrNotFound) {
			r.logger.Warn(r.what+" of an unknown checkpoint, left alone", r.key, name)
			continue
		}
		if err != nil {
			return err
		}
		voted := votedWith(cp, r.name, func(raw cc.Committables) bool {
			cs, err := cc.DecodeCommittables[C](raw)
			return err == nil && slices.ContainsFunc(cs, func(c C) bool { return r.nameOf(c) == name })
		})
		one := []C{r.committable(name)}
		switch {
		case cp.Status == cc.Preparing && voted:
			r.logger.Info(r.what+" in doubt, waiting for the decision", r.key, name)
		case (cp.Status == cc.Committing || cp.Status == cc.Committed) && voted:
			if err := r.commit(ctx, id, one); err != nil {
				return err
			}
			r.logger.Info("recovered: committed", r.key, name)
		default:
			// Aborted, or this transaction's vote was never recorded (the process died
			// before voting, and registration aborted the checkpoint).
			if err := r.abort(ctx, id, one); err != nil {
				return err
			}
			r.logger.Info("recovered: rolled back an orphan", r.key, name, "status", cp.Status)
		}
	}
	return nil
}

// votedWith reports whether participant voted prepared on cp with committables that
// match.
func votedWith(cp *cc.Checkpoint, participant string, match func(cc.Committables) bool) bool {
	for _, p := range cp.Participants {
		if p.Name == participant {
			return p.Vote != nil && *p.Vote == cc.VoteKindPrepared && match(p.Committables)
		}
	}
	return false
}
