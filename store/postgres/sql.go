package postgres

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

// Every statement of the store, named by what it does. The sections and the names follow
// those of the embedded store's sql.go, so that a diff of the two shows the dialects;
// statements that only this store has come last. DESIGN.md says which invariant each of
// the statements that lock a job keeps.

// checkpointColumns and participantColumns are what scanCheckpoints reads, in that order.
const checkpointColumns = `c.job, c.id, c.seq, c.status, c.auto_commit, c.created_at, c.deadline, c.decided_at, c.completed_at, c.abort_reason, c.decided_by, c.decision_cause`
const participantColumns = `p.participant, p.epoch, p.vote, p.reason, p.committables, p.voted_at, p.acked_at, p.acked_by`

// jobColumns are a job's columns with its epochs, scanned by scanJob; jobViewColumns add its
// last checkpoint and last committed one.
const jobColumns = `j.name, j.participants, j.checkpoint_timeout_ms, j.max_concurrent_checkpoints, j.auto_commit,
	j.retention_ms, j.seq, j.created_at, j.updated_at,
	ARRAY(SELECT e.participant FROM participant_epochs e WHERE e.job = j.name ORDER BY e.participant),
	ARRAY(SELECT e.epoch FROM participant_epochs e WHERE e.job = j.name ORDER BY e.participant)`

// The last checkpoint is the highest id issued since the job was created (its seq, once it
// passed created_seq), not the highest still stored: retention may have deleted that one.
const jobViewColumns = jobColumns + `,
	CASE WHEN j.seq > j.created_seq THEN j.seq END,
	(SELECT max(c.id) FROM checkpoints c WHERE c.job = j.name AND c.status IN ('committing', 'committed'))`

// jobRowColumns are the job's own columns, scanned by jobRow.
const jobRowColumns = `j.name, j.participants, j.checkpoint_timeout_ms, j.max_concurrent_checkpoints, j.auto_commit,
	j.retention_ms, j.seq, j.created_at, j.updated_at`

// Jobs

// putJobDeletedSQL locks job $1's row, if it exists, and reads whether it was deleted.
const putJobDeletedSQL = "SELECT deleted FROM jobs WHERE name = $1 FOR UPDATE"

// putJobUpsertSQL creates job $1 with configuration $2-$6 or replaces its configuration
// (bumping its version: DESIGN.md, invariant 1), and returns whether it inserted. The clock
// is read once, so that a new job's created_at and updated_at are the same instant.
const putJobUpsertSQL = `
			WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
			INSERT INTO jobs AS j (name, participants, checkpoint_timeout_ms, max_concurrent_checkpoints, auto_commit, retention_ms, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, (SELECT t FROM now), (SELECT t FROM now))
			ON CONFLICT (name) DO UPDATE SET
				participants = EXCLUDED.participants,
				retention_ms = EXCLUDED.retention_ms,
				checkpoint_timeout_ms = EXCLUDED.checkpoint_timeout_ms,
				max_concurrent_checkpoints = EXCLUDED.max_concurrent_checkpoints,
				auto_commit = EXCLUDED.auto_commit,
				created_at = CASE WHEN j.deleted THEN EXCLUDED.created_at ELSE j.created_at END,
				created_seq = CASE WHEN j.deleted THEN j.seq ELSE j.created_seq END,
				updated_at = EXCLUDED.updated_at,
				deleted = false,
				version = j.version + 1
			RETURNING xmax = 0`

// getJobSQL reads job $1 with its epochs, last checkpoint and last committed one.
const getJobSQL = "SELECT " + jobViewColumns + " FROM jobs j WHERE j.name = $1 AND NOT j.deleted"

// listJobsSQL reads up to $2 jobs named after $1 that start with $3 and, unless $4 is
// empty, are named $4, by name.
const listJobsSQL = "SELECT " + jobViewColumns + ` FROM jobs j
	WHERE NOT j.deleted AND j.name > $1 AND starts_with(j.name, $3) AND ($4 = '' OR j.name = $4)
	ORDER BY j.name LIMIT $2`

// deleteCheckpointsSQL deletes job $1's checkpoints, their participants and their
// idempotency keys.
const deleteCheckpointsSQL = `
	WITH p AS (DELETE FROM checkpoint_participants WHERE job = $1),
	k AS (DELETE FROM idempotency_keys WHERE job = $1)
	DELETE FROM checkpoints WHERE job = $1`

// markJobDeletedSQL marks job $1 deleted, keeping its row, so its seq and epochs live on.
const markJobDeletedSQL = "UPDATE jobs SET deleted = true, updated_at = clock_timestamp() WHERE name = $1"

// Epochs

