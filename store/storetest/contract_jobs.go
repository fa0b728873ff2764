package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/twophase/coordinator/coordinator"
)

func wantConfig(t *testing.T, what string, got, want coordinator.JobConfig) {
	t.Helper()
	if !slices.Equal(got.Participants, want.Participants) || got.CheckpointTimeout != want.CheckpointTimeout ||
		got.MaxConcurrentCheckpoints != want.MaxConcurrentCheckpoints || got.AutoCommit != want.AutoCommit {
		t.Fatalf("%s: config %+v, want %+v", what, got, want)
	}
}

func testPutJobCreateThenUpdate(t *testing.T, b *bundle) {
	first := coordinator.JobConfig{
		Participants:             []string{"zeta", "alpha", "mid-1"},
		CheckpointTimeout:        1234 * time.Millisecond,
		MaxConcurrentCheckpoints: 3,
		AutoCommit:               false,
	}
	job, created, err := b.store.PutJob(b.ctx, "orders", first, nil)
	if err != nil {
		t.Fatalf("PutJob (create): %v", err)
	}
	if !created {
		t.Fatal("PutJob of a new job: created = false, want true")
	}
	if job.Name != "orders" {
		t.Fatalf("PutJob returned job %q, want orders", job.Name)
	}
	wantConfig(t, "PutJob (create) result", job.Config, first)
	if job.CreatedAt.IsZero() || job.UpdatedAt.IsZero() {
		t.Fatalf("PutJob (create): CreatedAt %v, UpdatedAt %v, want both set", job.CreatedAt, job.UpdatedAt)
	}
	got := b.getJob("orders")
	wantConfig(t, "GetJob after create", got.Config, first)
	if got.Seq != 0 || len(got.Epochs) != 0 || got.LastCheckpoint != nil || got.LastCommitted != nil {
		t.Fatalf("new job: Seq %d, Epochs %v, LastCheckpoint %s, LastCommitted %s; want 0, empty, null, null",
			got.Seq, got.Epochs, fmtIDPtr(got.LastCheckpoint), fmtIDPtr(got.LastCommitted))
	}
	if !sameTime(got.CreatedAt, job.CreatedAt) {
		t.Fatalf("GetJob CreatedAt %v, PutJob said %v", got.CreatedAt, job.CreatedAt)
	}

	time.Sleep(20 * time.Millisecond)
	second := coordinator.JobConfig{
		Participants:             []string{"alpha", "beta"},
		CheckpointTimeout:        86400 * time.Second,
		MaxConcurrentCheckpoints: 1,
		AutoCommit:               true,
	}
	job2, created, err := b.store.PutJob(b.ctx, "orders", second, nil)
	if err != nil {
		t.Fatalf("PutJob (update): %v", err)
	}
	if created {
		t.Fatal("PutJob of an existing job: created = true, want false")
	}
	wantConfig(t, "PutJob (update) result", job2.Config, second)
	got = b.getJob("orders")
	wantConfig(t, "GetJob after update", got.Config, second)
	if !sameTime(got.CreatedAt, job.CreatedAt) {
		t.Fatalf("update changed CreatedAt from %v to %v, want it kept", job.CreatedAt, got.CreatedAt)
	}
	if !got.UpdatedAt.After(job.UpdatedAt) {
		t.Fatalf("update: UpdatedAt %v, want after the first %v", got.UpdatedAt, job.UpdatedAt)
	}
	// The whole configuration is replaced, so a false auto-commit is stored as false.
	third := second
	third.AutoCommit = false
	b.putJob("orders", third)
	wantConfig(t, "GetJob after third PutJob", b.getJob("orders").Config, third)
}

func testPutJobUpdateReturnsSeqAndEpochs(t *testing.T, b *bundle) {
	b.putJob("j", config("a", "b"))
	b.update("j", func(tx coordinator.JobTx) error { return setEpoch(b.ctx, tx, "a", 4) })
	b.insert("j", nil)
	b.insert("j", nil)
	job, created, err := b.store.PutJob(b.ctx, "j", config("a", "b", "c"), nil)
	if err != nil || created {
		t.Fatalf("PutJob (update): created %v, err %v; want false, nil", created, err)
	}
	if job.Seq != 2 || job.Epochs["a"] != 4 {
		t.Fatalf("PutJob (update) returned Seq %d, Epochs %v; want the job as stored: Seq 2, a=4", job.Seq, job.Epochs)
	}
}

