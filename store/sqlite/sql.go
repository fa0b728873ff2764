package sqlite

import (
	"database/sql"
	"encoding/json"
	"strings"

	"github.com/twophase/coordinator/coordinator"
)

// Every statement of the store, named by what it does. The sections and the names follow
// store/postgres/sql.go, so that a diff of the two shows the dialects; statements only this
// store has are at the end. Times are unix microseconds (micros, fromMicros).

// checkpointColumns select a checkpoint's row (c), in the order queryCheckpoints scans it.
const checkpointColumns = `c.job, c.id, c.seq, c.status, c.auto_commit, c.created_at, c.deadline, c.decided_at, c.completed_at, c.abort_reason, c.decided_by, c.decision_cause`

// jobColumns select a job's row (j) with its epochs as a JSON object.
const jobColumns = `j.name, j.participants, j.checkpoint_timeout_ms, j.max_concurrent_checkpoints, j.auto_commit,
	j.retention_ms, j.seq, j.created_at, j.updated_at,
	(SELECT json_group_object(e.participant, e.epoch) FROM participant_epochs e WHERE e.job = j.name)`

// jobViewColumns are jobColumns and the job's last checkpoint and last committed one.
// The last checkpoint is the highest id issued since the job was created (its seq, once it
// passed created_seq), not the highest still stored: retention may have deleted that one.
const jobViewColumns = jobColumns + `,
	CASE WHEN j.seq > j.created_seq THEN j.seq END,
	(SELECT max(c.id) FROM checkpoints c WHERE c.job = j.name AND c.status IN ('committing', 'committed'))`

// Jobs

// putJobDeletedSQL reads whether a job has a row (none: it is new) and whether it is marked deleted: ? the name.
const putJobDeletedSQL = "SELECT deleted FROM jobs WHERE name = ?"

// putJobUpsertSQL creates a job or replaces its configuration, undeleting it: ?1 name, ?2 participants (JSON), ?3 checkpoint timeout (ms), ?4 max concurrent checkpoints, ?5 auto commit, ?6 now, ?7 retention (ms).
const putJobUpsertSQL = `
	INSERT INTO jobs (name, participants, checkpoint_timeout_ms, max_concurrent_checkpoints, auto_commit, created_at, updated_at, retention_ms)
	VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7)
	ON CONFLICT (name) DO UPDATE SET
		participants = excluded.participants,
		retention_ms = excluded.retention_ms,
		checkpoint_timeout_ms = excluded.checkpoint_timeout_ms,
		max_concurrent_checkpoints = excluded.max_concurrent_checkpoints,
		auto_commit = excluded.auto_commit,
		created_at = CASE WHEN jobs.deleted THEN excluded.created_at ELSE jobs.created_at END,
		created_seq = CASE WHEN jobs.deleted THEN jobs.seq ELSE jobs.created_seq END,
		updated_at = excluded.updated_at,
		deleted = 0`

// getJobSQL selects a job (jobViewColumns) with its last checkpoint and last committed: ? the name.
const getJobSQL = "SELECT " + jobViewColumns + " FROM jobs j WHERE j.name = ? AND NOT j.deleted"

// listJobsSQL selects a page of jobs (jobViewColumns) by name: ?1 the name to list after (exclusive), ?2 the limit, ?3 a prefix of their names, ?4 their name (empty: any).
const listJobsSQL = "SELECT " + jobViewColumns + ` FROM jobs j
	WHERE NOT j.deleted AND j.name > ?1 AND substr(j.name, 1, length(?3)) = ?3 AND (?4 = '' OR j.name = ?4)
	ORDER BY j.name LIMIT ?2`

// viewJobSQL selects the job (jobColumns) a transaction starts with: ? the name.
const viewJobSQL = "SELECT " + jobColumns + " FROM jobs j WHERE j.name = ? AND NOT j.deleted"

// deleteCheckpointsSQL deletes a job's checkpoints (participants and idempotency keys cascade): ? the job.
const deleteCheckpointsSQL = "DELETE FROM checkpoints WHERE job = ?"

// markJobDeletedSQL marks a job deleted, keeping its row (Seq, epochs): ? now, ? the name.
const markJobDeletedSQL = "UPDATE jobs SET deleted = 1, updated_at = ? WHERE name = ?"

// Epochs

