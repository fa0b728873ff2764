package sqlite

import (
	"strings"
	"testing"
)

// TestOwingFoundWithoutWalkingHistory: the read of what is owed finds its checkpoints
// through the partial index on unacked participants and looks each up by id, so that it
// costs the job's open work, not its history. SQLite's plan says so; the checks that
// pending answers right are the conformance tests'.
func TestOwingFoundWithoutWalkingHistory(t *testing.T) {
	t.Parallel()
	st := openMigrated(t)
	rows, err := st.reader.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+owingSQL, "j", "")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	for _, want := range []string{
		"SEARCH c USING INDEX sqlite_autoindex_checkpoints_1 (job=? AND id=?)",
		"SEARCH u USING INDEX checkpoint_participants_unacked (job=?)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the plan of owingSQL has no %q:\n%s", want, text)
		}
	}
}