// epochsSQL aggregates job $1's epochs into two arrays, by participant.
const epochsSQL = `SELECT coalesce(array_agg(participant ORDER BY participant), '{}') participants,
		coalesce(array_agg(epoch ORDER BY participant), '{}') epochs
	FROM participant_epochs WHERE job = $1`

// setEpochSQL sets participant $2's epoch in job $1 to $3, registered at $4.
const setEpochSQL = `
		INSERT INTO participant_epochs (job, participant, epoch, registered_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (job, participant) DO UPDATE SET epoch = EXCLUDED.epoch, registered_at = EXCLUDED.registered_at`

// participantsSQL is what GET /v1/jobs/{job}/participants shows of each of job $1's
// participants $2 (its configured ones): epoch and registration, its last vote (by
// checkpoint: the primary key read backwards, stopping at the first vote) and how long
// after its checkpoint's opening it came, its last ack, and how many items its pending
// holds, counted through the index of unacked rows.
const participantsSQL = `
	SELECT p.name, coalesce(e.epoch, 0), e.registered_at, v.voted_at, v.vote_ms, a.acked_at,
		(SELECT count(*) FROM checkpoint_participants o JOIN checkpoints c ON c.job = o.job AND c.id = o.checkpoint_id
			WHERE o.job = $1 AND o.participant = p.name AND o.acked_at IS NULL
			AND ((c.status = 'preparing' AND o.vote IS NULL AND c.deadline > clock_timestamp()) OR c.status = 'committing'
				OR (c.status = 'aborted' AND o.vote = 'prepared')))
	FROM unnest($2::text[]) WITH ORDINALITY AS p(name, ord)
	LEFT JOIN participant_epochs e ON e.job = $1 AND e.participant = p.name
	LEFT JOIN LATERAL (SELECT cp.voted_at, floor(extract(epoch FROM cp.voted_at - c.created_at) * 1000)::bigint AS vote_ms
		FROM checkpoint_participants cp JOIN checkpoints c ON c.job = cp.job AND c.id = cp.checkpoint_id
		WHERE cp.job = $1 AND cp.participant = p.name AND cp.voted_at IS NOT NULL
		ORDER BY cp.checkpoint_id DESC LIMIT 1) v ON true
	LEFT JOIN LATERAL (SELECT cp.acked_at FROM checkpoint_participants cp
		WHERE cp.job = $1 AND cp.participant = p.name AND cp.acked_at IS NOT NULL
		ORDER BY cp.checkpoint_id DESC LIMIT 1) a ON true
	ORDER BY p.ord`

// Reading checkpoints

// preparingSQL reads job $1's preparing checkpoints.
var preparingSQL = checkpointsSQL(`SELECT c.*, c.id AS ord FROM checkpoints c WHERE c.job = $1 AND c.status = 'preparing'`)

// checkpointSQL reads checkpoint $2 of job $1.
var checkpointSQL = checkpointsSQL(`SELECT c.*, 0 AS ord FROM checkpoints c WHERE c.job = $1 AND c.id = $2`)

// mayOweSQL narrows a job's checkpoints (as c) to those on which something may be owed,
// through the partial index of such checkpoints (checkpoints_job_owed, whose predicate is
// this condition, so that the planner can use it): preparing ones (votes), committing ones
// (acks of the commit) and aborted ones whose prepared votes are not all acked
// (owes_rollback). What is owed is found among the job's open work, never by walking its
// history: without it PostgreSQL checks the EXISTS below on every checkpoint of the job, a
// sequential scan once history is large.
const mayOweSQL = `(c.status IN ('preparing', 'committing') OR c.owes_rollback)`

// owingSQL reads job $1's checkpoints where participant $2 (or, if empty, anyone) may still
// owe something.
var owingSQL = checkpointsSQL(`
	SELECT c.*, c.id AS ord FROM checkpoints c
	WHERE c.job = $1 AND ` + mayOweSQL + ` AND EXISTS (
		SELECT 1 FROM checkpoint_participants p
		WHERE p.job = c.job AND p.checkpoint_id = c.id AND p.acked_at IS NULL
		  AND ($2 = '' OR p.participant = $2)
		  AND (c.status IN ('preparing', 'committing') OR (c.status = 'aborted' AND p.vote = 'prepared')))`)

