package sqlite

import (
	"path/filepath"
	"testing"
)

// openMigrated opens a store on a new data directory, migrated, closed when t ends.
func openMigrated(t *testing.T) *Store {
	t.Helper()
	st, err := Open(t.Context(), filepath.Join(t.TempDir(), "data"), Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// Every connection must fsync on commit (synchronous=FULL is per connection), enforce
// foreign keys and wait on busy locks; the file must be in WAL mode; readers must refuse
// writes.
func TestConnectionSettings(t *testing.T) {
	t.Parallel()
	st := openMigrated(t)
	for name, db := range map[string]interface {
		querier
	}{"writer": st.writer, "reader": st.reader} {
		for pragma, want := range map[string]string{
			"journal_mode": "wal",
			"synchronous":  "2",
			"foreign_keys": "1",
			"busy_timeout": "5000",
		} {
			var got string
			if err := db.QueryRowContext(t.Context(), "PRAGMA "+pragma).Scan(&got); err != nil {
				t.Fatal(name, pragma, err)
			}
			if got != want {
				t.Errorf("%s: PRAGMA %s = %s, want %s", name, pragma, got, want)
			}
		}
	}
	if _, err := st.reader.ExecContext(t.Context(), "UPDATE jobs SET seq = 1"); err == nil {
		t.Error("a read connection wrote")
	}
}