// setEpochSQL sets a participant's epoch in a job: ? the job, ? the participant, ? the epoch,
// ? when it registered (microseconds).
const setEpochSQL = `
	INSERT INTO participant_epochs (job, participant, epoch, registered_at) VALUES (?, ?, ?, ?)
	ON CONFLICT (job, participant) DO UPDATE SET epoch = excluded.epoch, registered_at = excluded.registered_at`

// participantSQL is what GET /v1/jobs/{job}/participants shows of participant ?2 of job
// ?1: epoch and registration, its last vote (by checkpoint: the primary key read
// backwards, stopping at the first vote) and how long after its checkpoint's opening it
// came, its last ack, and how many items its pending holds at ?3 (microseconds).
const participantSQL = `
	SELECT coalesce((SELECT epoch FROM participant_epochs WHERE job = ?1 AND participant = ?2), 0),
		(SELECT registered_at FROM participant_epochs WHERE job = ?1 AND participant = ?2),
		v.voted_at, v.voted_at - v.created_at,
		(SELECT cp.acked_at FROM checkpoint_participants cp
			WHERE cp.job = ?1 AND cp.participant = ?2 AND cp.acked_at IS NOT NULL ORDER BY cp.checkpoint_id DESC LIMIT 1),
		(SELECT count(*) FROM checkpoint_participants o JOIN checkpoints c ON c.job = o.job AND c.id = o.checkpoint_id
			WHERE o.job = ?1 AND o.participant = ?2 AND o.acked_at IS NULL
			AND ((c.status = 'preparing' AND o.vote IS NULL AND c.deadline > ?3) OR c.status = 'committing'
				OR (c.status = 'aborted' AND o.vote = 'prepared')))
	FROM (SELECT 1) LEFT JOIN (SELECT cp.voted_at, c.created_at FROM checkpoint_participants cp
		JOIN checkpoints c ON c.job = cp.job AND c.id = cp.checkpoint_id
		WHERE cp.job = ?1 AND cp.participant = ?2 AND cp.voted_at IS NOT NULL
		ORDER BY cp.checkpoint_id DESC LIMIT 1) v`

// Reading checkpoints

// preparingSQL selects a job's preparing checkpoints (checkpointColumns) by id: ? the job.
const preparingSQL = "SELECT " + checkpointColumns + " FROM checkpoints c WHERE c.job = ? AND c.status = 'preparing' ORDER BY c.id"

// checkpointSQL selects one checkpoint of a job (checkpointColumns): ? the job, ? the id.
const checkpointSQL = "SELECT " + checkpointColumns + " FROM checkpoints c WHERE c.job = ? AND c.id = ?"

// owingSQL selects by id the checkpoints (checkpointColumns) where a participant may still owe a vote or an ack: ?1 the job, ?2 the participant (empty: any).
// The checkpoints are found through the partial index on unacked participants, among the
// job's open work and its aborted checkpoints, never by walking its history: without the
// IN, SQLite checks the EXISTS on every checkpoint of the job; without INDEXED BY, it may
// walk every participant row of the job by the primary key.
const owingSQL = `
	SELECT ` + checkpointColumns + ` FROM checkpoints c
	WHERE c.job = ?1 AND c.id IN (
		SELECT u.checkpoint_id FROM checkpoint_participants u INDEXED BY checkpoint_participants_unacked
		WHERE u.job = ?1 AND u.acked_at IS NULL)
	  AND EXISTS (
		SELECT 1 FROM checkpoint_participants p
		WHERE p.job = c.job AND p.checkpoint_id = c.id AND p.acked_at IS NULL
		  AND (?2 = '' OR p.participant = ?2)
		  AND (c.status IN ('preparing', 'committing') OR (c.status = 'aborted' AND p.vote = 'prepared')))
	ORDER BY c.id`

// participantsSQL selects the participants of a set of checkpoints, even across jobs, in position order: ? the checkpoints' seqs (JSON array).
const participantsSQL = `
	SELECT p.job, p.checkpoint_id, p.participant, p.epoch, p.vote, p.reason, p.committables, p.voted_at, p.acked_at, p.acked_by
	FROM json_each(?) AS k
	JOIN checkpoints c ON c.seq = k.value
	JOIN checkpoint_participants p ON p.job = c.job AND p.checkpoint_id = c.id
	ORDER BY p.job, p.checkpoint_id, p.position`

