package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// jobTx is one job inside one database transaction; for writes the transaction began
// IMMEDIATE on the store's one write connection, which makes it the lock of the job.
type jobTx struct {
	tx      *sql.Tx
	write   bool
	job     *coordinator.Job
	now     time.Time
	decided []*coordinator.Checkpoint // as saved, published once committed
	// announced: a checkpoint opened, an epoch changed or the job deleted; the job's
	// waiters are told once committed.
	announced bool
}

var _ coordinator.JobTx = (*jobTx)(nil)

var errReadOnly = errors.New("sqlite: write in a read-only transaction")

func (t *jobTx) load(ctx context.Context, name string) error {
	job, err := scanJob(t.tx.QueryRowContext(ctx, viewJobSQL, name), false)
	if err != nil {
		return err
	}
	t.job = job
	// The clock is read once the lock is held, so a decision is timed when it is taken.
	t.now = now()
	return nil
}

func (t *jobTx) Now() time.Time        { return t.now }
func (t *jobTx) Job() *coordinator.Job { return t.job }
func (t *jobTx) writable() error {
	if !t.write {
		return errReadOnly
	}
	return nil
}

// queryCheckpoints runs a query selecting checkpointColumns and loads each checkpoint's
// participants, in the order the query returned the checkpoints.
func queryCheckpoints(ctx context.Context, q querier, query string, args ...any) ([]*coordinator.Checkpoint, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var cps []*coordinator.Checkpoint
	for rows.Next() {
		var cp coordinator.Checkpoint
		var status string
		var createdAt, deadline int64
		var decidedAt, completedAt sql.NullInt64
		var reason, decidedBy, cause sql.NullString
		if err := rows.Scan(&cp.Job, &cp.ID, &cp.Seq, &status, &cp.AutoCommit, &createdAt, &deadline, &decidedAt, &completedAt, &reason, &decidedBy, &cause); err != nil {
			rows.Close()
			return nil, err
		}
		cp.Status = coordinator.Status(status)
		cp.CreatedAt, cp.Deadline = fromMicros(createdAt), fromMicros(deadline)
		cp.DecidedAt, cp.CompletedAt = optionalTime(decidedAt), optionalTime(completedAt)
		cp.AbortReason, cp.DecidedBy, cp.DecisionCause = reason.String, decidedBy.String, coordinator.Cause(cause.String)
		cps = append(cps, &cp)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(cps) == 0 {
		return cps, nil
	}
	// One query for every participant of every checkpoint, even across jobs: the
	// checkpoints are named by their Seq, the rowid of checkpoints.
	seqs := make([]int64, len(cps))
	index := make(map[string]*coordinator.Checkpoint, len(cps))
	for i, cp := range cps {
		seqs[i] = cp.Seq
		index[coordinator.BrokerKey(cp.Job, cp.ID)] = cp
	}
	seqJSON, err := json.Marshal(seqs)
	if err != nil {
		return nil, err
	}
	rows, err = q.QueryContext(ctx, participantsSQL, string(seqJSON))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var job string
		var id int64
		var p participantRow
		if err := rows.Scan(append([]any{&job, &id}, p.dest()...)...); err != nil {
			return nil, err
		}
		cp := index[coordinator.BrokerKey(job, id)]
		cp.Participants = append(cp.Participants, p.state())
	}
	return cps, rows.Err()
}

func (t *jobTx) Preparing(ctx context.Context) ([]*coordinator.Checkpoint, error) {
	return queryCheckpoints(ctx, t.tx, preparingSQL, t.job.Name)
}

func (t *jobTx) Checkpoint(ctx context.Context, id int64) (*coordinator.Checkpoint, error) {
	cps, err := queryCheckpoints(ctx, t.tx, checkpointSQL, t.job.Name, id)
	if err != nil {
		return nil, err
	}
	if len(cps) == 0 {
		return nil, coordinator.ErrNotFound
	}
	return cps[0], nil
}

// Owing selects, with the partial index on unacked participants, the checkpoints where the
// participant may owe something: preparing or committing and not acked, or aborted with a
// prepared vote not acked. The rules decide on each.
func (t *jobTx) Owing(ctx context.Context, participant string) ([]*coordinator.Checkpoint, error) {
	return queryCheckpoints(ctx, t.tx, owingSQL, t.job.Name, participant)
}

