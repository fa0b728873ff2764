package postgres

import "testing"

// A decision merged with the vote that caused it reuses the statement's text: built once
// per write statement, the same text as built afresh, and no allocation after the first.
func TestSaveStatusWithSQLIsKept(t *testing.T) {
	n := 8 // saveVoteArgs
	want := buildSaveStatusWithSQL(saveVoteSQL, n)
	if got := saveStatusWithSQL(saveVoteSQL, n); got != want {
		t.Fatalf("saveStatusWithSQL:\n%s\nwant\n%s", got, want)
	}
	if got := saveStatusWithSQL(saveAckSQL, 5); got != buildSaveStatusWithSQL(saveAckSQL, 5) {
		t.Fatalf("another write statement got the first one's text:\n%s", got)
	}
	if allocs := testing.AllocsPerRun(100, func() { saveStatusWithSQL(saveVoteSQL, n) }); allocs != 0 {
		t.Errorf("saveStatusWithSQL allocates %.0f times per call once built, want 0", allocs)
	}
}