// The fixed parts of listJobCheckpointsSQL and listAllCheckpointsSQL.
const (
	listCheckpointsFromSQL          = "SELECT " + checkpointColumns + " FROM checkpoints c"
	listCheckpointsOfJobSQL         = "c.job = ?"
	listCheckpointsBelowIDSQL       = "c.id < ?"
	listCheckpointsAfterSeqSQL      = "c.seq > ?"
	listCheckpointsOfPrefixSQL      = "substr(c.job, 1, length(?)) = ?"
	listCheckpointsCreatedBeforeSQL = "c.created_at < ?"
	listJobCheckpointsOrderSQL      = "c.id DESC"
	listAllCheckpointsOrderSQL      = "c.seq"
)

// listJobCheckpointsSQL selects a page of a job's checkpoints (checkpointColumns), newest first: ? the job, ? the id to list below if below, one ? per status if statuses > 0 (else any status), ? the limit.
func listJobCheckpointsSQL(below bool, statuses int) string {
	where := []string{listCheckpointsOfJobSQL}
	if below {
		where = append(where, listCheckpointsBelowIDSQL)
	}
	return listCheckpointsSQL(where, statuses, listJobCheckpointsOrderSQL)
}

// listAllCheckpointsSQL selects a page of every job's checkpoints (checkpointColumns), oldest first by seq: ? a time (created before it) if createdBefore, ? the job if ofJob, ? and ? its prefix if ofPrefix, ? the seq to list after if after, one ? per status if statuses > 0 (else any status), ? the limit.
func listAllCheckpointsSQL(ofJob, ofPrefix, after, createdBefore bool, statuses int) string {
	var where []string
	if createdBefore {
		where = append(where, listCheckpointsCreatedBeforeSQL)
	}
	if ofJob {
		where = append(where, listCheckpointsOfJobSQL)
	}
	if ofPrefix {
		where = append(where, listCheckpointsOfPrefixSQL)
	}
	if after {
		where = append(where, listCheckpointsAfterSeqSQL)
	}
	return listCheckpointsSQL(where, statuses, listAllCheckpointsOrderSQL)
}

// listCheckpointsSQL is listCheckpointsFromSQL with the conditions where and a filter of statuses (one ?
// each), in order, and LIMIT ?.
func listCheckpointsSQL(where []string, statuses int, order string) string {
	if statuses > 0 {
		where = append(where, "c.status IN ("+strings.Repeat("?, ", statuses-1)+"?)")
	}
	query := listCheckpointsFromSQL
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	return query + " ORDER BY " + order + " LIMIT ?"
}

// expiredJobsSQL selects the jobs with a preparing checkpoint past its deadline: ? now.
const expiredJobsSQL = "SELECT DISTINCT job FROM checkpoints WHERE status = 'preparing' AND deadline <= ?"

// Writing checkpoints

// insertCheckpointSQL inserts a checkpoint and returns its seq: ? job, ? id, ? status, ? auto commit, ? created at, ? deadline, ? decided at, ? completed at, ? abort reason, ? decided by, ? decision cause.
const insertCheckpointSQL = `
	INSERT INTO checkpoints (job, id, status, auto_commit, created_at, deadline, decided_at, completed_at, abort_reason, decided_by, decision_cause)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq`

// insertParticipantsSQL inserts a checkpoint's participants, at positions from 1: ? the job, ? the checkpoint, ? the names (JSON array).
const insertParticipantsSQL = `
	INSERT INTO checkpoint_participants (job, checkpoint_id, position, participant)
	SELECT ?, ?, n.key + 1, n.value FROM json_each(?) AS n`

// raiseSeqSQL sets a job's seq, to a new checkpoint's id when that is higher: ? the seq, ? the job.
const raiseSeqSQL = "UPDATE jobs SET seq = ? WHERE name = ?"

// idempotencyKeySQL reads an idempotency key's record: ? the job, ? the key.
const idempotencyKeySQL = "SELECT fingerprint, checkpoint_id FROM idempotency_keys WHERE job = ? AND key = ?"

// recordIdempotencyKeySQL records an idempotency key: ? the job, ? the key, ? the fingerprint, ? the checkpoint.
const recordIdempotencyKeySQL = "INSERT INTO idempotency_keys (job, key, fingerprint, checkpoint_id) VALUES (?, ?, ?, ?)"

