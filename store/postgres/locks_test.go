package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twophase/coordinator/coordinator"
)

// lockRow locks job's row from a connection of its own, as an operator's
// SELECT ... FOR UPDATE in psql would, until the returned function is called.
func lockRow(t *testing.T, url, job string) (release func()) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var name string
	if err := tx.QueryRow(t.Context(), "SELECT name FROM jobs WHERE name = $1 FOR UPDATE", job).Scan(&name); err != nil {
		t.Fatal(err)
	}
	released := false
	release = func() {
		if !released {
			released = true
			_ = tx.Rollback(context.Background())
			_ = conn.Close(context.Background())
		}
	}
	t.Cleanup(release)
	return release
}

func putJob(t *testing.T, s *coordinator.Service, name string, timeout time.Duration) {
	t.Helper()
	cfg := coordinator.JobConfig{Participants: []string{"pa"}, CheckpointTimeout: timeout, MaxConcurrentCheckpoints: 1, AutoCommit: true}
	if _, _, err := s.PutJob(t.Context(), name, cfg); err != nil {
		t.Fatal(err)
	}
}

func epochOf(t *testing.T, s *coordinator.Service, job, participant string) int64 {
	t.Helper()
	j, err := s.GetJob(t.Context(), job)
	if err != nil {
		t.Fatal(err)
	}
	return j.Epochs[participant]
}

// unavailableSaying checks that err is a 503 whose detail says what it must.
func unavailableSaying(t *testing.T, what string, err error, says string) {
	t.Helper()
	var e *coordinator.Error
	if !errors.As(err, &e) || e.Code != coordinator.CodeUnavailable || !strings.Contains(e.Message, says) {
		t.Fatalf("%s: %v, want unavailable saying %q", what, err, says)
	}
}

// A job whose row is locked elsewhere fails alone: with two jobs locked (as many as the
// store has writers), other jobs' updates go through while the locks are held, and an
// update of a locked job whose caller gives up is answered "not applied", and is not
// applied once the lock is released. One of the locked jobs has its state cached (an
// update before the lock), the other not.
func TestLockedJobsFailAlone(t *testing.T) {
	t.Parallel()
	stores, url := openStoresURL(t, 1)
	s := coordinator.NewService(stores[0], nil)
	locked := []string{"a-cached", "b-read"}
	for _, job := range append([]string{"free-1", "free-2"}, locked...) {
		putJob(t, s, job, time.Hour)
	}
	if _, err := s.Register(t.Context(), "a-cached", "pa"); err != nil {
		t.Fatal(err)
	}
	before := map[string]int64{}
	gaveUp := map[string]chan error{}
	var releases []func()
	for _, job := range locked {
		before[job] = epochOf(t, s, job, "pa")
		releases = append(releases, lockRow(t, url, job))
		// The cached job's first attempt waits for the lock (up to lock_timeout) in a
		// transaction whose COMMIT is already sent: a deadline falling in that wait is
		// rightly answered "may have been applied". The deadline is set well after it, so
		// that the caller gives up while the update is set aside, never run.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		t.Cleanup(cancel)
		gaveUp[job] = make(chan error, 1)
		go func() { _, err := s.Register(ctx, job, "pa"); gaveUp[job] <- err }()
	}
	// Other jobs, while the locks are held: whole rounds. The cap only keeps a stalled
	// store from hanging the test; with the locks held, a stall lasts until they go.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, free := range []string{"free-1", "free-2"} {
		pending, err := s.Register(ctx, free, "pa")
		if err != nil {
			t.Fatalf("register %s while other jobs are locked: %v", free, err)
		}
		cp, _, err := s.Prepare(ctx, free, coordinator.PrepareRequest{})
		if err != nil {
			t.Fatalf("prepare %s: %v", free, err)
		}
		if cp, err = s.Vote(ctx, free, cp.ID, "pa", coordinator.Vote{Epoch: pending.Epoch, Kind: coordinator.VotePrepared}); err != nil || cp.Status != coordinator.StatusCommitting {
			t.Fatalf("vote on %s: %v, %v", free, cp, err)
		}
		if _, err := s.Ack(ctx, free, cp.ID, "pa", pending.Epoch); err != nil {
			t.Fatalf("ack on %s: %v", free, err)
		}
	}
	for _, job := range locked {
		unavailableSaying(t, job+": register while its row is locked", <-gaveUp[job], "nothing of it was")
	}
	for _, release := range releases {
		release()
	}
	// Once released, the jobs work again, and the registrations that gave up were not
	// applied: the next one gives the epoch after the one before them.
	for _, job := range locked {
		pending, err := s.Register(t.Context(), job, "pa")
		if err != nil {
			t.Fatalf("%s: register after the release: %v", job, err)
		}
		if pending.Epoch != before[job]+1 {
			t.Fatalf("%s: epoch %d after the release, want %d: the registration answered not applied was applied", job, pending.Epoch, before[job]+1)
		}
	}
}