func (t *jobTx) Idempotency(ctx context.Context, key string) (coordinator.IdempotencyRecord, bool, error) {
	rec := coordinator.IdempotencyRecord{Key: key}
	err := t.tx.QueryRowContext(ctx, idempotencyKeySQL, t.job.Name, key).
		Scan(&rec.Fingerprint, &rec.Checkpoint)
	if errors.Is(err, sql.ErrNoRows) {
		return rec, false, nil
	}
	return rec, err == nil, err
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Apply writes what the rules decided, one statement per change.
func (t *jobTx) Apply(ctx context.Context, m *coordinator.Mutation) error {
	if err := t.writable(); err != nil {
		return err
	}
	if m.Opened != nil {
		if err := t.insertCheckpoint(ctx, m.Opened, m.Idempotency); err != nil {
			return err
		}
	}
	for _, e := range m.Epochs {
		if err := t.setEpoch(ctx, e.Participant, e.Epoch); err != nil {
			return err
		}
	}
	t.announced = t.announced || m.Opened != nil || len(m.Epochs) > 0 || m.JobDeleted
	for _, v := range m.Votes {
		if err := t.saveVote(ctx, v.Checkpoint, &v.Participant); err != nil {
			return err
		}
	}
	for _, a := range m.Acks {
		if err := t.saveAck(ctx, a.Checkpoint, &a.Participant); err != nil {
			return err
		}
	}
	for _, cp := range m.Statuses {
		if err := t.saveStatus(ctx, cp); err != nil {
			return err
		}
	}
	if m.JobDeleted {
		if err := t.deleteJob(ctx); err != nil {
			return err
		}
	}
	for i := range m.Audit {
		if _, err := t.tx.ExecContext(ctx, insertAuditSQL, auditArgs(&m.Audit[i])...); err != nil {
			return fmt.Errorf("record %s: %w", m.Audit[i].Action, err)
		}
	}
	return nil
}

func (t *jobTx) insertCheckpoint(ctx context.Context, cp *coordinator.Checkpoint, rec *coordinator.IdempotencyRecord) error {
	err := t.tx.QueryRowContext(ctx, insertCheckpointSQL,
		t.job.Name, cp.ID, string(cp.Status), cp.AutoCommit, cp.CreatedAt.UnixMicro(), cp.Deadline.UnixMicro(),
		micros(cp.DecidedAt), micros(cp.CompletedAt), nullable(cp.AbortReason), nullable(cp.DecidedBy), nullable(string(cp.DecisionCause)),
	).Scan(&cp.Seq)
	if err != nil {
		return fmt.Errorf("insert checkpoint %d: %w", cp.ID, err)
	}
	if _, err := t.tx.ExecContext(ctx, insertEventSQL, t.job.Name, cp.ID, coordinator.StatusRank(cp.Status), string(cp.Status), cp.CreatedAt.UnixMicro()); err != nil {
		return fmt.Errorf("record the opening of checkpoint %d: %w", cp.ID, err)
	}
	names := make([]string, len(cp.Participants))
	for i, p := range cp.Participants {
		names[i] = p.Name
	}
	namesJSON, err := json.Marshal(names)
	if err != nil {
		return err
	}
	// json_each numbers array elements from 0; positions start at 1, as in Postgres.
	if _, err := t.tx.ExecContext(ctx, insertParticipantsSQL, t.job.Name, cp.ID, string(namesJSON)); err != nil {
		return fmt.Errorf("insert participants of checkpoint %d: %w", cp.ID, err)
	}
	if cp.ID > t.job.Seq {
		if _, err := t.tx.ExecContext(ctx, raiseSeqSQL, cp.ID, t.job.Name); err != nil {
			return err
		}
		t.job.Seq = cp.ID
	}
	if rec != nil {
		if _, err := t.tx.ExecContext(ctx, recordIdempotencyKeySQL, t.job.Name, rec.Key, rec.Fingerprint, rec.Checkpoint); err != nil {
			return fmt.Errorf("record idempotency key: %w", err)
		}
	}
	return nil
}

func (t *jobTx) saveVote(ctx context.Context, cp int64, p *coordinator.ParticipantState) error {
	_, err := t.tx.ExecContext(ctx, saveVoteSQL, saveVoteArgs(t.job.Name, cp, p)...)
	if err != nil {
		return fmt.Errorf("save vote of %s on %d: %w", p.Name, cp, err)
	}
	return nil
}

func (t *jobTx) saveAck(ctx context.Context, cp int64, p *coordinator.ParticipantState) error {
	_, err := t.tx.ExecContext(ctx, saveAckSQL, saveAckArgs(t.job.Name, cp, p)...)
	if err != nil {
		return fmt.Errorf("save ack of %s on %d: %w", p.Name, cp, err)
	}
	return nil
}

// saveStatus stores the checkpoint's decision; its waiters are woken once the
// transaction commits (Store.run).
func (t *jobTx) saveStatus(ctx context.Context, cp *coordinator.Checkpoint) error {
	_, err := t.tx.ExecContext(ctx, saveStatusSQL,
		cp.Job, cp.ID, string(cp.Status), micros(cp.DecidedAt), micros(cp.CompletedAt), nullable(cp.AbortReason), nullable(cp.DecidedBy),
		nullable(string(cp.DecisionCause)))
	if err != nil {
		return fmt.Errorf("save status of %d: %w", cp.ID, err)
	}
	at := cp.CreatedAt
	if cp.CompletedAt != nil {
		at = *cp.CompletedAt
	} else if cp.DecidedAt != nil {
		at = *cp.DecidedAt
	}
	if _, err := t.tx.ExecContext(ctx, insertEventSQL, cp.Job, cp.ID, coordinator.StatusRank(cp.Status), string(cp.Status), at.UnixMicro()); err != nil {
		return fmt.Errorf("record the status change of %d: %w", cp.ID, err)
	}
	t.decided = append(t.decided, cp.Clone())
	return nil
}

func (t *jobTx) setEpoch(ctx context.Context, participant string, epoch int64) error {
	_, err := t.tx.ExecContext(ctx, setEpochSQL, t.job.Name, participant, epoch, t.now.UnixMicro())
	if err != nil {
		return fmt.Errorf("set epoch of %s: %w", participant, err)
	}
	t.job.SetEpoch(participant, epoch)
	return nil
}

// deleteJob deletes the job's checkpoints (their participants and idempotency keys
// cascade) and marks the job deleted, keeping its row, so its Seq and epochs live on.
func (t *jobTx) deleteJob(ctx context.Context) error {
	if _, err := t.tx.ExecContext(ctx, deleteCheckpointsSQL, t.job.Name); err != nil {
		return fmt.Errorf("delete checkpoints: %w", err)
	}
	if _, err := t.tx.ExecContext(ctx, markJobDeletedSQL, now().UnixMicro(), t.job.Name); err != nil {
		return fmt.Errorf("delete job: %w", err)
	}
	return nil
}