// saveVoteSQL saves a participant's vote: ?1 job, ?2 checkpoint, ?3 participant, ?4 epoch, ?5 vote, ?6 reason, ?7 committables (JSON), ?8 voted at.
const saveVoteSQL = `
	UPDATE checkpoint_participants SET epoch = ?4, vote = ?5, reason = ?6, committables = ?7, voted_at = ?8
	WHERE job = ?1 AND checkpoint_id = ?2 AND participant = ?3`

// saveAckSQL saves a participant's ack: ?1 job, ?2 checkpoint, ?3 participant, ?4 acked at, ?5 acked by.
const saveAckSQL = "UPDATE checkpoint_participants SET acked_at = ?4, acked_by = ?5 WHERE job = ?1 AND checkpoint_id = ?2 AND participant = ?3"

func saveVoteArgs(job string, id int64, p *coordinator.ParticipantState) []any {
	var committables any
	if p.Committables != nil {
		committables = string(p.Committables)
	}
	return []any{job, id, p.Name, p.Epoch, nullable(string(p.Vote)), nullable(p.Reason), committables, micros(p.VotedAt)}
}

func saveAckArgs(job string, id int64, p *coordinator.ParticipantState) []any {
	return []any{job, id, p.Name, micros(p.AckedAt), nullable(p.AckedBy)}
}

// participantRow is a participant's columns as participantsSQL reads them after the job and
// the checkpoint id; NULL is the zero value.
type participantRow struct {
	name                    string
	epoch, votedAt, ackedAt sql.NullInt64
	vote, reason, ackedBy   sql.NullString
	committables            sql.NullString
}

// dest is where a row's participant columns are scanned.
func (r *participantRow) dest() []any {
	return []any{&r.name, &r.epoch, &r.vote, &r.reason, &r.committables, &r.votedAt, &r.ackedAt, &r.ackedBy}
}

// state is the participant's state the row holds.
func (r *participantRow) state() coordinator.ParticipantState {
	p := coordinator.ParticipantState{Name: r.name, Epoch: r.epoch.Int64, Vote: coordinator.VoteKind(r.vote.String), Reason: r.reason.String,
		VotedAt: optionalTime(r.votedAt), AckedAt: optionalTime(r.ackedAt), AckedBy: r.ackedBy.String}
	if r.committables.Valid {
		p.Committables = json.RawMessage(r.committables.String)
	}
	return p
}

// saveStatusSQL saves a checkpoint's decision: ?1 job, ?2 id, ?3 status, ?4 decided at, ?5 completed at, ?6 abort reason, ?7 decided by, ?8 decision cause.
const saveStatusSQL = `
	UPDATE checkpoints SET status = ?3, decided_at = ?4, completed_at = ?5, abort_reason = ?6, decided_by = ?7, decision_cause = ?8
	WHERE job = ?1 AND id = ?2`

// Embedded store only

// savepointSQL opens the savepoint of one update of a group commit (committer.go); no parameters.
const savepointSQL = "SAVEPOINT update_op"

// rollbackToSavepointSQL undoes a failed update of a group commit, back to its savepoint; no parameters.
const rollbackToSavepointSQL = "ROLLBACK TO update_op"

// releaseSavepointSQL ends an update's savepoint, keeping what it wrote; no parameters.
const releaseSavepointSQL = "RELEASE update_op"

// migrationsTableSQL counts the tables named ? (golang-migrate's table): 0 before any migration.
const migrationsTableSQL = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?"

// schemaVersionSQL reads the schema version and dirty flag golang-migrate records in table (its migrations table); no ? parameters.
func schemaVersionSQL(table string) string { return "SELECT version, dirty FROM " + table + " LIMIT 1" }

// Tokens

// tokenColumns are a token's columns, in the order scanToken reads them.
const tokenColumns = `name, digest, scopes, job, participant, created_at, expires_at`

