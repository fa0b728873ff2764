package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/coordinator"
)

// jobTx is one job inside one database transaction; for writes it holds the job row's lock.
type jobTx struct {
	tx      pgx.Tx
	write   bool
	job     *coordinator.Job
	now     time.Time
	decided []string
}

var _ coordinator.JobTx = (*jobTx)(nil)

var errReadOnly = errors.New("postgres: write in a read-only transaction")

func (t *jobTx) load(ctx context.Context, name string) error {
	if t.write {
		// The lock is taken in a statement of its own: a statement that waits for a row lock
		// re-reads only the locked row afterwards, so epochs read in the same statement could
		// predate the transaction that held the lock.
		var one int
		err := t.tx.QueryRow(ctx, "SELECT 1 FROM jobs WHERE name = $1 AND NOT deleted FOR UPDATE", name).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return coordinator.ErrNotFound
		}
		if err != nil {
			return err
		}
	}
	job, err := scanJob(t.tx.QueryRow(ctx, "SELECT "+jobColumns+" FROM jobs j WHERE j.name = $1 AND NOT j.deleted", name), false)
	if err != nil {
		return err
	}
	t.job = job
	// The clock is read after the lock is granted, so a decision is timed when it is taken.
	if err := t.tx.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t.now); err != nil {
		return err
	}
	t.now = t.now.UTC()
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

const checkpointColumns = `c.job, c.id, c.seq, c.status, c.auto_commit, c.created_at, c.deadline, c.decided_at, c.completed_at, c.abort_reason`

