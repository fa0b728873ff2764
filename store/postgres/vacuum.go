package postgres

import (
	"context"
	"fmt"
	"strings"
)

// vacuumedTables are the coordinator's tables that every round updates: each vote, ack
// and decision leaves a dead row version behind, which only vacuum reclaims. Without it
// the tables and their indexes grow with every round, and the hot paths slow down with
// them.
var vacuumedTables = []string{"jobs", "checkpoints", "checkpoint_participants", "idempotency_keys"}

// VacuumWarnings reports what keeps PostgreSQL from vacuuming the coordinator's tables on
// its own: autovacuum turned off for the whole server, or for one of those tables
// (autovacuum_enabled = false). Each is a sentence for the operator; none means
// autovacuum runs.
func (s *Store) VacuumWarnings(ctx context.Context) ([]string, error) {
	var server string
	if err := s.pool.QueryRow(ctx, `SELECT current_setting('autovacuum')`).Scan(&server); err != nil {
		return nil, fmt.Errorf("read autovacuum: %w", err)
	}
	var warnings []string
	if server != "on" {
		warnings = append(warnings, "autovacuum is off on this PostgreSQL server (autovacuum = "+server+
			"): the coordinator's tables keep a dead row for every vote, ack and decision, and grow and slow down "+
			"until they are vacuumed; turn it on, or run VACUUM on them regularly")
	}
	rows, err := s.pool.Query(ctx, `
		SELECT c.relname
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relname = ANY($1)
		  AND EXISTS (SELECT 1 FROM unnest(c.reloptions) o WHERE lower(o) IN ('autovacuum_enabled=false', 'autovacuum_enabled=off', 'autovacuum_enabled=0', 'autovacuum_enabled=no'))
		ORDER BY c.relname`, vacuumedTables)
	if err != nil {
		return nil, fmt.Errorf("read the tables' autovacuum settings: %w", err)
	}
	var off []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return nil, err
		}
		off = append(off, name)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(off) > 0 {
		warnings = append(warnings, "autovacuum is turned off for the table(s) "+strings.Join(off, ", ")+
			" (autovacuum_enabled = false): they keep a dead row for every vote, ack and decision until vacuumed; "+
			"ALTER TABLE ... RESET (autovacuum_enabled), or run VACUUM on them regularly")
	}
	return warnings, nil
}