// viewSQL begins a View: job $1 with the clock and its epochs, and owingSQL's checkpoints
// for anyone, one row per participant of them (one row with NULL checkpoint columns when
// there is none, none when the job is missing). In one statement, sent with BEGIN, it is
// all that a participant's pending needs (jobTx.Owing picks the participant's from it), so
// that the long-polls of a fleet cost one round trip and two statements fewer per read.
var viewSQL = `SELECT ` + jobRowColumns + `, j.version, clock_timestamp(), e.participants, e.epochs,
	` + checkpointColumns + `, ` + participantColumns + `
	FROM jobs j
	CROSS JOIN (` + epochsSQL + `) e
	LEFT JOIN ((
		SELECT c.* FROM checkpoints c
		WHERE c.job = $1 AND ` + mayOweSQL + ` AND EXISTS (
			SELECT 1 FROM checkpoint_participants p
			WHERE p.job = c.job AND p.checkpoint_id = c.id AND p.acked_at IS NULL
			  AND (c.status IN ('preparing', 'committing') OR (c.status = 'aborted' AND p.vote = 'prepared')))
		) c JOIN checkpoint_participants p ON p.job = c.job AND p.checkpoint_id = c.id) ON true
	WHERE j.name = $1 AND NOT j.deleted
	ORDER BY c.id, p.position`

// listCheckpointsSQL reads the checkpoints q selects, a page of them: within a job newest
// first, across jobs oldest first; it returns the statement and its arguments.
func listCheckpointsSQL(q coordinator.CheckpointQuery) (string, []any) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	ord, order := "c.seq", "c.seq"
	if q.Job != "" {
		where = append(where, "c.job = "+arg(q.Job))
		if q.After > 0 {
			where = append(where, "c.id < "+arg(q.After))
		}
		ord, order = "-c.id", "c.id DESC"
	} else {
		if q.After > 0 {
			where = append(where, "c.seq > "+arg(q.After))
		}
		if q.OlderThan > 0 {
			where = append(where, "c.created_at < clock_timestamp() - "+arg(q.OlderThan.Microseconds())+" * interval '1 microsecond'")
		}
		if prefix, isPrefix := q.Jobs.Prefix(); isPrefix && prefix != "" {
			where = append(where, "starts_with(c.job, "+arg(prefix)+")")
		} else if !isPrefix && prefix != "" {
			where = append(where, "c.job = "+arg(prefix))
		}
	}
	if len(q.Statuses) > 0 {
		statuses := make([]string, len(q.Statuses))
		for i, st := range q.Statuses {
			statuses[i] = string(st)
		}
		where = append(where, "c.status = ANY("+arg(statuses)+")")
	}
	inner := "SELECT c.*, " + ord + " AS ord FROM checkpoints c"
	if len(where) > 0 {
		inner += " WHERE " + strings.Join(where, " AND ")
	}
	inner += " ORDER BY " + order + " LIMIT " + arg(q.Limit)
	return checkpointsSQL(inner), args
}

// expiredJobsSQL names the jobs with a preparing checkpoint whose deadline has passed.
const expiredJobsSQL = "SELECT DISTINCT job FROM checkpoints WHERE status = 'preparing' AND deadline <= clock_timestamp()"

// getCheckpointSQL reads checkpoint $2 of job $1 outside a transaction (the long-poll read).
var getCheckpointSQL = checkpointsSQL(`
	SELECT c.*, 0 AS ord FROM checkpoints c JOIN jobs j ON j.name = c.job AND NOT j.deleted
	WHERE c.job = $1 AND c.id = $2`)

// jobSeqSQL reads job $1's seq, when getCheckpointSQL found nothing: an id not above it was
// issued, and is no more.
const jobSeqSQL = "SELECT seq FROM jobs WHERE name = $1 AND NOT deleted"

// jobVersionSQL reads job $1's version and the clock, unless it was deleted.
const jobVersionSQL = "SELECT version, clock_timestamp() FROM jobs WHERE name = $1 AND NOT deleted"

// jobExistsSQL tells whether job $1 exists.
const jobExistsSQL = "SELECT EXISTS (SELECT 1 FROM jobs WHERE name = $1 AND NOT deleted)"

// Writing checkpoints

// insertCheckpointSQL is one statement: the checkpoint, its participants, and the job's seq
// if it grows (the embedded store's insertCheckpointSQL, insertParticipantsSQL and
// raiseSeqSQL).
const insertCheckpointSQL = `
		WITH c AS (
			INSERT INTO checkpoints (job, id, status, auto_commit, created_at, deadline, decided_at, completed_at, abort_reason, decided_by, decision_cause)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $11, $12) RETURNING seq),
		p AS (
			INSERT INTO checkpoint_participants (job, checkpoint_id, position, participant)
			SELECT $1, $2, n.ord, n.name FROM unnest($10::text[]) WITH ORDINALITY AS n(name, ord)),
		j AS (
			UPDATE jobs SET seq = $2 WHERE name = $1 AND seq < $2),
		e AS (
			INSERT INTO checkpoint_events (job, checkpoint, rank, status, at) VALUES ($1, $2, ` + rankSQL + `, $3, $5))
		SELECT seq FROM c`

// rankSQL is coordinator.StatusRank of the status $3, as SQL.
const rankSQL = "CASE $3 WHEN 'preparing' THEN 1 WHEN 'committed' THEN 3 ELSE 2 END"