// queryCheckpoints runs a query selecting checkpointColumns and loads each checkpoint's
// participants, in the order the query returned the checkpoints.
func queryCheckpoints(ctx context.Context, q querier, sql string, args ...any) ([]*coordinator.Checkpoint, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	var cps []*coordinator.Checkpoint
	for rows.Next() {
		var cp coordinator.Checkpoint
		var status string
		var reason *string
		if err := rows.Scan(&cp.Job, &cp.ID, &cp.Seq, &status, &cp.AutoCommit, &cp.CreatedAt, &cp.Deadline, &cp.DecidedAt, &cp.CompletedAt, &reason); err != nil {
			rows.Close()
			return nil, err
		}
		cp.Status = coordinator.Status(status)
		cp.CreatedAt, cp.Deadline = cp.CreatedAt.UTC(), cp.Deadline.UTC()
		cp.DecidedAt, cp.CompletedAt = utc(cp.DecidedAt), utc(cp.CompletedAt)
		if reason != nil {
			cp.AbortReason = *reason
		}
		cps = append(cps, &cp)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(cps) == 0 {
		return cps, nil
	}
	// One query for every participant of every checkpoint, even across jobs.
	jobs := make([]string, len(cps))
	ids := make([]int64, len(cps))
	index := make(map[string]*coordinator.Checkpoint, len(cps))
	for i, cp := range cps {
		jobs[i], ids[i] = cp.Job, cp.ID
		index[coordinator.BrokerKey(cp.Job, cp.ID)] = cp
	}
	rows, err = q.Query(ctx, `
		SELECT p.job, p.checkpoint_id, p.participant, p.epoch, p.vote, p.reason, p.committables, p.voted_at, p.acked_at
		FROM checkpoint_participants p
		JOIN unnest($1::text[], $2::bigint[]) AS k(job, id) ON p.job = k.job AND p.checkpoint_id = k.id
		ORDER BY p.job, p.checkpoint_id, p.position`, jobs, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var job string
		var id int64
		var p coordinator.ParticipantState
		var epoch *int64
		var vote, reason, committables *string
		if err := rows.Scan(&job, &id, &p.Name, &epoch, &vote, &reason, &committables, &p.VotedAt, &p.AckedAt); err != nil {
			return nil, err
		}
		if epoch != nil {
			p.Epoch = *epoch
		}
		if vote != nil {
			p.Vote = coordinator.VoteKind(*vote)
		}
		if reason != nil {
			p.Reason = *reason
		}
		if committables != nil {
			p.Committables = []byte(*committables)
		}
		p.VotedAt, p.AckedAt = utc(p.VotedAt), utc(p.AckedAt)
		cp := index[coordinator.BrokerKey(job, id)]
		cp.Participants = append(cp.Participants, p)
	}
	return cps, rows.Err()
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func (t *jobTx) Preparing(ctx context.Context) ([]*coordinator.Checkpoint, error) {
	return queryCheckpoints(ctx, t.tx, "SELECT "+checkpointColumns+" FROM checkpoints c WHERE c.job = $1 AND c.status = 'preparing' ORDER BY c.id", t.job.Name)
}

func (t *jobTx) Checkpoint(ctx context.Context, id int64) (*coordinator.Checkpoint, error) {
	cps, err := queryCheckpoints(ctx, t.tx, "SELECT "+checkpointColumns+" FROM checkpoints c WHERE c.job = $1 AND c.id = $2", t.job.Name, id)
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
// prepared vote not acked. coordinator.Owed decides on each.
func (t *jobTx) Owing(ctx context.Context, participant string) ([]*coordinator.Checkpoint, error) {
	return queryCheckpoints(ctx, t.tx, `
		SELECT `+checkpointColumns+` FROM checkpoints c
		WHERE c.job = $1 AND EXISTS (
			SELECT 1 FROM checkpoint_participants p
			WHERE p.job = c.job AND p.checkpoint_id = c.id AND p.acked_at IS NULL
			  AND ($2 = '' OR p.participant = $2)
			  AND (c.status IN ('preparing', 'committing') OR (c.status = 'aborted' AND p.vote = 'prepared')))
		ORDER BY c.id`, t.job.Name, participant)
}

func (t *jobTx) Idempotency(ctx context.Context, key string) (coordinator.IdempotencyRecord, bool, error) {
	rec := coordinator.IdempotencyRecord{Key: key}
	err := t.tx.QueryRow(ctx, "SELECT fingerprint, checkpoint_id FROM idempotency_keys WHERE job = $1 AND key = $2", t.job.Name, key).
		Scan(&rec.Fingerprint, &rec.Checkpoint)
	if errors.Is(err, pgx.ErrNoRows) {
		return rec, false, nil
	}
	return rec, err == nil, err
}

func (t *jobTx) InsertCheckpoint(ctx context.Context, cp *coordinator.Checkpoint, rec *coordinator.IdempotencyRecord) error {
	if err := t.writable(); err != nil {
		return err
	}
	var reason *string
	if cp.AbortReason != "" {
		reason = &cp.AbortReason
	}
	err := t.tx.QueryRow(ctx, `
		INSERT INTO checkpoints (job, id, status, auto_commit, created_at, deadline, decided_at, completed_at, abort_reason)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING seq`,
		t.job.Name, cp.ID, string(cp.Status), cp.AutoCommit, cp.CreatedAt, cp.Deadline, cp.DecidedAt, cp.CompletedAt, reason,
	).Scan(&cp.Seq)
	if err != nil {
		return fmt.Errorf("insert checkpoint %d: %w", cp.ID, err)
	}
	names := make([]string, len(cp.Participants))
	for i, p := range cp.Participants {
		names[i] = p.Name
	}
	if _, err := t.tx.Exec(ctx, `
		INSERT INTO checkpoint_participants (job, checkpoint_id, position, participant)
		SELECT $1, $2, n.ord, n.name FROM unnest($3::text[]) WITH ORDINALITY AS n(name, ord)`,
		t.job.Name, cp.ID, names); err != nil {
		return fmt.Errorf("insert participants of checkpoint %d: %w", cp.ID, err)
	}
	if cp.ID > t.job.Seq {
		if _, err := t.tx.Exec(ctx, "UPDATE jobs SET seq = $2 WHERE name = $1", t.job.Name, cp.ID); err != nil {
			return err
		}
		t.job.Seq = cp.ID
	}
	if rec != nil {
		if _, err := t.tx.Exec(ctx, "INSERT INTO idempotency_keys (job, key, fingerprint, checkpoint_id) VALUES ($1, $2, $3, $4)",
			t.job.Name, rec.Key, rec.Fingerprint, rec.Checkpoint); err != nil {
			return fmt.Errorf("record idempotency key: %w", err)
		}
	}
	return nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (t *jobTx) SaveVote(ctx context.Context, cp *coordinator.Checkpoint, p *coordinator.ParticipantState) error {
	if err := t.writable(); err != nil {
		return err
	}
	var committables *string
	if p.Committables != nil {
		s := string(p.Committables)
		committables = &s
	}
	_, err := t.tx.Exec(ctx, `
		UPDATE checkpoint_participants SET epoch = $4, vote = $5, reason = $6, committables = $7, voted_at = $8
		WHERE job = $1 AND checkpoint_id = $2 AND participant = $3`,
		cp.Job, cp.ID, p.Name, p.Epoch, nullable(string(p.Vote)), nullable(p.Reason), committables, p.VotedAt)
	if err != nil {
		return fmt.Errorf("save vote of %s on %d: %w", p.Name, cp.ID, err)
	}
	return nil
}

func (t *jobTx) SaveAck(ctx context.Context, cp *coordinator.Checkpoint, p *coordinator.ParticipantState) error {
	if err := t.writable(); err != nil {
		return err
	}
	_, err := t.tx.Exec(ctx, "UPDATE checkpoint_participants SET acked_at = $4 WHERE job = $1 AND checkpoint_id = $2 AND participant = $3",
		cp.Job, cp.ID, p.Name, p.AckedAt)
	if err != nil {
		return fmt.Errorf("save ack of %s on %d: %w", p.Name, cp.ID, err)
	}
	return nil
}

func (t *jobTx) SaveStatus(ctx context.Context, cp *coordinator.Checkpoint) error {
	if err := t.writable(); err != nil {
		return err
	}
	key := coordinator.BrokerKey(cp.Job, cp.ID)
	_, err := t.tx.Exec(ctx, `
		WITH u AS (
			UPDATE checkpoints SET status = $3, decided_at = $4, completed_at = $5, abort_reason = $6
			WHERE job = $1 AND id = $2)
		SELECT pg_notify('`+channel+`', $7)`,
		cp.Job, cp.ID, string(cp.Status), cp.DecidedAt, cp.CompletedAt, nullable(cp.AbortReason), key)
	if err != nil {
		return fmt.Errorf("save status of %d: %w", cp.ID, err)
	}
	t.decided = append(t.decided, key)
	return nil
}

func (t *jobTx) SetEpoch(ctx context.Context, participant string, epoch int64) error {
	if err := t.writable(); err != nil {
		return err
	}
	_, err := t.tx.Exec(ctx, `
		INSERT INTO participant_epochs (job, participant, epoch) VALUES ($1, $2, $3)
		ON CONFLICT (job, participant) DO UPDATE SET epoch = EXCLUDED.epoch`, t.job.Name, participant, epoch)
	if err != nil {
		return fmt.Errorf("set epoch of %s: %w", participant, err)
	}
	t.job.Epochs[participant] = epoch
	return nil
}

func (t *jobTx) DeleteJob(ctx context.Context) error {
	if err := t.writable(); err != nil {
		return err
	}
	if _, err := t.tx.Exec(ctx, "DELETE FROM checkpoints WHERE job = $1", t.job.Name); err != nil {
		return fmt.Errorf("delete checkpoints: %w", err)
	}
	if _, err := t.tx.Exec(ctx, "UPDATE jobs SET deleted = true, updated_at = clock_timestamp() WHERE name = $1", t.job.Name); err != nil {
		return fmt.Errorf("delete job: %w", err)
	}
	return nil
}