func testGetJobNotFound(t *testing.T, b *bundle) {
	_, err := b.store.GetJob(b.ctx, "nope")
	wantNotFound(t, "GetJob of a missing job", err)
}

func testGetJobLastCheckpoints(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	check := func(step string, last, committed *int64) {
		t.Helper()
		job := b.getJob("j")
		if fmtIDPtr(job.LastCheckpoint) != fmtIDPtr(last) || fmtIDPtr(job.LastCommitted) != fmtIDPtr(committed) {
			t.Fatalf("%s: LastCheckpoint %s, LastCommitted %s; want %s, %s", step,
				fmtIDPtr(job.LastCheckpoint), fmtIDPtr(job.LastCommitted), fmtIDPtr(last), fmtIDPtr(committed))
		}
	}
	id := func(n int64) *int64 { return &n }
	check("no checkpoint", nil, nil)
	b.insert("j", nil)
	check("1 preparing", id(1), nil)
	b.decide("j", 1, coordinator.StatusAborted, "no")
	check("1 aborted", id(1), nil)
	b.insert("j", nil)
	b.decide("j", 2, coordinator.StatusCommitting, "")
	check("2 committing", id(2), id(2))
	b.insert("j", nil)
	check("3 preparing", id(3), id(2))
	b.decide("j", 3, coordinator.StatusCommitted, "")
	check("3 committed", id(3), id(3))
	b.insert("j", nil)
	b.decide("j", 4, coordinator.StatusAborted, "no")
	check("4 aborted", id(4), id(3))
}

func testListJobsOrderAndPaging(t *testing.T, b *bundle) {
	if jobs, err := b.store.ListJobs(b.ctx, "", "", 10); err != nil || len(jobs) != 0 {
		t.Fatalf("ListJobs on an empty store: %v, %v; want none", jobNames(jobs), err)
	}
	for _, name := range []string{"job-2", "c", "job-10", "a", "e", "b", "d", "gone"} {
		b.putJob(name, config("p"))
	}
	b.update("gone", func(tx coordinator.JobTx) error { return deleteJob(b.ctx, tx) })
	cases := []struct {
		after string
		limit int
		want  []string
	}{
		{"", 100, []string{"a", "b", "c", "d", "e", "job-10", "job-2"}},
		{"", 2, []string{"a", "b"}},
		{"b", 2, []string{"c", "d"}},
		{"d", 2, []string{"e", "job-10"}},
		{"job-10", 2, []string{"job-2"}},
		{"job-2", 2, []string{}},
		{"bb", 100, []string{"c", "d", "e", "job-10", "job-2"}},
	}
	for _, c := range cases {
		jobs, err := b.store.ListJobs(b.ctx, "", c.after, c.limit)
		if err != nil {
			t.Fatalf("ListJobs(%q, %d): %v", c.after, c.limit, err)
		}
		if got := jobNames(jobs); !slices.Equal(got, c.want) {
			t.Fatalf("ListJobs(%q, %d) = %v, want %v (by name, deleted jobs left out)", c.after, c.limit, got, c.want)
		}
	}
}

// testListJobsMixedCase does not impose a collation on upper and lower case names, only
// that paging by the last name returns every job once, in the order of a single listing.
func testListJobsMixedCase(t *testing.T, b *bundle) {
	all := []string{"Beta", "alpha", "ALPHA", "b.x", "b-y", "bz", "A9", "a_1", "Zed", "0day"}
	for _, name := range all {
		b.putJob(name, config("p"))
	}
	whole, err := b.store.ListJobs(b.ctx, "", "", 100)
	if err != nil {
		t.Fatalf("ListJobs: %v", err)
	}
	var paged []string
	after := ""
	for range len(all) + 1 {
		jobs, err := b.store.ListJobs(b.ctx, "", after, 3)
		if err != nil {
			t.Fatalf("ListJobs(%q, 3): %v", after, err)
		}
		if len(jobs) == 0 {
			break
		}
		paged = append(paged, jobNames(jobs)...)
		after = jobs[len(jobs)-1].Name
	}
	if !slices.Equal(paged, jobNames(whole)) {
		t.Fatalf("pages of 3 gave %v, one listing gave %v: paging by name must agree with the listing order", paged, jobNames(whole))
	}
	sorted := slices.Clone(all)
	slices.Sort(sorted)
	got := slices.Clone(paged)
	slices.Sort(got)
	if !slices.Equal(got, sorted) {
		t.Fatalf("listing returned %v, want each of %v exactly once", paged, all)
	}
}