// idempotencyKeySQL reads what Idempotency-Key $2 of job $1 opened.
const idempotencyKeySQL = "SELECT fingerprint, checkpoint_id FROM idempotency_keys WHERE job = $1 AND key = $2"

// keyUnusedSQL checks that Idempotency-Key $2 of job $1 opened nothing, failing the
// transaction (division_by_zero, as lockIfUnchangedSQL) if it did: a cached job's prepare
// assumes so without a read, and this check goes with its writes and COMMIT (DESIGN.md,
// invariant 16).
const keyUnusedSQL = "SELECT 1 / (1 - count(*)) FROM idempotency_keys WHERE job = $1 AND key = $2"

// recordIdempotencyKeySQL records that Idempotency-Key $2 of job $1, with request
// fingerprint $3, opened checkpoint $4.
const recordIdempotencyKeySQL = "INSERT INTO idempotency_keys (job, key, fingerprint, checkpoint_id) VALUES ($1, $2, $3, $4)"

// saveVoteSQL and saveAckSQL record participant $3's vote or ack on checkpoint $2 of job $1,
// with the arguments saveVoteArgs and saveAckArgs give. The status change it causes (the
// deciding vote, the last ack) is merged into the same statement when it follows it
// (saveStatusWithSQL).
const (
	saveVoteSQL = `UPDATE checkpoint_participants SET epoch = $4, vote = $5, reason = $6, committables = $7, voted_at = $8
		WHERE job = $1 AND checkpoint_id = $2 AND participant = $3`
	saveAckSQL = `UPDATE checkpoint_participants SET acked_at = $4, acked_by = $5 WHERE job = $1 AND checkpoint_id = $2 AND participant = $3`
)

// rollbackOwedSQL sets whether aborted checkpoint $2 of job $1 is still owed a rollback: a
// participant that voted prepared has not acked the abort. It runs after the writes that
// abort the checkpoint or ack it, in the same transaction, so it sees them; it changes
// nothing on a checkpoint that is not aborted, or when the answer did not change.
const rollbackOwedSQL = `UPDATE checkpoints c SET owes_rollback = x.owes
	FROM (SELECT EXISTS (
		SELECT 1 FROM checkpoint_participants p
		WHERE p.job = $1 AND p.checkpoint_id = $2 AND p.vote = 'prepared' AND p.acked_at IS NULL) AS owes) x
	WHERE c.job = $1 AND c.id = $2 AND c.status = 'aborted' AND c.owes_rollback <> x.owes`

func saveVoteArgs(job string, id int64, p *coordinator.ParticipantState) []any {
	var committables any // NULL when there are none; otherwise the text column gets the bytes as they are, uncopied
	if p.Committables != nil {
		committables = []byte(p.Committables)
	}
	return []any{job, id, p.Name, p.Epoch, nullable(string(p.Vote)), nullable(p.Reason), committables, p.VotedAt}
}

func saveAckArgs(job string, id int64, p *coordinator.ParticipantState) []any {
	return []any{job, id, p.Name, p.AckedAt, nullable(p.AckedBy)}
}

// participantRow is a participant's columns as participantColumns reads them, and as
// lockJobSQL's JSON names them; NULL is nil.
type participantRow struct {
	Name         *string    `json:"name"`
	Epoch        *int64     `json:"epoch"`
	Vote         *string    `json:"vote"`
	Reason       *string    `json:"reason"`
	Committables *string    `json:"committables"`
	VotedAt      *time.Time `json:"voted_at"`
	AckedAt      *time.Time `json:"acked_at"`
	AckedBy      *string    `json:"acked_by"`
}

// dest is where a row's participantColumns are scanned.
func (r *participantRow) dest() []any {
	return []any{&r.Name, &r.Epoch, &r.Vote, &r.Reason, &r.Committables, &r.VotedAt, &r.AckedAt, &r.AckedBy}
}

// state is the participant's state the row holds.
func (r *participantRow) state() coordinator.ParticipantState {
	p := coordinator.ParticipantState{VotedAt: utc(r.VotedAt), AckedAt: utc(r.AckedAt)}
	if r.Name != nil {
		p.Name = *r.Name
	}
	if r.Epoch != nil {
		p.Epoch = *r.Epoch
	}
	if r.Vote != nil {
		p.Vote = coordinator.VoteKind(*r.Vote)
	}
	if r.Reason != nil {
		p.Reason = *r.Reason
	}
	if r.Committables != nil {
		p.Committables = []byte(*r.Committables)
	}
	if r.AckedBy != nil {
		p.AckedBy = *r.AckedBy
	}
	return p
}