// The sweeper aborts every other expired checkpoint while one job's row is locked, and the
// locked job's once it is released.
func TestSweepGoesPastALockedJob(t *testing.T) {
	t.Parallel()
	stores, url := openStoresURL(t, 1)
	s := coordinator.NewService(stores[0], nil)
	ids := map[string]int64{}
	for _, job := range []string{"locked", "other-1", "other-2"} {
		putJob(t, s, job, 100*time.Millisecond)
		if _, err := s.Register(t.Context(), job, "pa"); err != nil {
			t.Fatal(err)
		}
		cp, _, err := s.Prepare(t.Context(), job, coordinator.PrepareRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids[job] = cp.ID
	}
	release := lockRow(t, url, "locked")
	time.Sleep(150 * time.Millisecond) // past every deadline
	if _, err := s.SweepExpired(t.Context()); err == nil {
		t.Error("SweepExpired reported no error while a job could not be swept")
	}
	status := func(job string) coordinator.Status {
		cp, err := s.GetCheckpoint(t.Context(), job, ids[job], 0)
		if err != nil {
			t.Fatal(err)
		}
		return cp.Status
	}
	for _, job := range []string{"other-1", "other-2"} {
		if st := status(job); st != coordinator.StatusAborted {
			t.Errorf("%s is %s after a sweep while another job was locked, want aborted", job, st)
		}
	}
	if st := status("locked"); st != coordinator.StatusPreparing {
		t.Errorf("the locked job's checkpoint is %s while its row is locked", st)
	}
	release()
	if n, err := s.SweepExpired(t.Context()); err != nil || n != 1 {
		t.Fatalf("sweep after the release: %d jobs, %v; want 1", n, err)
	}
	if st := status("locked"); st != coordinator.StatusAborted {
		t.Errorf("the locked job's checkpoint is %s after the release and a sweep, want aborted", st)
	}
}

// A row locked by hand that is not a job's (a checkpoint participant's) fails the update
// that needs it after lock_timeout, answered unavailable with nothing applied, and holds no
// other job's update.
func TestLockedCheckpointRowFailsTheUpdateAlone(t *testing.T) {
	t.Parallel()
	stores, url := openStoresURL(t, 1)
	s := coordinator.NewService(stores[0], nil)
	for _, job := range []string{"held", "free"} {
		putJob(t, s, job, time.Hour)
	}
	pending, err := s.Register(t.Context(), "held", "pa")
	if err != nil {
		t.Fatal(err)
	}
	cp, _, err := s.Prepare(t.Context(), "held", coordinator.PrepareRequest{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if _, err := tx.Exec(t.Context(), "SELECT 1 FROM checkpoint_participants WHERE job = 'held' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = s.Vote(ctx, "held", cp.ID, "pa", coordinator.Vote{Epoch: pending.Epoch, Kind: coordinator.VotePrepared})
	unavailableSaying(t, "a vote whose participant row is locked elsewhere", err, "locked by another transaction")
	if _, err := s.Register(ctx, "free", "pa"); err != nil {
		t.Fatalf("another job while a checkpoint row is locked: %v", err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetCheckpoint(t.Context(), "held", cp.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v := got.Participant("pa").Vote; v != "" {
		t.Fatalf("the vote answered unavailable was recorded: %q", v)
	}
}