func testListJobsShowsLastCheckpoints(t *testing.T, b *bundle) {
	b.putJob("j", config("a"))
	b.update("j", func(tx coordinator.JobTx) error { return setEpoch(b.ctx, tx, "a", 2) })
	b.insert("j", nil)
	b.decide("j", 1, coordinator.StatusCommitting, "")
	b.insert("j", nil)
	jobs, err := b.store.ListJobs(b.ctx, "", "", 10)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("ListJobs: %v, %v; want job j", jobNames(jobs), err)
	}
	j := jobs[0]
	if fmtIDPtr(j.LastCheckpoint) != "2" || fmtIDPtr(j.LastCommitted) != "1" || j.Epochs["a"] != 2 || j.Seq != 2 {
		t.Fatalf("ListJobs shows LastCheckpoint %s, LastCommitted %s, Epochs %v, Seq %d; want 2, 1, a=2, 2",
			fmtIDPtr(j.LastCheckpoint), fmtIDPtr(j.LastCommitted), j.Epochs, j.Seq)
	}
	wantConfig(t, "ListJobs", j.Config, config("a"))
}

func testSeqContinues(t *testing.T, b *bundle) {
	b.putJob("j", config("a", "b"))
	for range 3 {
		b.insert("j", nil)
	}
	b.view("j", func(tx coordinator.JobTx) error {
		if s := tx.Job().Seq; s != 3 {
			t.Errorf("Job().Seq after three inserts: %d, want 3", s)
		}
		return nil
	})
	b.update("j", func(tx coordinator.JobTx) error {
		if err := setEpoch(b.ctx, tx, "a", 4); err != nil {
			return err
		}
		return setEpoch(b.ctx, tx, "b", 2)
	})
	b.putJob("j", config("a", "b", "c")) // an update keeps Seq
	if s := b.getJob("j").Seq; s != 3 {
		t.Fatalf("Seq after PutJob updated the job: %d, want 3", s)
	}
	b.update("j", func(tx coordinator.JobTx) error { return deleteJob(b.ctx, tx) })
	_, err := b.store.GetJob(b.ctx, "j")
	wantNotFound(t, "GetJob after DeleteJob", err)

	job, created, err := b.store.PutJob(b.ctx, "j", config("a"), nil)
	if err != nil || !created {
		t.Fatalf("PutJob after DeleteJob: created %v, err %v; want true, nil", created, err)
	}
	job = b.getJob("j")
	if job.Seq != 3 || job.Epochs["a"] != 4 || job.Epochs["b"] != 2 {
		t.Fatalf("job created again: Seq %d, Epochs %v; want 3, a=4 b=2 (kept across delete)", job.Seq, job.Epochs)
	}
	if job.LastCheckpoint != nil || job.LastCommitted != nil {
		t.Fatalf("job created again: LastCheckpoint %s, LastCommitted %s; want null (its checkpoints were deleted)",
			fmtIDPtr(job.LastCheckpoint), fmtIDPtr(job.LastCommitted))
	}
	b.view("j", func(tx coordinator.JobTx) error {
		for id := int64(1); id <= 3; id++ {
			if _, err := tx.Checkpoint(b.ctx, id); err != coordinator.ErrNotFound {
				t.Errorf("checkpoint %d of the deleted job: %v, want ErrNotFound", id, err)
			}
		}
		return nil
	})
	if cps, err := b.store.ListCheckpoints(b.ctx, coordinator.CheckpointQuery{Job: "j", Limit: 10}); err != nil || len(cps) != 0 {
		t.Fatalf("ListCheckpoints of the job created again: %v, %v; want none", ids(cps), err)
	}
	cp := b.insert("j", nil)
	if cp.ID != 4 {
		t.Fatalf("first checkpoint after delete and create has id %d, want 4", cp.ID)
	}
	if s := b.getJob("j").Seq; s != 4 {
		t.Fatalf("Seq after that insert: %d, want 4", s)
	}
}