// saveStatusSQL saves checkpoint $2 of job $1's status and decision ($3-$8), records the
// status change for the event streams (at its completion, else its decision), and announces
// it to other processes with payload $9.
const saveStatusSQL = `WITH u AS (
		UPDATE checkpoints SET status = $3, decided_at = $4, completed_at = $5, abort_reason = $6, decided_by = $7, decision_cause = $8
		WHERE job = $1 AND id = $2),
	e AS (
		INSERT INTO checkpoint_events (job, checkpoint, rank, status, at) VALUES ($1, $2, ` + rankSQL + `, $3, coalesce($5, $4)))
	SELECT pg_notify('` + channel + `', $9)`

// saveStatusWithSQL is saveStatusSQL in one statement with the participant write that caused
// it (write, with n parameters, the first two the job and the checkpoint): the status and
// decision are then parameters n+1 to n+6, the payload n+7. They change different tables,
// so neither needs to see the other. The text is built once per write statement (there are
// a few, all constants) and kept: a round has one or two such statements.
func saveStatusWithSQL(write string, n int) string {
	key := statusWithKey{write, n}
	statusWith.mu.RLock()
	sql, ok := statusWith.texts[key]
	statusWith.mu.RUnlock()
	if ok {
		return sql
	}
	sql = buildSaveStatusWithSQL(write, n)
	statusWith.mu.Lock()
	defer statusWith.mu.Unlock()
	if statusWith.texts == nil {
		statusWith.texts = map[statusWithKey]string{}
	}
	statusWith.texts[key] = sql
	return sql
}

type statusWithKey struct {
	write string
	n     int
}

// statusWith holds the texts saveStatusWithSQL built.
var statusWith struct {
	mu    sync.RWMutex
	texts map[statusWithKey]string
}

func buildSaveStatusWithSQL(write string, n int) string {
	status := `UPDATE checkpoints SET status = $` + fmt.Sprint(n+1) + `, decided_at = $` + fmt.Sprint(n+2) +
		`, completed_at = $` + fmt.Sprint(n+3) + `, abort_reason = $` + fmt.Sprint(n+4) + `, decided_by = $` + fmt.Sprint(n+5) +
		`, decision_cause = $` + fmt.Sprint(n+6) + ` WHERE job = $1 AND id = $2`
	st, decided, completed := fmt.Sprint(n+1), fmt.Sprint(n+2), fmt.Sprint(n+3)
	event := `INSERT INTO checkpoint_events (job, checkpoint, rank, status, at) VALUES ($1, $2, ` +
		strings.ReplaceAll(rankSQL, "$3", "$"+st) + `, $` + st + `, coalesce($` + completed + `, $` + decided + `))`
	return `
			WITH w AS (` + write + `), u AS (` + status + `), e AS (` + event + `)
			SELECT pg_notify('` + channel + `', $` + fmt.Sprint(n+7) + `)`
}

// PostgreSQL store only

// commitLockWaitSQL goes just before the COMMIT of a transaction that notifies (DESIGN.md,
// invariant 12): that COMMIT takes PostgreSQL's notification lock, which every notifying
// commit on the server takes in turn for the time of its commit (its WAL flush, a
// synchronous standby's answer). Waiting for it is waiting for the commits ahead of this
// one; failing after lock_timeout would run the batch again behind the same commits, with
// its jobs no longer cached. So the COMMIT waits as long as the batch may (batchTimeout).
// It changes nothing for the statements before it, which took their row locks already.
const commitLockWaitSQL = "SET LOCAL lock_timeout = 0"

// announceSQL announces to other processes that job changed (payload $1, "origin job/0"):
// a checkpoint opened or a participant registered, for the participants waiting on pending.
const announceSQL = "SELECT pg_notify('" + channel + "', $1)"

// listenSQL listens for the decisions other processes announce.
const listenSQL = "LISTEN " + channel

// schemaVersionSQL reads the schema's version, for readiness.
const schemaVersionSQL = "SELECT version, dirty FROM schema_migrations"

// lockJobNowSQL locks job $1's row if no other transaction holds it, and returns its name;
// it returns nothing if the row is locked elsewhere: lockJobSQL never waits for another
// transaction (DESIGN.md, invariant 12).
const lockJobNowSQL = `SELECT l.name FROM jobs l WHERE l.name = $1 FOR UPDATE SKIP LOCKED`