// createTokenSQL stores a token: ? name, ? digest, ? scopes (JSON array), ? job, ? participant, ? created at, ? expires at.
const createTokenSQL = `INSERT INTO tokens (` + tokenColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?)`

// bumpTokensVersionSQL records that the tokens changed, in the transaction that changed them; no parameters.
const bumpTokensVersionSQL = `UPDATE token_version SET version = version + 1 WHERE id = 1`

// getTokenSQL selects a token: ? its name.
const getTokenSQL = `SELECT ` + tokenColumns + ` FROM tokens WHERE name = ?`

// listTokensSQL selects tokens by name: ? the name to list after (exclusive), ? the limit (-1: no limit).
const listTokensSQL = `SELECT ` + tokenColumns + ` FROM tokens WHERE name > ? ORDER BY name LIMIT ?`

// deleteTokenSQL deletes a token: ? its name.
const deleteTokenSQL = `DELETE FROM tokens WHERE name = ?`

// tokensVersionSQL selects the tokens' version; no parameters.
const tokensVersionSQL = `SELECT version FROM token_version WHERE id = 1`

// Audit

// insertAuditSQL records an action: ? at, ? action, ? job, ? checkpoint, ? token, ? subject, ? reason, ? request id.
const insertAuditSQL = `INSERT INTO audit (at, action, job, checkpoint, token, subject, reason, request_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`

// listAuditSQL selects audit entries newest first: ?1 a prefix of their jobs, ?2 whether token actions (no job) are in, ?3 the id to list below (0: from the newest), ?4 the limit, ?5 their job (empty: any).
const listAuditSQL = `SELECT id, at, action, job, checkpoint, token, subject, reason, request_id FROM audit
	WHERE (?3 = 0 OR id < ?3)
	  AND (job IS NULL AND ?2 OR job IS NOT NULL AND substr(job, 1, length(?1)) = ?1 AND (?5 = '' OR job = ?5))
	ORDER BY id DESC LIMIT ?4`

// Statistics

// openStatsSQL counts the open checkpoints by job and status, with the oldest's opening; no parameters.
const openStatsSQL = `SELECT job, status, count(*), min(created_at) FROM checkpoints
	WHERE status IN ('preparing', 'committing') GROUP BY job, status`

// lastCommittedStatsSQL selects each job's last committed checkpoint; no parameters.
const lastCommittedStatsSQL = `SELECT j.name, (SELECT max(c.id) FROM checkpoints c
		WHERE c.job = j.name AND c.status IN ('committing', 'committed')) AS id
	FROM jobs j WHERE NOT j.deleted AND id IS NOT NULL`

// Retention

// jobsToPruneSQL names up to ?3 jobs after ?1, by name, that have a checkpoint which
// deleteExpiredSQL deletes at ?2 (the partial index of final checkpoints, per job).
const jobsToPruneSQL = `SELECT j.name FROM jobs j
	WHERE j.name > ?1 AND NOT j.deleted AND j.retention_ms > 0 AND EXISTS (
		SELECT 1 FROM checkpoints c
		WHERE c.job = j.name AND c.status IN ('committed', 'aborted')
		  AND c.completed_at < ?2 - j.retention_ms * 1000
		  AND c.id <> coalesce((SELECT max(l.id) FROM checkpoints l WHERE l.job = j.name AND l.status IN ('committing', 'committed')), 0)
		  AND NOT (c.status = 'aborted' AND EXISTS (
			SELECT 1 FROM checkpoint_participants p
			WHERE p.job = c.job AND p.checkpoint_id = c.id AND p.vote = 'prepared' AND p.acked_at IS NULL)))
	ORDER BY j.name LIMIT ?3`

// deleteExpiredSQL deletes up to ?3 of job ?1's checkpoints that retention removes, oldest
// completion first (the partial index of final checkpoints): final, owing nothing,
// completed before ?2 minus the job's retention, not the job's last committed one.
const deleteExpiredSQL = `DELETE FROM checkpoints WHERE seq IN (
	SELECT c.seq FROM checkpoints c JOIN jobs j ON j.name = c.job
	WHERE c.job = ?1 AND NOT j.deleted AND j.retention_ms > 0 AND c.status IN ('committed', 'aborted')
	  AND c.completed_at < ?2 - j.retention_ms * 1000
	  AND c.id <> coalesce((SELECT max(l.id) FROM checkpoints l WHERE l.job = ?1 AND l.status IN ('committing', 'committed')), 0)
	  AND NOT (c.status = 'aborted' AND EXISTS (
		SELECT 1 FROM checkpoint_participants p
		WHERE p.job = c.job AND p.checkpoint_id = c.id AND p.vote = 'prepared' AND p.acked_at IS NULL))
	ORDER BY c.completed_at LIMIT ?3)`