// lockJobSQL locks the job's row, bumps its version and returns it as it stands once the
// lock is granted, with the clock taken once the lock is held (so that a decision is timed
// when it is taken), the job's epochs, its preparing checkpoints and checkpoint $2 whatever
// its status (0: none). The epochs and checkpoints are current only if the version the
// statement's snapshot saw is the one the lock found (DESIGN.md, invariant 7). Last, the
// checkpoints it did not select on which something is owed (owedElsewhereSQL).
var lockJobSQL = `UPDATE jobs j SET version = j.version + 1
	WHERE j.name = $1 AND NOT j.deleted AND j.name IN (` + lockJobNowSQL + `)
	RETURNING ` + jobRowColumns + `, j.version - 1, (SELECT o.version FROM jobs o WHERE o.name = $1), clock_timestamp(),
	(SELECT coalesce(array_agg(e.participant ORDER BY e.participant), '{}') FROM participant_epochs e WHERE e.job = $1),
	(SELECT coalesce(array_agg(e.epoch ORDER BY e.participant), '{}') FROM participant_epochs e WHERE e.job = $1),
	(SELECT coalesce(json_agg(json_build_object(
			'job', c.job, 'id', c.id, 'seq', c.seq, 'status', c.status, 'auto_commit', c.auto_commit,
			'created_at', c.created_at, 'deadline', c.deadline, 'decided_at', c.decided_at,
			'completed_at', c.completed_at, 'abort_reason', c.abort_reason, 'decided_by', c.decided_by,
			'decision_cause', c.decision_cause,
			'participants', (
				SELECT json_agg(json_build_object(
					'name', p.participant, 'epoch', p.epoch, 'vote', p.vote, 'reason', p.reason,
					'committables', p.committables, 'voted_at', p.voted_at, 'acked_at', p.acked_at,
					'acked_by', p.acked_by) ORDER BY p.position)
				FROM checkpoint_participants p WHERE p.job = c.job AND p.checkpoint_id = c.id))
			ORDER BY c.id), '[]')
		FROM (` + openCheckpointsSQL + `) c),
	(` + owedElsewhereSQL + `)`

// stateSQL reads, under the job's lock: the clock (so that a decision is timed when it is
// taken), the job's epochs, the checkpoints it does not select on which something is owed
// (owedElsewhereSQL), and its preparing checkpoints with checkpoint $2 whatever its
// status ($2 = 0: none), one row per participant. With no such checkpoint it returns one
// row, whose checkpoint columns are NULL.
var stateSQL = `SELECT clock_timestamp(), e.participants, e.epochs, (` + owedElsewhereSQL + `), ` + checkpointColumns + `, ` + participantColumns + `
	FROM (` + epochsSQL + `) e
	LEFT JOIN (` + jobCheckpointsSQL + `) ON true
	ORDER BY c.id, p.position`

// lockedJobSQL reads a job whose lock this transaction took already (for an earlier update
// of the batch): its row, then what stateSQL reads, one row per participant of its
// checkpoints, none if the job is missing (deleted by that earlier update).
var lockedJobSQL = `SELECT ` + jobRowColumns + `, clock_timestamp(), e.participants, e.epochs, (` + owedElsewhereSQL + `),
	` + checkpointColumns + `, ` + participantColumns + `
	FROM jobs j
	CROSS JOIN (` + epochsSQL + `) e
	LEFT JOIN (` + jobCheckpointsSQL + `) ON true
	WHERE j.name = $1 AND NOT j.deleted
	ORDER BY c.id, p.position`

// openCheckpointsSQL selects job $1's preparing checkpoints and checkpoint $2 whatever its
// status, each an index lookup; jobCheckpointsSQL joins their participants (c and p).
const openCheckpointsSQL = `SELECT * FROM checkpoints WHERE job = $1 AND status = 'preparing'
	UNION ALL
	SELECT * FROM checkpoints WHERE job = $1 AND id = $2 AND status <> 'preparing'`

// owedElsewhereSQL returns the checkpoints of job $1 that openCheckpointsSQL does not
// select and on which a participant still owes something: a commit (every committing
// checkpoint has a participant that has not acked it), or an abort it prepared for
// (owes_rollback), on a checkpoint other than $2, at most maxCachedCheckpoints+1 of them,
// found through the partial index of checkpoints on which something is owed (mayOweSQL,
// which the index's predicate repeats). Once the jobTx holds each of them too (or there is
// none), it holds every checkpoint anyone owes something on, and the cache can tell a
// participant that owes nothing without a read (DESIGN.md, invariant 14).
var owedElsewhereSQL = `SELECT ARRAY(
		SELECT c.id FROM checkpoints c
		WHERE c.job = $1 AND ` + mayOweSQL + `
		  AND (c.status = 'committing' OR c.owes_rollback) AND c.id <> $2
		LIMIT ` + strconv.Itoa(maxCachedCheckpoints+1) + `)`

const jobCheckpointsSQL = `(` + openCheckpointsSQL + `) c
	JOIN checkpoint_participants p ON p.job = c.job AND p.checkpoint_id = c.id`

// lockIfUnchangedSQL locks job $1 and bumps its version if the version is still $2, and returns the
// clock; it raises division_by_zero, failing the transaction, if the version changed (or
// the job was deleted), or if a preparing checkpoint's deadline lies between $3 (the clock
// the rules use) and the database's clock.
var lockIfUnchangedSQL = `WITH u AS (
		UPDATE jobs SET version = version + 1
		WHERE name = $1 AND version = $2 AND NOT deleted AND NOT EXISTS (
			SELECT 1 FROM checkpoints c WHERE c.job = $1 AND c.status = 'preparing'
			  AND c.deadline BETWEEN least($3::timestamptz, clock_timestamp()) AND greatest($3::timestamptz, clock_timestamp()))
		RETURNING clock_timestamp() AS now)
	SELECT max(now), 1 / count(*) FROM u`

// checkpointsSQL selects checkpoints (the inner query, which must select checkpointColumns
// from checkpoints c and keep their order in an "ord" column) with all their participants,
// one row per participant.
func checkpointsSQL(inner string) string {
	return `SELECT ` + checkpointColumns + `, ` + participantColumns + `
		FROM (` + inner + `) c
		JOIN checkpoint_participants p ON p.job = c.job AND p.checkpoint_id = c.id
		ORDER BY c.ord, p.position`
}

// Tokens

// tokenColumns are a token's columns, in the order scanToken reads them.
const tokenColumns = `name, digest, scopes, job, participant, created_at, expires_at`

// createTokenSQL stores a token ($1 name, $2 digest, $3 scopes, $4 job, $5 participant, $6
// expiry) with the database's clock as its creation time, and bumps the tokens' version in
// the same statement, so that no coordinator misses it. Nothing is stored when the name
// or the digest is taken (unique_violation).
const createTokenSQL = `WITH t AS (
		INSERT INTO tokens (name, digest, scopes, job, participant, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, now(), $6) RETURNING ` + tokenColumns + `),
	v AS (UPDATE token_version SET version = version + 1 WHERE id = 1)
	SELECT ` + tokenColumns + ` FROM t`

// getTokenSQL reads token $1.
const getTokenSQL = `SELECT ` + tokenColumns + ` FROM tokens WHERE name = $1`

// listTokensSQL reads up to $2 tokens (all when NULL) named after $1, by name.
const listTokensSQL = `SELECT ` + tokenColumns + ` FROM tokens WHERE name COLLATE "C" > $1 ORDER BY name COLLATE "C" LIMIT $2`

// deleteTokenSQL deletes token $1 and bumps the tokens' version when it existed; it
// returns the token's name, nothing when there was none.
const deleteTokenSQL = `WITH d AS (DELETE FROM tokens WHERE name = $1 RETURNING name),
	v AS (UPDATE token_version SET version = version + 1 WHERE id = 1 AND EXISTS (SELECT 1 FROM d))
	SELECT name FROM d`

// tokensVersionSQL reads the tokens' version: every coordinator asks it a few times a
// second, to read the tokens again only when they changed.
const tokensVersionSQL = `SELECT version FROM token_version WHERE id = 1`

// Audit

// auditColumns are an audit entry's columns, in the order scanAudit reads them.
const auditColumns = `id, at, action, job, checkpoint, token, subject, reason, request_id`

// insertAuditSQL records an action ($1 at, NULL: the database's clock; $2 action, $3 job,
// $4 checkpoint, $5 token, $6 subject, $7 reason, $8 request id).
const insertAuditSQL = `INSERT INTO audit (at, action, job, checkpoint, token, subject, reason, request_id)
	VALUES (coalesce($1, clock_timestamp()), $2, $3, $4, $5, $6, $7, $8)`

// listAuditSQL reads up to $4 audit entries below id $3 (0: from the newest), newest first:
// those of jobs starting with $1 (and named $5 unless it is empty), and with $2 the token
// actions too (no job).
const listAuditSQL = `SELECT ` + auditColumns + ` FROM audit
	WHERE ($3::bigint = 0 OR id < $3::bigint)
	  AND (job IS NULL AND $2 OR job IS NOT NULL AND starts_with(job, $1) AND ($5 = '' OR job = $5))
	ORDER BY id DESC LIMIT $4`

// Statistics

// openStatsSQL counts the open checkpoints by job and status, with the oldest's opening,
// from the partial index of open checkpoints: its cost grows with what is open, not with
// history.
const openStatsSQL = `SELECT job, status, count(*), min(created_at) FROM checkpoints
	WHERE status IN ('preparing', 'committing') GROUP BY job, status`

// lastCommittedStatsSQL reads each job's last committed checkpoint: one descent of the
// primary key per job, from its newest checkpoint down to the first decided commit.
const lastCommittedStatsSQL = `SELECT j.name, c.id FROM jobs j
	CROSS JOIN LATERAL (SELECT c.id FROM checkpoints c
		WHERE c.job = j.name AND c.status IN ('committing', 'committed') ORDER BY c.id DESC LIMIT 1) c
	WHERE NOT j.deleted`

// Retention

// retentionLockKey is the advisory lock that makes one coordinator at a time delete.
const retentionLockKey = 7262837461

// expiredOfJob is the condition on a checkpoint c of job j that retention deletes: final,
// completed more than the job's retention ago, not the job's last committed checkpoint, and
// not an aborted one still owed an ack. deleteExpiredSQL and jobsToPruneSQL share it, so
// that the jobs named to prune are the jobs a deletion finds something in.
const expiredOfJob = `c.job = j.name AND c.status IN ('committed', 'aborted')
	AND c.completed_at < now() - j.retention_ms * interval '1 millisecond'
	AND c.id <> coalesce((SELECT l.id FROM checkpoints l WHERE l.job = j.name AND l.status IN ('committing', 'committed')
		ORDER BY l.id DESC LIMIT 1), 0)
	AND NOT (c.status = 'aborted' AND EXISTS (
		SELECT 1 FROM checkpoint_participants p
		WHERE p.job = c.job AND p.checkpoint_id = c.id AND p.vote = 'prepared' AND p.acked_at IS NULL))`

// deleteExpiredSQL deletes up to $2 checkpoints that retention removes from the jobs named
// in $1, job after job in name order and oldest completion first in each, by the partial
// index of final checkpoints (so it walks what expired and no other history: a job and its
// cutoff are the index's bounds). It takes the advisory lock $3 only if it can at once,
// and the row of each job it chose from only if it can at once (SKIP LOCKED): a job whose
// row a round holds is left for the next pass. It bumps the version of each job it deleted
// from (DESIGN.md, invariant 1: caches of the job, here and elsewhere, read it again). The
// checkpoints' participants and Idempotency-Keys go with them, in the same statement (no
// foreign key cascades: see migration 000009). It returns whether it got the lock, how
// many checkpoints it chose, the last job it chose from, how many it deleted and the jobs
// it deleted from. One statement for many jobs: a fleet whose jobs each have a few expired
// checkpoints would otherwise pay a statement, and its planning, per job.
const deleteExpiredSQL = `
	WITH g AS MATERIALIZED (SELECT pg_try_advisory_xact_lock($3) AS got),
	cand AS MATERIALIZED (
		SELECT x.job, x.id FROM jobs j CROSS JOIN LATERAL (
			SELECT c.job, c.id, c.completed_at FROM checkpoints c
			WHERE ` + expiredOfJob + `
			ORDER BY c.completed_at LIMIT $2) x
		WHERE j.name = ANY($1) AND NOT j.deleted AND j.retention_ms > 0 AND (SELECT got FROM g)
		ORDER BY j.name, x.completed_at LIMIT $2),
	lk AS MATERIALIZED (
		SELECT name FROM jobs WHERE name IN (SELECT job FROM cand) ORDER BY name FOR UPDATE SKIP LOCKED),
	ok AS MATERIALIZED (SELECT job, id FROM cand WHERE job IN (SELECT name FROM lk)),
	del AS (DELETE FROM checkpoints d USING ok WHERE d.job = ok.job AND d.id = ok.id RETURNING d.job),
	delp AS (DELETE FROM checkpoint_participants p USING ok WHERE p.job = ok.job AND p.checkpoint_id = ok.id),
	delk AS (DELETE FROM idempotency_keys k USING ok WHERE k.job = ok.job AND k.checkpoint_id = ok.id),
	v AS (UPDATE jobs SET version = version + 1 WHERE name IN (SELECT job FROM del))
	SELECT (SELECT got FROM g), (SELECT count(*) FROM cand), coalesce((SELECT max(job) FROM cand), ''),
		(SELECT count(*) FROM del), array(SELECT DISTINCT job FROM del)`

// jobsToPruneSQL names up to $2 jobs after $1, by name, that have a checkpoint which
// deleteExpiredSQL deletes: per job, the first row of the partial index of final
// checkpoints that completed before its retention, skipping the last committed one and
// the aborted ones still owed an ack. Jobs with nothing expired cost an index probe each
// (about 15 ms for 1,000 jobs of 1,000 checkpoints each). The probe is a LATERAL ... LIMIT 1
// rather than an EXISTS: the same plan, estimated at what it costs, where the EXISTS was
// estimated high enough to be compiled by the JIT, which took twice as long as the query.
const jobsToPruneSQL = `
	SELECT j.name FROM jobs j CROSS JOIN LATERAL (
		SELECT 1 FROM checkpoints c
		WHERE ` + expiredOfJob + `
		LIMIT 1) x
	WHERE j.name > $1 AND NOT j.deleted AND j.retention_ms > 0
	ORDER BY j.name LIMIT $2`
